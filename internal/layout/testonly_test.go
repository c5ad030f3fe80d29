package layout

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// pendingTestOnly are test-only packages still in product rooms, each
// with why it has not moved yet. Delete an entry when its package moves to
// internal/testing/; the test fails on an entry that is no longer needed.
var pendingTestOnly = map[string]string{
	"hca/fixture": "fake hosts from real machines' trees, imported by tests in every room (node/dra, test/e2e, test/fleet among them, still being edited) and by make fixtures; moves with them",
}

// TestTestOnlyPackagesLiveUnderInternalTesting: a package that only
// _test.go files, test/ and internal/testing/ import is test code, and sits
// under internal/testing/ so that it neither counts as product nor is
// imported by product code by mistake (TestImportGraphReadsTopDown).
func TestTestOnlyPackagesLiveUnderInternalTesting(t *testing.T) {
	t.Parallel()
	testOnly, err := testOnlyPackages(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range testOnly {
		if _, pending := pendingTestOnly[pkg]; !pending {
			t.Errorf("%s is imported only by tests: move it under internal/testing/", pkg)
		}
	}
	for pkg := range pendingTestOnly {
		if !slices.Contains(testOnly, pkg) {
			t.Errorf("pendingTestOnly names %s, which is no test-only package outside internal/testing/ (moved, or product imports it): delete the entry", pkg)
		}
	}
}

// testOnlyPackages lists, sorted, the library packages under root outside
// internal/testing/ that some test imports and no product code does.
// Product code is every non-test file outside test/, hack/ and
// internal/testing/.
func testOnlyPackages(root string) ([]string, error) {
	fromProduct, fromTests := map[string]bool{}, map[string]bool{}
	libraries := map[string]bool{}
	fset := token.NewFileSet()
	err := walkGo(root, nil, func(path, _ string) error {
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		pkg := filepath.ToSlash(rel)
		isTest := strings.HasSuffix(path, "_test.go")
		if !isTest && f.Name.Name != "main" {
			libraries[pkg] = true
		}
		importers := fromProduct
		if isTest || underAny(pkg, "test", "hack", "internal/testing") {
			importers = fromTests
		}
		for _, imp := range f.Imports {
			ip, _ := strconv.Unquote(imp.Path.Value)
			if target, ok := strings.CutPrefix(ip, module); ok && target != pkg {
				importers[target] = true
			}
		}
		return nil
	})
	var out []string
	for pkg := range libraries {
		if fromTests[pkg] && !fromProduct[pkg] && !underAny(pkg, "test", "hack", "internal/testing") {
			out = append(out, pkg)
		}
	}
	slices.Sort(out)
	return out, err
}

// walkGo calls visit for each Go file under root with its path and its
// slash-separated path from root, leaving out hidden and _-prefixed
// directories, testdata, vendor and the directories skip names (paths from
// root).
func walkGo(root string, skip []string, visit func(path, rel string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if !d.IsDir() {
			if !strings.HasSuffix(path, ".go") {
				return nil
			}
			return visit(path, rel)
		}
		name := d.Name()
		if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || slices.Contains(skip, rel)) {
			return filepath.SkipDir
		}
		return nil
	})
}

// underAny says whether pkg is one of roots or below one.
func underAny(pkg string, roots ...string) bool {
	for _, r := range roots {
		if pkg == r || strings.HasPrefix(pkg, r+"/") {
			return true
		}
	}
	return false
}
