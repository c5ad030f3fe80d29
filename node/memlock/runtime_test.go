package memlock

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const limitsTemplate = `Limit                     Soft Limit           Hard Limit           Units     
Max cpu time              unlimited            unlimited            seconds   
Max open files            1048576              1048576              files     
Max locked memory         %s            bytes     
Max address space         unlimited            unlimited            bytes     
`

func limitsFile(memlock string) []byte {
	return []byte(fmt.Sprintf(limitsTemplate, memlock))
}

func TestParseProcLimits(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, line string
		want       Limit
		wantErr    bool
	}{
		{name: "this machine", line: "65536                8388608", want: Limit{65536, 8388608}},
		{name: "systemd LimitMEMLOCK=infinity", line: "unlimited            unlimited", want: Limit{Unlimited, Unlimited}},
		{name: "garbage", line: "lots lots", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseProcLimits(limitsFile(tt.line))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if _, err := ParseProcLimits([]byte("Max open files 1 1 files\n")); err == nil {
		t.Error("no memlock line: want error")
	}
}

func TestLearnRuntimeLimit(t *testing.T) {
	t.Parallel()
	proc := t.TempDir()
	write := func(pid, comm, memlock string) {
		dir := filepath.Join(proc, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "limits"), limitsFile(memlock), 0o644)
	}
	write("1", "systemd", "8388608 8388608")
	write("812", "containerd", "unlimited unlimited")
	write("900", "containerd-shim", "65536 65536")
	write("4242", "containerd", "65536 8388608")

	got, err := LearnRuntimeLimit(proc, 4242)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(RuntimeLimit{PID: 4242, Source: "peer", Limit: Limit{65536, 8388608}}, got); diff != "" {
		t.Errorf("by peer (-want +got):\n%s", diff)
	}
	// Peer not visible (pid 0 from another pid namespace, or gone): by name.
	for _, peer := range []int{0, 77} {
		got, err = LearnRuntimeLimit(proc, peer)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(RuntimeLimit{PID: 812, Source: "containerd", Limit: Limit{Unlimited, Unlimited}}, got); diff != "" {
			t.Errorf("peer %d, by name (-want +got):\n%s", peer, diff)
		}
	}
	if _, err := LearnRuntimeLimit(t.TempDir(), 0); err == nil {
		t.Error("empty proc: want error")
	}
}

func TestPeerPID(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err == nil {
			defer c.Close()
			buf := make([]byte, 1)
			c.Read(buf)
		}
	}()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := PeerPID(c); got != os.Getpid() {
		t.Errorf("PeerPID = %d, want %d (this process listens)", got, os.Getpid())
	}
}
