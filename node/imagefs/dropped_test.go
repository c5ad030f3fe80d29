package imagefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// helperLayersEnv makes the test binary, re-executed, read /etc/passwd from
// these layers (":"-separated) and print the outcome.
const helperLayersEnv = "IMAGEFS_TEST_READ_LAYERS"

// TestHelperRead is the re-executed side of TestUnionWithEveryCapabilityDropped.
func TestHelperRead(t *testing.T) {
	layers := os.Getenv(helperLayersEnv)
	if layers == "" {
		t.Skip("run by TestUnionWithEveryCapabilityDropped")
	}
	b, err := Union{Layers: strings.Split(layers, ":")}.ReadFile(context.Background(), "/etc/passwd", 1024)
	switch {
	case errors.Is(err, ErrOpacityUnknown):
		fmt.Println("result: opacity unknown")
	case err != nil:
		fmt.Println("result: error:", err)
	default:
		fmt.Printf("result: read %q\n", b)
	}
}

// TestUnionWithEveryCapabilityDropped: the agent as the chart runs it,
// every capability dropped (setpriv empties the bounding and inheritable
// sets, so root keeps none across exec), reads an image with an opaque /etc
// above a layer holding a passwd: it refuses the lower passwd.
func TestUnionWithEveryCapabilityDropped(t *testing.T) {
	if os.Geteuid() != 0 || !trustedXattrsVisible() {
		t.Skip("setting trusted.* xattrs needs root with CAP_SYS_ADMIN")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("setpriv (util-linux) not found")
	}
	t.Parallel()
	upper := markedLayer(t, map[string]string{"etc/group": "g"}, map[string][2]string{"etc": {"trusted.overlay.opaque", "y"}})
	lower := layer(t, map[string]string{"etc/passwd": "lower's passwd"})
	for _, tc := range []struct {
		name   string
		layers []string
		want   string
	}{
		{"opaque /etc above the passwd", []string{upper, lower}, `result: opacity unknown`},
		{"the passwd in the topmost /etc", []string{lower, upper}, `result: read "lower's passwd"`},
	} {
		cmd := exec.Command(setpriv, "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all", "--no-new-privs",
			os.Args[0], "-test.run=^TestHelperRead$", "-test.v")
		cmd.Env = append(os.Environ(), helperLayersEnv+"="+strings.Join(tc.layers, ":"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", tc.name, err, out)
		}
		if !strings.Contains(string(out), tc.want+"\n") {
			t.Errorf("%s: without capabilities the read gave\n%s\nwant %s", tc.name, out, tc.want)
		}
	}
}
