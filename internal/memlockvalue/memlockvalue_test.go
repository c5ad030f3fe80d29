package memlockvalue

import (
	"errors"
	"strings"
	"testing"

	"github.com/ibkube/ibkube/internal/testing/errtest"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    uint64
		problem string
	}{
		{in: "unlimited", want: Unlimited},
		{in: " Unlimited ", want: Unlimited},
		{in: "UNLIMITED", want: Unlimited},
		{in: "64Gi", want: 64 << 30},
		{in: " 64Gi\n", want: 64 << 30},
		{in: "8388608", want: 8388608},
		{in: "1", want: 1},
		{in: "512M", want: 512_000_000},
		{in: "1.5Gi", want: 1610612736},
		{in: "1k", want: 1000},
		{in: "1e3", want: 1000},
		{in: "7Ei", want: 7 << 60},
		{in: "9223372036854775806", want: 9223372036854775806},
		{in: "9223372036854775807", problem: TooLarge},
		{in: "9223372036854775808", problem: TooLarge},
		{in: "8Ei", problem: TooLarge},
		{in: "1e99", problem: TooLarge},
		// Exponents that would cost minutes as powers of ten: decided from
		// the scale alone.
		{in: "1e99999999", problem: TooLarge},
		{in: "1e-99999999", problem: NotWhole},
		{in: "0.000001e19", want: 10_000_000_000_000},
		{in: "1e18", want: 1_000_000_000_000_000_000},
		{in: "1e19", problem: TooLarge},
		{in: "-1e-99999999", problem: NotPositive},
		{in: "0e99999999", problem: NotPositive},
		{in: "1e-99999999999999999999999", problem: NotWhole},
		{in: "1e+00000000000000000000003", want: 1000},
		{in: "1Ke99999999", problem: NotQuantity},
		{in: "99999999999999999999999Ei", problem: TooLarge},
		{in: "", problem: NotQuantity},
		{in: "lots", problem: NotQuantity},
		{in: "64GB", problem: NotQuantity},
		{in: "infinite", problem: NotQuantity},
		{in: "unlimited please", problem: NotQuantity},
		{in: "0", problem: NotPositive},
		{in: "0Gi", problem: NotPositive},
		{in: "-1", problem: NotPositive},
		{in: "-64Gi", problem: NotPositive},
		{in: "100m", problem: NotWhole},
		{in: "0.5", problem: NotWhole},
		{in: "1.1k", want: 1100},
		{in: "1.0001k", problem: NotWhole},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.in)
			if tt.problem == "" {
				if err != nil || got != tt.want {
					t.Fatalf("Parse(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) || e.Problem != tt.problem || e.Value != tt.in {
				t.Fatalf("Parse(%q) = %d, %v; want an *Error %q", tt.in, got, err, tt.problem)
			}
			// The message names the value, the problem and what is accepted.
			want := []string{`"` + strings.ReplaceAll(tt.in, "\n", `\n`) + `"`, tt.problem, Accepted}
			if tt.problem == TooLarge {
				want = append(want, "below 8Ei")
			}
			if !strings.HasPrefix(e.Detail(), tt.problem) {
				t.Errorf("Detail() = %q, want it to start with %q", e.Detail(), tt.problem)
			}
			errtest.Names(t, err, want...)
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"unlimited", "64Gi", "-1", "lots", "1e99", "1.5Gi", "100m", "8Ei"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := Parse(s)
		if err == nil && (v == 0 || (v > 1<<63-2 && v != Unlimited)) {
			t.Fatalf("Parse(%q) = %d: zero or out of range accepted", s, v)
		}
		var e *Error
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("Parse(%q) error %v is not an *Error", s, err)
		}
	})
}
