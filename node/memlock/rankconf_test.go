package memlock

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/ibkube/ibkube/contract"
)

// TestParseNCCLConf checks the reader against NCCL's setEnvFile
// (NVIDIA/nccl src/misc/param.cc, commit 081eafaf): '#' skips a line only in
// the first column; a line without '=' is skipped; the name is everything
// before the first '=' and is not trimmed; the value is the rest of the line
// with only its newline removed; both are cut at 1023 characters
// (char envVar[1024], envValue[1024]).
func TestParseNCCLConf(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 1100)
	text := "# comment\nNCCL_A=1\n  # not a comment=yes\nno equals sign\n\nNCCL_B=x=y\nNCCL_C =spaced \nNCCL_D=\n=nameless\nNCCL_LONG=" + long + "\nNCCL_LAST=no newline"
	want := [][2]string{
		{"NCCL_A", "1"},
		{"  # not a comment", "yes"},
		{"NCCL_B", "x=y"},
		{"NCCL_C ", "spaced "},
		{"NCCL_D", ""},
		{"NCCL_LONG", long[:1023]},
		{"NCCL_LAST", "no newline"},
	}
	if d := cmp.Diff(want, ParseNCCLConf(text)); d != "" {
		t.Errorf("ParseNCCLConf (-want +got):\n%s", d)
	}
}

func uid(u uint32) *uint32 { return &u }

