package policy

import (
	"regexp"
	"strconv"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

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

// TestEachPolicyDeclaresWhatItReads: a policy declares every variable its
// expressions read, directly or through another variable, and no other
// (the API server builds an accessor for each declared variable on every
// evaluation); the two lists keep the declared order.
func TestEachPolicyDeclaresWhatItReads(t *testing.T) {
	t.Parallel()
	order := map[string]int{}
	for i, v := range variables() {
		order[v.name] = i
	}
	for _, tc := range []struct {
		name  string
		roots []string
		got   []admissionregistrationv1.Variable
	}{
		{"mutating", []string{mutation()}, mutatingVariables()},
		{"validating", []string{refusal, refusalMessage()}, validatingVariables()},
	} {
		declared := map[string]bool{}
		read := map[string]bool{}
		for _, r := range tc.roots {
			readsInto(read, r)
		}
		last := -1
		for _, v := range tc.got {
			declared[v.Name] = true
			readsInto(read, v.Expression)
			if order[v.Name] <= last {
				t.Errorf("%s: variable %s out of the declared order", tc.name, v.Name)
			}
			last = order[v.Name]
		}
		for n := range read {
			if !declared[n] {
				t.Errorf("%s: reads variables.%s, which it does not declare", tc.name, n)
			}
		}
		for n := range declared {
			if !read[n] {
				t.Errorf("%s: declares %s, which nothing of it reads", tc.name, n)
			}
		}
	}
}

func TestReadsInto(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{"", nil},
		{"variables.a", []string{"a"}},
		{"variables.a_1.size() + variables.b[0] + 'variables.'", []string{"a_1", "b"}},
		{"x.variables.c(variables.d)", []string{"c", "d"}},
	} {
		got := map[string]bool{}
		readsInto(got, tc.expr)
		if len(got) != len(tc.want) {
			t.Errorf("readsInto(%q) = %v, want %v", tc.expr, got, tc.want)
		}
		for _, w := range tc.want {
			if !got[w] {
				t.Errorf("readsInto(%q) = %v, want %v", tc.expr, got, tc.want)
			}
		}
	}
}
