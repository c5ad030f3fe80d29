package inventory_test

import (
	"testing"

	"github.com/ibkube/ibkube/hca/inventory"
)

func TestNaturalLess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want bool
	}{
		{"mlx5_2", "mlx5_10", true},
		{"mlx5_10", "mlx5_2", false},
		{"mlx5_1", "mlx5_1", false},
		{"mlx5_1", "mlx5_1a", true},
		{"mlx4_0", "mlx5_0", true},
		{"ib0", "ibP257p0s0", true},
		{"a01", "a1", false},
		{"a1", "a01", true},
		{"", "a", true},
	}
	for _, tc := range tests {
		if got := inventory.NaturalLess(tc.a, tc.b); got != tc.want {
			t.Errorf("NaturalLess(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}
