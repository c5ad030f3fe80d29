package layout

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/nccl"
)

// ownedLists are the lists one package owns: the pod annotation keys and
// the mode names (contract), the built-in profile names (nccl). Elsewhere,
// code and tests read them from their owner instead of writing them out.
func ownedLists() map[string][]string {
	// Profiles named like a fixture host (ndv5, hb) are left out: a list of
	// fixtures is another list, hca/fixture's.
	var profiles []string
	for _, p := range nccl.Builtin() {
		if !slices.Contains(fixture.Names(), p.Name) {
			profiles = append(profiles, p.Name)
		}
	}
	return map[string][]string{
		"contract.KnownKeys()": contract.KnownKeys(),
		"contract.ModeNames()": contract.ModeNames(),
		"nccl.Builtin()":       profiles,
	}
}

// handWritten reports what in f restates an owned list: a slice or array
// literal holding three or more of one list's items, or a string literal
// naming three or more of them (a message's "accepted: ..." written out).
func handWritten(fset *token.FileSet, f *ast.File, lists map[string][]string) []string {
	var out []string
	count := func(items []string, s string, inText bool) int {
		n := 0
		for _, it := range items {
			if inText && containsWord(s, it) || !inText && s == it {
				n++
			}
		}
		return n
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			for owner, items := range lists {
				hits := 0
				for _, e := range n.Elts {
					if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						hits += count(items, s, false)
					}
				}
				if hits >= 3 {
					out = append(out, fmt.Sprintf("%s: a list of %d items of %s written out; use %s", fset.Position(n.Pos()), hits, owner, owner))
				}
			}
		case *ast.BasicLit:
			if n.Kind != token.STRING {
				return true
			}
			s, _ := strconv.Unquote(n.Value)
			for owner, items := range lists {
				if hits := count(items, s, true); hits >= 3 {
					out = append(out, fmt.Sprintf("%s: a text naming %d items of %s; build it from %s", fset.Position(n.Pos()), hits, owner, owner))
				}
			}
		}
		return true
	})
	return out
}

// containsWord reports whether s holds w delimited by the start or end of
// s or by ", " / "," / " ".
func containsWord(s, w string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], w)
		if j < 0 {
			return false
		}
		j += i
		before := j == 0 || strings.ContainsRune(", (", rune(s[j-1]))
		end := j + len(w)
		after := end == len(s) || strings.ContainsRune(", )", rune(s[end]))
		if before && after {
			return true
		}
		i = j + 1
	}
}

// TestNoHandWrittenLists: outside its owner, no Go file (tests included)
// writes out the pod keys, the mode names or the built-in profile names.
func TestNoHandWrittenLists(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	lists := ownedLists()
	err := walkGo(root, []string{"contract", "nccl"}, func(path, _ string) error {
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, msg := range handWritten(fset, f, lists) {
			t.Error(msg)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
