package errtest

import (
	"errors"
	"testing"
)

// recorder is a testing.TB that keeps what a check reported instead of
// failing the test that runs it.
type recorder struct {
	testing.TB
	errors, fatals int
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.errors++ }
func (r *recorder) Fatalf(string, ...any) { r.fatals++ }

func TestNames(t *testing.T) {
	t.Parallel()
	err := errors.New(`--mode "x": accepted: rdma-shared, rdma-exclusive`)
	for _, tc := range []struct {
		name                   string
		err                    error
		want                   []string
		wantErrors, wantFatals int
	}{
		{"names all", err, []string{"--mode", `"x"`, "rdma-shared"}, 0, 0},
		{"misses one", err, []string{"--mode", "ipoib"}, 1, 0},
		{"no error", nil, []string{"--mode"}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &recorder{TB: t}
			Names(r, tc.err, tc.want...)
			if r.errors != tc.wantErrors || r.fatals != tc.wantFatals {
				t.Errorf("reported %d errors, %d fatal; want %d, %d", r.errors, r.fatals, tc.wantErrors, tc.wantFatals)
			}
		})
	}
}
