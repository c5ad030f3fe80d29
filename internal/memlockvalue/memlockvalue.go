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

// wholeBytes returns q as an integer, and false when q has a fractional part.
func wholeBytes(q resource.Quantity) (*big.Int, bool) {
	dec := q.AsDec()
	n := new(big.Int).Set(dec.UnscaledBig())
	scale := int64(dec.Scale())
	if scale <= 0 {
		return n.Mul(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(-scale), nil)), true
	}
	quo, rem := new(big.Int).QuoRem(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(scale), nil), new(big.Int))
	return quo, rem.Sign() == 0
}
