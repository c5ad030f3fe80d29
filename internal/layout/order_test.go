package layout

import (
	"bufio"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// roomOrder reads, from the README's Layout table, the rows whose packages
// may import "each other top-down": for each such room ("node", "webhook")
// its packages in the order the row lists them. The README is the one
// place the order is written.
func roomOrder(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tick := regexp.MustCompile("`([a-z0-9/]+)`")
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cells := strings.Split(sc.Text(), "|")
		if len(cells) < 5 || !strings.Contains(cells[3], "each other top-down") {
			continue
		}
		for _, m := range tick.FindAllStringSubmatch(cells[1], -1) {
			room, _, ok := strings.Cut(m[1], "/")
			if ok {
				out[room] = append(out[room], m[1])
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out["node"]) < 5 || len(out["webhook"]) < 5 {
		t.Fatalf("README Layout rows for node/ and webhook/ not found (got %v)", out)
	}
	return out
}

// rank is pkg's place in its room's order: the listed package it is, or is
// below (node/dra/slice ranks as node/dra).
func rank(order []string, pkg string) int {
	return slices.IndexFunc(order, func(p string) bool { return pkg == p || strings.HasPrefix(pkg, p+"/") })
}

// TestRoomsReadTopDown: inside node/ and webhook/, a package imports only
// the packages listed before it in the README's Layout table, and every
// package of the room is listed there.
func TestRoomsReadTopDown(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	for room, order := range roomOrder(t) {
		err := walkGo(filepath.Join(root, room), nil, func(path, rel string) error {
			if strings.HasSuffix(path, "_test.go") {
				return nil
			}
			pkg := room
			if dir := filepath.ToSlash(filepath.Dir(rel)); dir != "." {
				pkg += "/" + dir
			}
			me := rank(order, pkg)
			if me < 0 {
				t.Errorf("%s is not listed in README.md's Layout row for %s/; add it where it belongs in the order", pkg, room)
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			for _, imp := range f.Imports {
				ip, _ := strconv.Unquote(imp.Path.Value)
				target, ok := strings.CutPrefix(ip, module)
				if !ok || !strings.HasPrefix(target, room+"/") {
					continue
				}
				if rank(order, target) > me {
					t.Errorf("%s imports %s, which README.md's Layout lists after it: %s/ reads top-down (%s)",
						filepath.ToSlash(filepath.Join(pkg, filepath.Base(path))), target, room, strings.Join(order, ", "))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
