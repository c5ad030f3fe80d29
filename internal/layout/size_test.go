package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// Core packages keep every function small enough to read at once: deciding
// and applying grow apart into steps instead of together into one function.
const (
	maxFuncLines      = 60
	maxFuncComplexity = 15
)

// cores are the packages whose functions the size rule covers; an entry
// ending in "/" covers every package below it (testdata left out): all of
// webhook/, node/, cmd/, hca/, cni/ and nccl/.
var cores = []string{
	"webhook/",
	"node/",
	"cmd/",
	"hca/",
	"cni/",
	"nccl/",
}

// exceptions are the functions of cores the size rule lets be long, keyed
// "file function", each with the reason it reads better whole.
var exceptions = map[string]string{
	"webhook/policy/cel.go variables": "a table of CEL texts, one entry per " +
		"variable in the order the policy declares them; the refusal chain " +
		"reads top-down as one list, and cutting it in pieces only hides " +
		"which refusal wins",
}

func TestCoreFunctionsStaySmall(t *testing.T) {
	t.Parallel()
	found, err := oversizedIn(filepath.Join("..", ".."), cores)
	if err != nil {
		t.Fatal(err)
	}
	excused := map[string]bool{}
	for _, o := range found {
		if key := o.file + " " + o.fn; exceptions[key] != "" {
			excused[key] = true
			continue
		}
		t.Errorf("%s: %s", o.file, o.msg)
	}
	for key := range exceptions {
		if !excused[key] {
			t.Errorf("exception %q is within the size rule now, or gone: delete it", key)
		}
	}
}

// oversized is a function over the size rule: its file (slash-separated,
// from the module root), its name and what is over.
type oversized struct{ file, fn, msg string }

// oversizedIn lists the functions over the size rule in the packages pkgs
// (entries as in cores) under root.
func oversizedIn(root string, pkgs []string) ([]oversized, error) {
	var out []oversized
	for _, pkg := range pkgs {
		files, err := goFiles(root, pkg)
		if err != nil || len(files) == 0 {
			return nil, fmt.Errorf("%s: no Go files (%v)", pkg, err)
		}
		for _, f := range files {
			msgs, err := oversizeFile(f)
			if err != nil {
				return nil, err
			}
			rel, _ := filepath.Rel(root, f)
			for _, msg := range msgs {
				fn, _, _ := strings.Cut(msg, " ")
				out = append(out, oversized{file: filepath.ToSlash(rel), fn: fn, msg: msg})
			}
		}
	}
	return out, nil
}

// goFiles lists the non-test Go files of the package pkg under root, or of
// every package below it when pkg ends in "/".
func goFiles(root, pkg string) ([]string, error) {
	below := strings.HasSuffix(pkg, "/")
	var files []string
	err := walkGo(filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(pkg, "/"))), nil, func(path, rel string) error {
		if !strings.HasSuffix(path, "_test.go") && (below || !strings.Contains(rel, "/")) {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

// TestOversizeCatches keeps the rule honest: a long function and a branchy
// one are both reported, a small one is not.
func TestOversizeCatches(t *testing.T) {
	t.Parallel()
	var long strings.Builder
	long.WriteString("package p\nfunc long() {\n")
	for i := range maxFuncLines {
		fmt.Fprintf(&long, "\t_ = %d\n", i)
	}
	long.WriteString("}\nfunc branchy(a, b bool, n int) {\n")
	for range maxFuncComplexity / 2 {
		long.WriteString("\tif a && b {\n\t}\n")
	}
	long.WriteString("\tswitch n {\n\tcase 1:\n\tcase 2:\n\tdefault:\n\t}\n}\nfunc small() {}\n")
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", long.String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	got := oversize(fset, f)
	want := []string{
		fmt.Sprintf("long is %d lines (at most %d): split it into steps", maxFuncLines+2, maxFuncLines),
		fmt.Sprintf("branchy has cyclomatic complexity %d (at most %d): split it into steps", 1+2*(maxFuncComplexity/2)+2, maxFuncComplexity),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("oversize =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// oversizeFile parses the Go file at path and reports its functions over
// either limit.
func oversizeFile(path string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		return nil, err
	}
	return oversize(fset, f), nil
}

// oversize reports the functions of f over either limit.
func oversize(fset *token.FileSet, f *ast.File) []string {
	var out []string
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) == 1 {
			name = recvName(fd.Recv.List[0].Type) + "." + name
		}
		if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
			out = append(out, fmt.Sprintf("%s is %d lines (at most %d): split it into steps", name, n, maxFuncLines))
		}
		if c := complexity(fd); c > maxFuncComplexity {
			out = append(out, fmt.Sprintf("%s has cyclomatic complexity %d (at most %d): split it into steps", name, c, maxFuncComplexity))
		}
	}
	return out
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return "?"
}

// complexity is gocyclo's count: one, plus one per if, for, range, case
// (not default), select case (not default), && and ||. Function literals
// count toward the function that holds them.
func complexity(fn ast.Node) int {
	c := 1
	ast.Inspect(fn, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			c++
		case *ast.CaseClause:
			if n.List != nil {
				c++
			}
		case *ast.CommClause:
			if n.Comm != nil {
				c++
			}
		case *ast.BinaryExpr:
			if n.Op == token.LAND || n.Op == token.LOR {
				c++
			}
		}
		return true
	})
	return c
}
