package cmdline

import (
	"errors"
	"io"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	errCheck := errors.New("check refused")
	tests := []struct {
		name     string
		args     []string
		check    error
		wantHelp bool
		wantErr  bool
	}{
		{name: "flags then check", args: []string{"-n=1"}},
		{name: "check refuses", args: []string{"-n=1"}, check: errCheck, wantErr: true},
		{name: "help skips check", args: []string{"-h"}, check: errCheck, wantHelp: true},
		{name: "long help", args: []string{"--help"}, wantHelp: true},
		{name: "unknown flag", args: []string{"-x"}, wantErr: true},
		{name: "bad value", args: []string{"-n=one"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fs := NewFlagSet("test", io.Discard)
			fs.Int("n", 0, "a number")
			help, err := Parse(fs, tc.args, func() error { return tc.check })
			if help != tc.wantHelp || (err != nil) != tc.wantErr {
				t.Errorf("Parse(%q) = %t, %v; want help %t, error %t", tc.args, help, err, tc.wantHelp, tc.wantErr)
			}
			if tc.check != nil && !tc.wantHelp && !errors.Is(err, tc.check) {
				t.Errorf("Parse(%q) = %v; want the check's error", tc.args, err)
			}
		})
	}
}
