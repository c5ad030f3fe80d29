package logging

import (
	"bytes"
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		level, format string
		wantDebug     bool
		wantPrefix    string
		wantErr       string
	}{
		{level: "info", format: "json", wantPrefix: "{"},
		{level: "debug", format: "text", wantDebug: true, wantPrefix: "time="},
		{level: "error", format: "json"},
		{level: "trace", format: "json", wantErr: `--log-level "trace": want error, info or debug`},
		{level: "info", format: "xml", wantErr: `--log-format "xml": want json or text`},
	} {
		t.Run(tc.level+"/"+tc.format, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			log, err := New(tc.level, tc.format, &out)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			log.V(1).Info("debug line")
			log.Info("info line")
			got := out.String()
			if strings.Contains(got, "debug line") != tc.wantDebug {
				t.Errorf("level %s: V(1) line written = %v, want %v:\n%s", tc.level, !tc.wantDebug, tc.wantDebug, got)
			}
			if strings.Contains(got, "info line") != (tc.level != "error") {
				t.Errorf("level %s: info line written wrongly:\n%s", tc.level, got)
			}
			if !strings.HasPrefix(got, tc.wantPrefix) {
				t.Errorf("format %s: output %q does not start with %q", tc.format, got, tc.wantPrefix)
			}
		})
	}
}
