package layout

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/ibkube/ibkube/"

// allowed lists, for each part of the tree, the parts of the module its
// library code may import (README.md, "Layout"). A prefix ending in "/"
// covers a subtree; one without covers that package only.
var allowed = []struct {
	part string
	may  []string
}{
	{"contract", nil},
	{"internal/", []string{"internal/", "contract"}},
	{"hca/", []string{"hca/", "internal/", "contract"}},
	{"nccl", []string{"contract", "internal/"}},
	{"nccl/machine", []string{"nccl", "contract"}},
	{"node/", []string{"node/", "hca/", "nccl/machine", "internal/", "contract"}},
	{"cni/", []string{"cni/", "hca/", "internal/", "contract"}},
	{"webhook/", []string{"webhook/", "nccl", "internal/", "contract"}},
	// Test helpers sit above the product they exercise (the policy corpus
	// runs webhook/mutate), below cmd/ and test/ that import them.
	{"internal/testing/", []string{"internal/", "contract", "hca/", "nccl", "nccl/", "node/", "cni/", "webhook/"}},
}

// constructors build API clients or event broadcasters: only binaries call
// them, so that a library never connects by itself and takes narrow
// interfaces (or a client handed in) instead. "" matches every function.
var constructors = map[string][]string{
	"k8s.io/client-go/kubernetes":      {"NewForConfig", "NewForConfigOrDie", "NewForConfigAndClient"},
	"k8s.io/client-go/rest":            {"InClusterConfig"},
	"k8s.io/client-go/tools/record":    {"NewBroadcaster"},
	"k8s.io/client-go/tools/clientcmd": {""},
}

func TestImportGraphReadsTopDown(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	checked := 0
	// test/ and hack/ are test harnesses and tools, not the product.
	err := walkGo(root, []string{"test", "hack"}, func(path, rel string) error {
		if strings.HasSuffix(path, "_test.go") {
			return nil
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		// internal/testing/testenv is the test suites' envtest starter: like a
		// binary, it is the edge where a test's clients are built.
		if !strings.HasPrefix(pkg, "cmd/") && pkg != "internal/testing/testenv" {
			for _, call := range clientConstructors(f) {
				t.Errorf("%s calls %s: build API clients in cmd/ and pass a narrow interface in", rel, call)
			}
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			target, ok := strings.CutPrefix(ip, module)
			if ok && strings.HasPrefix(target, "internal/testing/") && !strings.HasPrefix(pkg, "internal/testing/") {
				t.Errorf("%s imports %s: internal/testing/ is for tests only (a _test.go file, or test/)", rel, target)
				continue
			}
			if !ok || target == pkg || strings.HasPrefix(pkg, "cmd/") {
				continue
			}
			if !mayImport(pkg, target) {
				t.Errorf("%s imports %s, which %s may not (README.md, Layout)", rel, target, pkg)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files: the walk missed the tree", checked)
	}
}

// clientConstructors lists the calls in f to one of constructors.
func clientConstructors(f *ast.File) []string {
	names := map[string]string{} // local name -> import path
	for _, imp := range f.Imports {
		ip, _ := strconv.Unquote(imp.Path.Value)
		if _, ok := constructors[ip]; !ok {
			continue
		}
		name := path.Base(ip)
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = ip
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		ip, ok := names[id.Name]
		if !ok {
			return true
		}
		for _, fn := range constructors[ip] {
			if fn == "" || fn == sel.Sel.Name {
				out = append(out, ip+"."+sel.Sel.Name)
			}
		}
		return true
	})
	return out
}

// TestCLILinksNoClientset keeps the offline CLI (inject, node, doctor) free
// of the typed Kubernetes clients (it talks to no API server) and of the NRI
// stub (it registers with no runtime; node/nri is the agent's alone).
func TestCLILinksNoClientset(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool in PATH")
	}
	out, err := exec.Command(goTool, "list", "-deps", module+"cmd/ibkube").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "k8s.io/client-go/kubernetes" || strings.HasPrefix(dep, "k8s.io/client-go/kubernetes/") || dep == "github.com/containerd/nri/pkg/stub" {
			t.Fatalf("cmd/ibkube links %s", dep)
		}
	}
}

// mayImport applies the most specific rule for pkg.
func mayImport(pkg, target string) bool {
	best, rule := -1, []string(nil)
	for _, a := range allowed {
		if covers(a.part, pkg) && len(a.part) > best {
			best, rule = len(a.part), a.may
		}
	}
	if best < 0 {
		return false
	}
	for _, m := range rule {
		if covers(m, target) {
			return true
		}
	}
	return false
}

func covers(prefix, pkg string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(pkg, prefix)
	}
	return pkg == prefix
}
