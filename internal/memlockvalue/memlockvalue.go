// Package memlockvalue holds the one rule for an RLIMIT_MEMLOCK value
// written as text (the infiniband.azure.com/memlock annotation, the
// webhook's memlock setting, the node agent's --memlock-max): "unlimited"
// or a positive whole number of bytes as a Kubernetes quantity. The webhook
// and the node agent both parse with it, so a value the webhook admits is
// one the node can apply.
package memlockvalue

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Unlimited is what Parse returns for "unlimited": RLIM_INFINITY as the
// kernel and the OCI runtime spec spell it.
const Unlimited uint64 = math.MaxUint64

// Accepted says what Parse accepts, for messages.
const Accepted = `"unlimited" or a positive whole number of bytes as a Kubernetes quantity such as "64Gi"`

// Problems a value can have (Error.Problem).
const (
	NotQuantity = "not a quantity"
	NotPositive = "not positive"
	NotWhole    = "not a whole number of bytes"
	TooLarge    = "too large"
)

// Error is a refused value and what is wrong with it.
type Error struct {
	Value   string // as given
	Problem string // NotQuantity, NotPositive, NotWhole or TooLarge
}

// Error reads `"100m" is not a whole number of bytes (accepted: ...)` or
// `"1e99" is too large (below 8Ei; accepted: ...)`.
func (e *Error) Error() string {
	limit := ""
	if e.Problem == TooLarge {
		limit = "below 8Ei; "
	}
	return fmt.Sprintf("%q is %s (%saccepted: %s)", e.Value, e.Problem, limit, Accepted)
}

// Detail is the problem without the value, for messages that name the
// value already: "not a whole number of bytes", "too large (below 8Ei)".
func (e *Error) Detail() string {
	if e.Problem == TooLarge {
		return TooLarge + " (below 8Ei)"
	}
	return e.Problem
}

// Parse returns the number of bytes s asks for, or Unlimited. Surrounding
// space is ignored and "unlimited" may be in any case. Zero, negative,
// fractional ("100m" is 0.1 byte) and out-of-range values ("1e99", anything
// from 8Ei = 2^63 up, which no rlimit can hold as a signed 64-bit count) are
// refused with an *Error.
func Parse(s string) (uint64, error) {
	v := strings.TrimSpace(s)
	if strings.EqualFold(v, "unlimited") {
		return Unlimited, nil
	}
	if problem, ok := extremeExponent(v); ok {
		return 0, &Error{Value: s, Problem: problem}
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return 0, &Error{Value: s, Problem: NotQuantity}
	}
	if q.Sign() <= 0 {
		return 0, &Error{Value: s, Problem: NotPositive}
	}
	n, whole := wholeBytes(q)
	if !whole {
		return 0, &Error{Value: s, Problem: NotWhole}
	}
	// ParseQuantity saturates at MaxInt64, so MaxInt64 itself means
	// "overflowed" and is refused rather than turned into a limit.
	if !n.IsInt64() || n.Int64() == math.MaxInt64 {
		return 0, &Error{Value: s, Problem: TooLarge}
	}
	return uint64(n.Int64()), nil
}

// plainNumber and decimalExponent are a quantity's number and its
// decimal-exponent suffix (resource.Quantity's grammar: <signedNumber> then
// "e" or "E" and a signed whole number).
var (
	plainNumber     = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)$`)
	decimalExponent = regexp.MustCompile(`^[+-]?[0-9]+$`)
)

// extremeExponent decides a value whose decimal exponent reaches beyond
// its own digits by more than 8Ei's 19 without building the number:
// resource.ParseQuantity rounds "1e-99999999" to its nano scale for about
// a minute of CPU, and the value is a fraction of a byte (or past any
// rlimit, for a large positive exponent) whatever its digits. ok is false
// for every other value, which Parse reads in full.
func extremeExponent(v string) (problem string, ok bool) {
	i := strings.LastIndexAny(v, "eE")
	if i <= 0 || !plainNumber.MatchString(v[:i]) || !decimalExponent.MatchString(v[i+1:]) {
		return "", false
	}
	// The exponent's size without its sign and leading zeros; more than 18
	// digits is past any bound.
	digits := strings.TrimLeft(strings.TrimLeft(v[i+1:], "+-"), "0")
	if len(digits) <= 18 {
		if exp, _ := strconv.ParseInt("0"+digits, 10, 64); exp <= int64(len(v))+19 {
			return "", false
		}
	}
	m, err := resource.ParseQuantity(v[:i])
	switch {
	case err != nil:
		return NotQuantity, true
	case m.Sign() <= 0:
		return NotPositive, true
	case !strings.HasPrefix(v[i+1:], "-"):
		return TooLarge, true
	default:
		return NotWhole, true
	}
}

// tooLargeScale is the decimal exponent from which a positive value is
// 10^19 or more, past 8Ei whatever its digits.
const tooLargeScale = -19

// wholeBytes returns q as an integer, and false when q has a fractional
// part. The power of ten it divides or multiplies by is bounded by the
// digits written: a quantity such as "1e99999999" would otherwise cost a
// minute of CPU building 10^99999999. A scale of tooLargeScale or below is
// past any rlimit (returned as a number no int64 holds), and one with more
// fractional digits than digits at all is a positive value below one byte.
func wholeBytes(q resource.Quantity) (*big.Int, bool) {
	dec := q.AsDec()
	n := new(big.Int).Set(dec.UnscaledBig())
	scale := int64(dec.Scale())
	switch {
	case scale <= tooLargeScale:
		return new(big.Int).Lsh(big.NewInt(1), 64), true
	case scale > int64(len(n.String())):
		return big.NewInt(0), false
	case scale <= 0:
		return n.Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(-scale), nil)), true
	}
	quo, rem := new(big.Int).QuoRem(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(scale), nil), new(big.Int))
	return quo, rem.Sign() == 0
}
