package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ibkube/ibkube/hca/fixture"
)

func TestDoctorCommand(t *testing.T) {
	t.Parallel()
	dir := fixture.BuildTemp(t, fixture.HB)
	proc := filepath.Join(dir, "proc")
	writeFile(t, filepath.Join(proc, "modules"), "nvidia 1 0 - Live 0x0\nnvidia_peermem 1 0 - Live 0x0\n")
	args := []string{"--sysfs-root", fixture.SysfsRoot(dir), "--dev-root", fixture.DevRoot(dir), "--proc-root", proc,
		"--nri-socket", filepath.Join(dir, "none.sock"), "--config", filepath.Join(dir, "absent.yaml"),
		"--kubelet-socket-dir", filepath.Join(dir, "no-kubelet"), "--pod-resources-socket=",
		"--cdi-dir", filepath.Join(dir, "no-cdi")}

	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"doctor"}, args...), stdio{out: &out, err: &errOut})
	if err != nil {
		t.Fatalf("healthy HB fixture: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "PASS  rdma-devices     1 RDMA devices: mlx5_0") ||
		!strings.Contains(out.String(), "SKIP  held-both-ways   no CDI directory "+filepath.Join(dir, "no-cdi")) {
		t.Errorf("text report:\n%s", out.String())
	}

	out.Reset()
	if err := fixture.SetPortState(dir, "mlx5_0", 1, "DOWN"); err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), append([]string{"doctor", "-o", "json"}, args...), stdio{out: &out, err: &errOut})
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 1 {
		t.Fatalf("port down: err = %v, want exitError{1}", err)
	}
	var report struct {
		Failed bool `json:"failed"`
		Checks []struct{ Name, Status string }
	}
	if err := json.Unmarshal(out.Bytes(), &report); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	if !report.Failed || report.Checks[1].Name != "ports" || report.Checks[1].Status != "FAIL" {
		t.Errorf("json report: %+v", report)
	}

	for _, cmd := range []string{"doctor", "node"} {
		var help bytes.Buffer
		if err := run(context.Background(), []string{cmd, "-h"}, stdio{out: &bytes.Buffer{}, err: &help}); err != nil || !strings.Contains(help.String(), "-sysfs-root") {
			t.Errorf("ibkube %s -h = %v (want nil: asking for help is no failure), usage:\n%s", cmd, err, help.String())
		}
	}

	if err := run(context.Background(), []string{"doctor", "-o", "yaml"}, stdio{out: &out, err: &errOut}); err == nil || !strings.Contains(err.Error(), `-o "yaml": accepted: text, json`) {
		t.Errorf("-o yaml: err = %v", err)
	}
}
