// Package charttest is the chart, for tests: it runs the helm that make
// builds against charts/ibkube (the chart and policy tests), and reads the
// chart's golden renders so that tests elsewhere hold the binaries'
// defaults and the contract against what the chart deploys without running
// helm. Only tests import it.
package charttest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// ChartDir is the absolute path of charts/ibkube, found from this file's
// place in the module.
func ChartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "charts", "ibkube")
}

// Helm runs $HELM with args and returns its stdout; its error carries the
// command line and stderr. makeTarget is the make target that builds helm
// and sets $HELM, named when it is unset.
func Helm(t testing.TB, makeTarget string, args ...string) (string, error) {
	t.Helper()
	h := os.Getenv("HELM")
	if h == "" {
		t.Fatalf("$HELM is not set: run `make %s`, which builds helm and sets it", makeTarget)
	}
	cmd := exec.Command(h, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Keep helm away from the user's repositories and caches.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}
