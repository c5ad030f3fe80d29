// Package errtest checks that an error tells a user what was wrong: its
// text names each thing the test expects (the field, the bad value, what
// is accepted). Only tests import it.
package errtest

import (
	"strings"
	"testing"
)

// Names fails t unless err is an error whose text contains each of want;
// a nil err ends the test.
func Names(t testing.TB, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one naming %q", want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not name %q:\n%v", w, err)
		}
	}
}
