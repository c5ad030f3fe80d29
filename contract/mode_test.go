package contract

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseMode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    Mode
		str     string
		wantErr *ModeError
	}{
		{in: "rdma-shared", want: Mode{Shared: true}, str: "rdma-shared"},
		{in: "rdma-exclusive", want: Mode{Exclusive: true}, str: "rdma-exclusive"},
		{in: "ipoib", want: Mode{IPoIB: true}, str: "ipoib"},
		{in: " ipoib , rdma-exclusive", want: Mode{Exclusive: true, IPoIB: true}, str: "rdma-exclusive,ipoib"},
		{in: "rdma-shared,ipoib", want: Mode{Shared: true, IPoIB: true}, str: "rdma-shared,ipoib"},
		{in: "none", str: "none"},
		{in: "rdma", wantErr: &ModeError{Unknown: "rdma"}},
		{in: "", wantErr: &ModeError{Unknown: ""}},
		{in: "rdma-shared,rdma-exclusive", wantErr: &ModeError{Conflict: "rdma-shared and rdma-exclusive exclude each other"}},
		{in: "none,ipoib", wantErr: &ModeError{Conflict: "none cannot be combined"}},
	} {
		got, err := ParseMode(tc.in)
		if tc.wantErr != nil {
			var e *ModeError
			if !errors.As(err, &e) {
				t.Errorf("ParseMode(%q) error %v, want a *ModeError", tc.in, err)
				continue
			}
			if diff := cmp.Diff(tc.wantErr, e); diff != "" {
				t.Errorf("ParseMode(%q) error (-want +got):\n%s", tc.in, diff)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseMode(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want || got.String() != tc.str {
			t.Errorf("ParseMode(%q) = %+v (%s), want %+v (%s)", tc.in, got, got, tc.want, tc.str)
		}
		if again, err := ParseMode(got.String()); err != nil || again != got {
			t.Errorf("ParseMode(%q) does not read back %q: %+v, %v", got.String(), tc.in, again, err)
		}
	}
}

func TestIPoIBNamespace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ configured, release, pod, want string }{
		{"nets", "ibkube-system", "team", "nets"},
		{"", "ibkube-system", "team", "ibkube-system"},
		{"", "", "team", "team"},
	} {
		if got := IPoIBNamespace(tc.configured, tc.release, tc.pod); got != tc.want {
			t.Errorf("IPoIBNamespace(%q, %q, %q) = %q, want %q", tc.configured, tc.release, tc.pod, got, tc.want)
		}
	}
}

// TestAcceptedModesAreTheParsedOnes: the message's list is exactly the
// canonical spelling of every value ParseMode accepts, each once, so a mode
// added to the parser cannot be missing from the message (or the reverse).
func TestAcceptedModesAreTheParsedOnes(t *testing.T) {
	t.Parallel()
	names := ModeNames()
	var parsed []string
	// Every combination of up to two names.
	for i, a := range names {
		for _, v := range append([]string{a}, names[i+1:]...) {
			value := a
			if v != a {
				value = a + "," + v
			}
			m, err := ParseMode(value)
			if err != nil {
				continue
			}
			if s := m.String(); !slices.Contains(parsed, s) {
				parsed = append(parsed, s)
			}
		}
	}
	listed := strings.Split(AcceptedModes, ", ")
	slices.Sort(parsed)
	slices.Sort(listed)
	if d := cmp.Diff(parsed, listed); d != "" {
		t.Errorf("AcceptedModes against what ParseMode accepts (-parsed +listed):\n%s", d)
	}
}
