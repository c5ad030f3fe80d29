package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestResolveNCCL checks the resolver against NCCL's initEnvFunc (NVIDIA/nccl
// src/misc/param.cc): the environment wins; NCCL_CONF_FILE, when set and not
// empty, replaces ~/.nccl.conf; the home directory comes from the password
// database, not $HOME; /etc/nccl.conf is read last in every case.
func TestResolveNCCL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	home := filepath.Join(dir, "root")
	passwd := write("passwd", "root:x:0:0:root:"+home+":/sbin/nologin\nnonroot:x:65532:65532::/home/nonroot:/sbin/nologin\n")
	write("root/.nccl.conf", "NCCL_A=home\nNCCL_B=home\n")
	etc := write("etc-nccl.conf", "NCCL_A=etc\nNCCL_C=etc\n# NCCL_D=comment\n")
	custom := write("custom.conf", "NCCL_B=custom\n")
	tests := []struct {
		name    string
		environ []string
		uid     int
		want    map[string]string
	}{
		{"home file then /etc", []string{"HOME=/elsewhere"}, 0, map[string]string{"NCCL_A": "home", "NCCL_B": "home", "NCCL_C": "etc"}},
		{"environment wins", []string{"NCCL_A=env"}, 0, map[string]string{"NCCL_A": "env", "NCCL_B": "home", "NCCL_C": "etc"}},
		{"NCCL_CONF_FILE replaces the home file", []string{"NCCL_CONF_FILE=" + custom}, 0, map[string]string{"NCCL_A": "etc", "NCCL_B": "custom", "NCCL_C": "etc"}},
		{"empty NCCL_CONF_FILE counts as unset", []string{"NCCL_CONF_FILE="}, 0, map[string]string{"NCCL_A": "home", "NCCL_B": "home", "NCCL_C": "etc"}},
		{"uid without a passwd entry: no home file", nil, 1000, map[string]string{"NCCL_A": "etc", "NCCL_C": "etc"}},
	}
	// NCCL >= 2.30.3 reads $HOME instead: HOME=/elsewhere has no file.
	if got := resolveNCCL([]string{"HOME=/elsewhere"}, 0, passwd, etc, true); !cmp.Equal(map[string]string{"NCCL_A": "etc", "NCCL_C": "etc"}, got.Settings) {
		t.Errorf("2.30.3 rule with HOME elsewhere: %v", got.Settings)
	}
	if got := resolveNCCL([]string{"HOME=" + home}, 1000, passwd, etc, true); !cmp.Equal(map[string]string{"NCCL_A": "home", "NCCL_B": "home", "NCCL_C": "etc"}, got.Settings) {
		t.Errorf("2.30.3 rule with HOME set: %v", got.Settings)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := resolveNCCL(tc.environ, tc.uid, passwd, etc, false)
			if d := cmp.Diff(tc.want, got.Settings); d != "" {
				t.Errorf("settings (-want +got):\n%s", d)
			}
		})
	}
}
