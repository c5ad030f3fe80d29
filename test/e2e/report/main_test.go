package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestCapabilities(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mask string
		want []string
	}{
		{"0000000000000000", []string{}},
		{"0000000000004000", []string{"CAP_IPC_LOCK"}},
		// containerd's default set for root plus IPC_LOCK
		{"00000000a80445fb", []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_IPC_LOCK", "CAP_SYS_CHROOT", "CAP_MKNOD", "CAP_AUDIT_WRITE", "CAP_SETFCAP"}},
	}
	for _, tt := range tests {
		got, err := capabilities(tt.mask)
		if err != nil {
			t.Fatalf("capabilities(%q): %v", tt.mask, err)
		}
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("capabilities(%q) (-want +got):\n%s", tt.mask, d)
		}
	}
	if _, err := capabilities("zz"); err == nil {
		t.Error("capabilities(\"zz\") succeeded")
	}
}

func TestDevNumber(t *testing.T) {
	t.Parallel()
	for _, d := range [][2]uint32{{231, 192}, {10, 58}, {231, 4}, {259, 1048575}} {
		major, minor := devNumber(unix.Mkdev(d[0], d[1]))
		if major != d[0] || minor != d[1] {
			t.Errorf("devNumber(Mkdev(%d, %d)) = %d:%d", d[0], d[1], major, minor)
		}
	}
}
