package policy

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/ibkube/ibkube/webhook/config"
)

// TestRangeRegex: the pattern the policy checks hcas with matches exactly
// the integers 1 to max, for every bound up to 1000 and for config.MaxHCAs.
func TestRangeRegex(t *testing.T) {
	t.Parallel()
	for _, max := range append([]int{config.MaxHCAs}, rangeOf(1, 1000)...) {
		re := regexp.MustCompile("^(" + rangeRegex(max) + ")$")
		for n := 0; n <= 1200; n++ {
			if got, want := re.MatchString(strconv.Itoa(n)), n >= 1 && n <= max; got != want {
				t.Fatalf("rangeRegex(%d) = %q matches %d: %v, want %v", max, rangeRegex(max), n, got, want)
			}
		}
	}
}

func rangeOf(lo, hi int) []int {
	out := make([]int, 0, hi-lo+1)
	for n := lo; n <= hi; n++ {
		out = append(out, n)
	}
	return out
}