func TestDecideRankConf(t *testing.T) {
	t.Parallel()
	ib := DeviceSet{{231, 192}: "uverbs0"}
	dev := []Device{{Path: "/dev/infiniband/uverbs0", Type: "c", Major: 231, Minor: 192}}
	profileConf := "NCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_NET_GDR_LEVEL=SYS\nNCCL_IB_HCA=profile-loses\n"
	ann := map[string]string{contract.AnnotationNCCLConf: profileConf}
	// What the kubelet and containerd give a worker on an ND H100 v5 node:
	// the device plugin's node facts, the webhook's NCCL_CONF_FILE, the
	// user's own NCCL_DEBUG and an image variable.
	env := []string{
		"PATH=/usr/bin", "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1", "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1",
		"NCCL_TOPO_FILE=/etc/ibkube/nccl-topo.xml", "NCCL_DEBUG=INFO", "NCCL_CONF_FILE=" + contract.NCCLConfFile,
	}
	header := "# Written by the ibkube node agent: the NCCL settings this container's main\n" +
		"# process resolves from its environment and NCCL_CONF_FILE, for processes\n" +
		"# started without that environment (MPI ranks over SSH). /etc/nccl.conf is\n" +
		"# read after this file, as for the main process.\n"
	tests := []struct {
		name        string
		in          RankInput
		wantOutcome RankOutcome
		wantTarget  string
		wantContent string
		wantReason  string
	}{
		{
			name:        "root worker: environment over the profile conf file",
			in:          RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, Env: env, UID: uid(0)},
			wantOutcome: RankWritten, wantTarget: "/root/.nccl.conf",
			wantContent: header + "NCCL_DEBUG=INFO\nNCCL_IB_HCA==mlx5_0:1,mlx5_1:1\nNCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_NET_GDR_LEVEL=SYS\nNCCL_TOPO_FILE=/etc/ibkube/nccl-topo.xml\n",
		},
		{
			name: "user override of a profile value wins, an image variable too",
			in: RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, UID: uid(0),
				Env: append([]string{"NCCL_NET_GDR_LEVEL=PHB", "NCCL_VERSION=2.27"}, env...)},
			wantOutcome: RankWritten, wantTarget: "/root/.nccl.conf",
			wantContent: header + "NCCL_DEBUG=INFO\nNCCL_IB_HCA==mlx5_0:1,mlx5_1:1\nNCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_NET_GDR_LEVEL=PHB\nNCCL_TOPO_FILE=/etc/ibkube/nccl-topo.xml\nNCCL_VERSION=2.27\n",
		},
		{
			name: "first of a duplicated name wins, as getenv",
			in: RankInput{Devices: dev, IBDevices: ib, UID: uid(0),
				Env: []string{"NCCL_IB_HCA==mlx5_0:1", "NCCL_IB_HCA==mlx5_9:1"}},
			wantOutcome: RankWritten, wantTarget: "/root/.nccl.conf",
			wantContent: header + "NCCL_IB_HCA==mlx5_0:1\n",
		},
		{
			name: "root with HOME elsewhere: NCCL asks getpwuid, not HOME",
			in: RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, UID: uid(0),
				Env: []string{"HOME=/workspace", "NCCL_IB_HCA==mlx5_0:1"}},
			wantOutcome: RankWritten, wantTarget: "/root/.nccl.conf",
			wantContent: header + "NCCL_IB_HCA==mlx5_0:1\n",
			wantReason:  "1 NCCL settings of the main process written to /root/.nccl.conf for processes started without its environment; NCCL_CONF_FILE is unset, so the main process reads this file too",
		},
		{
			name: "non-root with HOME",
			in: RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, UID: uid(1000),
				Env: append([]string{"HOME=/home/mpiuser/"}, env...)},
			wantOutcome: RankWritten, wantTarget: "/home/mpiuser/.nccl.conf",
			wantContent: header + "NCCL_DEBUG=INFO\nNCCL_IB_HCA==mlx5_0:1,mlx5_1:1\nNCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_NET_GDR_LEVEL=SYS\nNCCL_TOPO_FILE=/etc/ibkube/nccl-topo.xml\n",
		},
		{
			name:        "non-root without HOME: skipped, saying how to fix it",
			in:          RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, UID: uid(1000), Env: env},
			wantOutcome: RankNoHome,
			wantReason:  "container runs as uid 1000 without HOME in its environment, so ibkube cannot tell where NCCL looks for ~/.nccl.conf (the home directory in the image's /etc/passwd); set env HOME to that directory, or pass NCCL_CONF_FILE to the processes you start (mpirun -x NCCL_CONF_FILE -x NCCL_IB_HCA -x NCCL_TOPO_FILE)",
		},
		{
			name:        "uid unknown, HOME set",
			in:          RankInput{Devices: dev, IBDevices: ib, Env: []string{"HOME=/home/u", "NCCL_IB_HCA==mlx5_0:1"}},
			wantOutcome: RankWritten, wantTarget: "/home/u/.nccl.conf",
			wantContent: header + "NCCL_IB_HCA==mlx5_0:1\n",
		},
		{
			name:        "uid unknown, no HOME: root assumed",
			in:          RankInput{Devices: dev, IBDevices: ib, Env: []string{"NCCL_IB_HCA==mlx5_0:1"}},
			wantOutcome: RankWritten, wantTarget: "/root/.nccl.conf",
			wantContent: header + "NCCL_IB_HCA==mlx5_0:1\n",
		},
		{
			name:        "no ibkube device",
			in:          RankInput{PodAnnotations: ann, Devices: []Device{{Path: "/dev/infiniband/uverbs0", Type: "c", Major: 231, Minor: 200}}, IBDevices: ib, Env: env, UID: uid(0)},
			wantOutcome: RankNoDevices,
		},
		{
			name:        "the user mounts the file",
			in:          RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, Env: env, UID: uid(0), MountDestinations: []string{"/root/.nccl.conf"}},
			wantOutcome: RankUserMount, wantTarget: "/root/.nccl.conf",
		},
		{
			name: "the container's own NCCL_CONF_FILE: its environment only",
			in: RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, UID: uid(0),
				Env: []string{"NCCL_CONF_FILE=/opt/site/nccl.conf", "NCCL_IB_HCA==mlx5_0:1"}},
			wantOutcome: RankWritten, wantTarget: "/root/.nccl.conf",
			wantContent: header + "NCCL_IB_HCA==mlx5_0:1\n",
			wantReason:  "1 NCCL settings of the main process written to /root/.nccl.conf for processes started without its environment; NCCL_CONF_FILE=/opt/site/nccl.conf is the container's own file, which the agent cannot read: processes started without the environment get its values only if they set NCCL_CONF_FILE themselves",
		},
		{
			name: "values a conf line cannot carry are dropped and named",
			in: RankInput{Devices: dev, IBDevices: ib, UID: uid(0),
				Env: []string{"NCCL_IB_HCA==mlx5_0:1", "NCCL_MULTI=a\nb", "NCCL_HUGE=" + strings.Repeat("y", 1024)}},
			wantOutcome: RankWritten, wantTarget: "/root/.nccl.conf",
			wantContent: header + "NCCL_IB_HCA==mlx5_0:1\n",
			wantReason:  "1 NCCL settings of the main process written to /root/.nccl.conf for processes started without its environment; NCCL_CONF_FILE is unset, so the main process reads this file too; not carried (a conf file line holds at most 1023 characters and no newline): NCCL_HUGE (environment), NCCL_MULTI (environment)",
		},
		{
			name:        "nothing to carry",
			in:          RankInput{Devices: dev, IBDevices: ib, UID: uid(0), Env: []string{"PATH=/bin", "NCCL_CONF_FILE=" + contract.NCCLConfFile}},
			wantOutcome: RankNothing,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := DecideRankConf(tc.in)
			if got.Outcome != tc.wantOutcome || got.Target != tc.wantTarget {
				t.Fatalf("outcome, target = %s, %q; want %s, %q (reason: %s)", got.Outcome, got.Target, tc.wantOutcome, tc.wantTarget, got.Reason)
			}
			if d := cmp.Diff(tc.wantContent, got.Content); d != "" {
				t.Errorf("content (-want +got):\n%s", d)
			}
			if tc.wantReason != "" && got.Reason != tc.wantReason {
				t.Errorf("reason = %q\nwant     %q", got.Reason, tc.wantReason)
			}
			if got.Outcome == RankWritten {
				// The file read back as NCCL reads it gives the settings.
				back := map[string]string{}
				for _, kv := range ParseNCCLConf(got.Content) {
					back[kv[0]] = kv[1]
				}
				if d := cmp.Diff(got.Settings, back); d != "" {
					t.Errorf("file read back as NCCL does (-settings +read):\n%s", d)
				}
			}
		})
	}
}
