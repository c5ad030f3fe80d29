package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestBadFlagExitsTwoOnce: every subcommand takes its command line through
// one path, so a flag it does not know exits 2 with the flag package's
// message written once (and its usage), never a second time by main.
func TestBadFlagExitsTwoOnce(t *testing.T) {
	t.Parallel()
	for _, c := range subcommands() {
		if c.name == "version" {
			continue // takes no flags, and ignores its arguments
		}
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			err := run(context.Background(), []string{c.name, "--no-such-flag"}, stdio{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &stderr})
			if got := exitStatus(&stderr, err); got != 2 {
				t.Errorf("exit status %d, want 2 (err %v)", got, err)
			}
			if n := strings.Count(stderr.String(), "flag provided but not defined: -no-such-flag"); n != 1 {
				t.Errorf("message written %d times, want once:\n%s", n, stderr.String())
			}
		})
	}
}
