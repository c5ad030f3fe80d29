package inventory

import "strings"

// NaturalLess orders names with embedded numbers by value: mlx5_2 < mlx5_10.
// Digit runs of equal value order the shorter spelling first (a1 < a01), so
// the order is total and the same wherever HCAs are listed: discovery's
// scan, the CNI plugin's candidates.
func NaturalLess(a, b string) bool {
	for a != "" && b != "" {
		ad, bd := isDigit(a[0]), isDigit(b[0])
		switch {
		case ad && bd:
			an, arest := digitRun(a)
			bn, brest := digitRun(b)
			at, bt := strings.TrimLeft(an, "0"), strings.TrimLeft(bn, "0")
			if len(at) != len(bt) {
				return len(at) < len(bt)
			}
			if at != bt {
				return at < bt
			}
			if len(an) != len(bn) {
				return len(an) < len(bn)
			}
			a, b = arest, brest
		case a[0] != b[0]:
			return a[0] < b[0]
		default:
			a, b = a[1:], b[1:]
		}
	}
	return len(a) < len(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func digitRun(s string) (string, string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return s[:i], s[i:]
}
