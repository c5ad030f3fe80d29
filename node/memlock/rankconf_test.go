package memlock

import (
	"fmt"
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

// uverbs0 is a node's one ibkube device, uverbs0, and the container's
// device list holding it.
func uverbs0() (DeviceSet, []Device) {
	return DeviceSet{{231, 192}: "uverbs0"}, []Device{{Path: "/dev/infiniband/uverbs0", Type: "c", Major: 231, Minor: 192}}
}

func TestDecideRankConf(t *testing.T) {
	t.Parallel()
	ib, dev := uverbs0()
	profileConf := "NCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_NET_GDR_LEVEL=SYS\nNCCL_IB_HCA=profile-loses\n"
	ann := map[string]string{contract.AnnotationNCCLConf: profileConf}
	// What the kubelet and containerd give a worker on an ND H100 v5 node:
	// the device plugin's node facts, the webhook's NCCL_CONF_FILE, the
	// user's own NCCL_DEBUG and an image variable.
	env := []string{
		"PATH=/usr/bin", "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1", "UCX_NET_DEVICES=mlx5_0:1,mlx5_1:1",
		"NCCL_TOPO_FILE=/etc/ibkube/nccl-topo.xml", "NCCL_DEBUG=INFO", "NCCL_CONF_FILE=" + contract.NCCLConfFile,
	}
	// The image's NCCL is unknown in these cases: the file then has no
	// comment lines, which NCCL before 2.26.2 would not skip
	// (TestRankConfPerNCCLRelease has the header).
	header := ""
	rootPw := Passwd{Status: PasswdFound, Home: "/root"}
	mpiPw := Passwd{Status: PasswdFound, Home: "/home/mpiuser"}
	// rootWorker is a root container with ibkube's device and a passwd
	// entry, started with env and no annotations.
	rootWorker := func(env ...string) RankInput {
		return RankInput{Devices: dev, IBDevices: ib, UID: uid(0), Passwd: rootPw, Env: env}
	}
	rootConf := []string{"/root/.nccl.conf"}
	oneHCAConf := header + "NCCL_IB_HCA==mlx5_0:1\n"
	tests := []struct {
		name        string
		in          RankInput
		wantOutcome RankOutcome
		wantTargets []string
		wantContent string
		wantReason  string
		wantWarn    bool
	}{
		{
			name:        "root worker: environment over the profile conf file",
			in:          RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, Env: env, UID: uid(0), Passwd: rootPw},
			wantOutcome: RankWritten, wantTargets: rootConf,
			wantContent: header + "NCCL_DEBUG=INFO\nNCCL_IB_HCA==mlx5_0:1,mlx5_1:1\nNCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_NET_GDR_LEVEL=SYS\nNCCL_TOPO_FILE=/etc/ibkube/nccl-topo.xml\n",
		},
		{
			name: "user override of a profile value wins, an image variable too",
			in: RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, UID: uid(0), Passwd: rootPw,
				Env: append([]string{"NCCL_NET_GDR_LEVEL=PHB", "NCCL_VERSION=2.27"}, env...)},
			wantOutcome: RankWritten, wantTargets: rootConf,
			wantContent: header + "NCCL_DEBUG=INFO\nNCCL_IB_HCA==mlx5_0:1,mlx5_1:1\nNCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_NET_GDR_LEVEL=PHB\nNCCL_TOPO_FILE=/etc/ibkube/nccl-topo.xml\nNCCL_VERSION=2.27\n",
		},
		{
			name:        "first of a duplicated name wins, as getenv",
			in:          rootWorker("NCCL_IB_HCA==mlx5_0:1", "NCCL_IB_HCA==mlx5_9:1"),
			wantOutcome: RankWritten, wantTargets: rootConf,
			wantContent: oneHCAConf,
		},
		{
			name: "root with HOME elsewhere: the passwd home for ssh ranks, HOME for NCCL >= 2.30.3",
			in: RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, UID: uid(0), Passwd: rootPw,
				Env: []string{"HOME=/workspace", "NCCL_IB_HCA==mlx5_0:1"}},
			wantOutcome: RankWritten, wantTargets: []string{"/root/.nccl.conf", "/workspace/.nccl.conf"},
			wantContent: oneHCAConf,
			wantReason:  "1 NCCL settings of the main process written to /root/.nccl.conf and /workspace/.nccl.conf for processes started without its environment; NCCL_CONF_FILE is unset, so the main process reads this file too",
		},
		{
			name:        "Kubeflow's mpiuser without HOME in the spec: the passwd home",
			in:          RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, UID: uid(1000), Passwd: mpiPw, Env: env},
			wantOutcome: RankWritten, wantTargets: []string{"/home/mpiuser/.nccl.conf"},
			wantContent: header + "NCCL_DEBUG=INFO\nNCCL_IB_HCA==mlx5_0:1,mlx5_1:1\nNCCL_IB_PCI_RELAXED_ORDERING=1\nNCCL_NET_GDR_LEVEL=SYS\nNCCL_TOPO_FILE=/etc/ibkube/nccl-topo.xml\n",
		},
		{
			name:        "uid without a passwd entry: no file, an Event saying ssh ranks cannot run",
			in:          RankInput{Devices: dev, IBDevices: ib, UID: uid(4242), Passwd: Passwd{Status: PasswdNoEntry}, Env: []string{"HOME=/tmp", "NCCL_IB_HCA==mlx5_0:1"}},
			wantOutcome: RankNoPasswd,
			wantReason:  "uid 4242 has no entry in the image's /etc/passwd: sshd refuses a session for a user without one (and runc gives it HOME=/), so MPI ranks launched over ssh cannot run as it; add the user to the image (useradd -m -u 4242 NAME) or run the container as a uid the image defines",
		},
		{
			name:        "a passwd home of ../../..: nothing mounted",
			in:          RankInput{Devices: dev, IBDevices: ib, UID: uid(1000), Passwd: Passwd{Status: PasswdFound, Home: "../../.."}, Env: []string{"NCCL_IB_HCA==mlx5_0:1"}},
			wantOutcome: RankNoHome,
			wantReason:  `the home of uid 1000 in the image's /etc/passwd "../../.." is not where the file can go (not an absolute path); no NCCL conf file mounted for processes started without the container's environment`,
		},
		{
			name:        "passwd unread, non-root without HOME: skipped, saying how to fix it",
			in:          RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, UID: uid(1000), Env: env, Passwd: Passwd{Why: "no runtime snapshot access"}},
			wantOutcome: RankNoHome,
			wantReason:  "container runs as uid 1000 without HOME in its environment and the image's /etc/passwd was not read (no runtime snapshot access), so ibkube cannot tell where NCCL looks for ~/.nccl.conf; set env HOME to the user's home directory, or pass NCCL_CONF_FILE to the processes you start (mpirun -x NCCL_CONF_FILE -x NCCL_IB_HCA -x NCCL_TOPO_FILE)",
		},
		{
			name:        "no ibkube device",
			in:          RankInput{PodAnnotations: ann, Devices: []Device{{Path: "/dev/infiniband/uverbs0", Type: "c", Major: 231, Minor: 200}}, IBDevices: ib, Env: env, UID: uid(0)},
			wantOutcome: RankNoDevices,
		},
		{
			name:        "the user mounts the file",
			in:          RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, Env: env, UID: uid(0), Passwd: rootPw, MountDestinations: []string{"/root/.nccl.conf"}},
			wantOutcome: RankUserMount,
		},
		{
			name: "the container's own NCCL_CONF_FILE: its environment only",
			in: RankInput{PodAnnotations: ann, Devices: dev, IBDevices: ib, UID: uid(0), Passwd: rootPw,
				Env: []string{"NCCL_CONF_FILE=/opt/site/nccl.conf", "NCCL_IB_HCA==mlx5_0:1"}},
			wantOutcome: RankWritten, wantTargets: rootConf,
			wantContent: oneHCAConf,
			wantReason:  "1 NCCL settings of the main process written to /root/.nccl.conf for processes started without its environment; NCCL_CONF_FILE=/opt/site/nccl.conf is the container's own file, which the agent cannot read: processes started without the environment get its values only if they set NCCL_CONF_FILE themselves",
		},
		{
			name:        "values a conf line cannot carry are dropped and named",
			in:          rootWorker("NCCL_IB_HCA==mlx5_0:1", "NCCL_MULTI=a\nb", "NCCL_HUGE="+strings.Repeat("y", 1024)),
			wantOutcome: RankWritten, wantTargets: rootConf,
			wantContent: oneHCAConf,
			wantReason:  "1 NCCL settings of the main process written to /root/.nccl.conf for processes started without its environment; NCCL_CONF_FILE is unset, so the main process reads this file too; not carried (a conf file line holds at most 1023 characters, no newline, after a plain variable name): NCCL_HUGE (environment), NCCL_MULTI (environment)",
		},
		{
			name:        "a newline in an image variable's name adds no line",
			in:          rootWorker("NCCL_IB_HCA==mlx5_0:1", "NCCL_A\nNCCL_NET_PLUGIN=/tmp/evil.so=x"),
			wantOutcome: RankWritten, wantTargets: rootConf,
			wantContent: oneHCAConf,
		},
		{
			name:        "100,000 inherited NCCL variables: a bounded file",
			in:          rootWorker(manyNCCL(100000)...),
			wantOutcome: RankWritten, wantTargets: rootConf,
			wantContent: header + manyNCCLConf(100000),
		},
		{
			name:        "nothing to carry",
			in:          rootWorker("PATH=/bin", "NCCL_CONF_FILE="+contract.NCCLConfFile),
			wantOutcome: RankNothing,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := DecideRankConf(tc.in)
			if got.Outcome != tc.wantOutcome || !cmp.Equal(got.Targets, tc.wantTargets) {
				t.Fatalf("outcome, targets = %s, %q; want %s, %q (reason: %s)", got.Outcome, got.Targets, tc.wantOutcome, tc.wantTargets, got.Reason)
			}
			if len(got.Content) > RankConfMaxBytes+len(header) {
				t.Errorf("file of %d bytes, over the bound %d", len(got.Content), RankConfMaxBytes)
			}
			if len(got.Reason) > 4096 {
				t.Errorf("reason of %d bytes", len(got.Reason))
			}
			if d := cmp.Diff(tc.wantContent, got.Content); d != "" {
				t.Errorf("content (-want +got):\n%s", d)
			}
			if got.Warn != tc.wantWarn {
				t.Errorf("warn = %v, want %v (reason: %s)", got.Warn, tc.wantWarn, got.Reason)
			}
			if strings.Contains(got.Content, "NCCL_NET_PLUGIN") {
				t.Errorf("a variable name with a newline added a line: %q", got.Content)
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

// TestRankConfTargets: where the file goes for a uid, its entry in the
// image's /etc/passwd and HOME; the file is the same one-HCA file
// throughout. A home must be absolute, clean and outside /proc and /sys;
// one the user mounts is left to the user.
func TestRankConfTargets(t *testing.T) {
	t.Parallel()
	ib, dev := uverbs0()
	mpiPw := Passwd{Status: PasswdFound, Home: "/home/mpiuser"}
	for _, tc := range []struct {
		name    string
		uid     *uint32
		passwd  Passwd
		home    string // HOME in the container's environment, "" for none
		mounts  []string
		outcome RankOutcome
		targets []string
		warn    bool
	}{
		{"HOME equal to the passwd home: one target", uid(1000), mpiPw, "/home/mpiuser/", nil, RankWritten, []string{"/home/mpiuser/.nccl.conf"}, false},
		{"HOME=/tmp and the passwd home: both", uid(1000), mpiPw, "/tmp", nil, RankWritten, []string{"/home/mpiuser/.nccl.conf", "/tmp/.nccl.conf"}, false},
		{"relative HOME is not a target", uid(1000), mpiPw, "work", nil, RankWritten, []string{"/home/mpiuser/.nccl.conf"}, false},
		{"HOME under /sys is not a target", uid(1000), mpiPw, "/sys/fs", nil, RankWritten, []string{"/home/mpiuser/.nccl.conf"}, true},
		{"a passwd home under /proc: nothing mounted", uid(1000), Passwd{Status: PasswdFound, Home: "/proc/self/root/etc"}, "", nil, RankNoHome, nil, false},
		{"a passwd home not clean, HOME good: HOME only, with a warning", uid(1000), Passwd{Status: PasswdFound, Home: "/home/../etc"}, "/tmp", nil, RankWritten, []string{"/tmp/.nccl.conf"}, true},
		{"passwd unread, non-root with HOME", uid(1000), Passwd{}, "/home/u", nil, RankWritten, []string{"/home/u/.nccl.conf"}, false},
		{"uid unknown, HOME set", nil, Passwd{}, "/home/u", nil, RankWritten, []string{"/home/u/.nccl.conf"}, false},
		{"uid unknown, no HOME: root assumed", nil, Passwd{}, "", nil, RankWritten, []string{"/root/.nccl.conf"}, false},
		{"the user mounts one of two targets: the other is written", uid(1000), mpiPw, "/tmp", []string{"/tmp/.nccl.conf"}, RankWritten, []string{"/home/mpiuser/.nccl.conf"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := []string{"NCCL_IB_HCA==mlx5_0:1"}
			if tc.home != "" {
				env = append([]string{"HOME=" + tc.home}, env...)
			}
			got := DecideRankConf(RankInput{Devices: dev, IBDevices: ib, UID: tc.uid, Passwd: tc.passwd, Env: env, MountDestinations: tc.mounts})
			if got.Outcome != tc.outcome || !cmp.Equal(got.Targets, tc.targets) || got.Warn != tc.warn {
				t.Fatalf("outcome, targets, warn = %s, %q, %t; want %s, %q, %t (reason: %s)", got.Outcome, got.Targets, got.Warn, tc.outcome, tc.targets, tc.warn, got.Reason)
			}
			if want := "NCCL_IB_HCA==mlx5_0:1\n"; got.Outcome == RankWritten && got.Content != want {
				t.Errorf("content %q, want %q", got.Content, want)
			}
		})
	}
}

// manyNCCL is an environment of n NCCL_* variables of 20-byte lines.
func manyNCCL(n int) []string {
	env := make([]string, n)
	for i := range env {
		env[i] = fmt.Sprintf("NCCL_X%07d=abcdefg", i)
	}
	return env
}

// manyNCCLConf is what of manyNCCL(n) the file's bound holds: the first
// by name.
func manyNCCLConf(n int) string {
	var b strings.Builder
	for _, kv := range manyNCCL(n) {
		if b.Len()+len(kv)+1 > RankConfMaxBytes {
			break
		}
		b.WriteString(kv + "\n")
	}
	return b.String()
}

func TestLookupPasswd(t *testing.T) {
	t.Parallel()
	// Kubeflow mpi-operator's base image: `useradd -m mpiuser` after the
	// Debian base's own entries.
	text := "root:x:0:0:root:/root:/bin/bash\n# a comment:x:1000:1000::/nope:\n\nshort:x:1000\nmpiuser:x:1000:1000::/home/mpiuser:/bin/sh\ndup:x:1000:1000::/second:/bin/sh\n"
	for _, tc := range []struct {
		uid  uint32
		want Passwd
	}{
		{0, Passwd{Status: PasswdFound, Home: "/root"}},
		{1000, Passwd{Status: PasswdFound, Home: "/home/mpiuser"}},
		{4242, Passwd{Status: PasswdNoEntry}},
	} {
		if d := cmp.Diff(tc.want, LookupPasswd([]byte(text), tc.uid)); d != "" {
			t.Errorf("uid %d (-want +got):\n%s", tc.uid, d)
		}
	}
}

// gdrSysWorker is a container holding ibkube's device in a pod whose
// profile sets NCCL_NET_GDR_LEVEL=SYS.
func gdrSysWorker() RankInput {
	ib, dev := uverbs0()
	return RankInput{
		PodAnnotations: map[string]string{contract.AnnotationNCCLConf: "NCCL_NET_GDR_LEVEL=SYS\n"},
		Devices:        dev,
		IBDevices:      ib,
	}
}

// rankHeader is the file's comment header, written only for an NCCL that
// skips '#' lines.
const rankHeader = "# Written by the ibkube node agent: the NCCL settings this container's main\n" +
	"# process resolves from its environment and NCCL_CONF_FILE, for processes\n" +
	"# started without that environment (MPI ranks over SSH). /etc/nccl.conf is\n" +
	"# read after this file, as for the main process.\n"

// TestRankConfPerNCCLRelease: the file follows the rules of the NCCL the
// image holds (ncclReleases, read in each release's src/misc/param.cc):
// comment lines only from 2.26.2; before 2.23.4 the main process ignores
// NCCL_CONF_FILE and reads this file, which therefore carries the
// profile's settings; both homes on every release (the passwd home before
// 2.30.3 and for ranks sshd starts, $HOME from 2.30.3). An AMD container
// (RCCL) gets .rccl.conf beside .nccl.conf in each home and no comments.
func TestRankConfPerNCCLRelease(t *testing.T) {
	t.Parallel()
	base := gdrSysWorker()
	base.Env = []string{"HOME=/workspace", "NCCL_IB_HCA==mlx5_0:1", "NCCL_CONF_FILE=" + contract.NCCLConfFile}
	base.UID = uid(1000)
	base.Passwd = Passwd{Status: PasswdFound, Home: "/home/mpiuser"}
	body := "NCCL_IB_HCA==mlx5_0:1\nNCCL_NET_GDR_LEVEL=SYS\n"
	for _, r := range ncclReleases {
		in := base
		in.NCCL = NCCLPlan{Found: []NCCLFound{{Version: r.version, From: "/usr/include/nccl.h"}}}
		got := DecideRankConf(in)
		want := body
		if r.comments {
			want = rankHeader + body
		}
		if d := cmp.Diff(want, got.Content); d != "" {
			t.Errorf("NCCL %s content (-want +got):\n%s", r.version, d)
		}
		if d := cmp.Diff([]string{"/home/mpiuser/.nccl.conf", "/workspace/.nccl.conf"}, got.Targets); d != "" {
			t.Errorf("NCCL %s targets (-want +got):\n%s", r.version, d)
		}
		if ignored := strings.Contains(got.Reason, "ignores NCCL_CONF_FILE"); ignored != !r.confFile {
			t.Errorf("NCCL %s: reason %q; want a note that NCCL_CONF_FILE is ignored: %v", r.version, got.Reason, !r.confFile)
		}
	}
	in := base
	in.RCCL = true
	in.NCCL = NCCLPlan{Found: []NCCLFound{{Version: Version{2, 30, 3}}}}
	got := DecideRankConf(in)
	wantTargets := []string{"/home/mpiuser/.nccl.conf", "/home/mpiuser/.rccl.conf", "/workspace/.nccl.conf", "/workspace/.rccl.conf"}
	if d := cmp.Diff(wantTargets, got.Targets); d != "" || got.Content != body {
		t.Errorf("RCCL container: targets (-want +got):\n%s\ncontent %q, want %q", d, got.Content, body)
	}
}

// TestRankConfCarriesImageHomeConf: the image's own ~/.nccl.conf, which the
// mount hides, is carried below the environment and the profile where the
// main process read it (NCCL_CONF_FILE unset, or an NCCL before 2.23.4 that
// ignores it), and not where the main process never reads it.
func TestRankConfCarriesImageHomeConf(t *testing.T) {
	t.Parallel()
	base := gdrSysWorker()
	base.UID = uid(0)
	base.Passwd = Passwd{Status: PasswdFound, Home: "/root"}
	base.ImageHomeConf = "NCCL_SOCKET_IFNAME=eth9\nNCCL_NET_GDR_LEVEL=LOC\nNCCL_IB_HCA=image-loses\nNCCL_SOCKET_IFNAME=second-loses\n"
	withConf := []string{"NCCL_IB_HCA==mlx5_0:1", "NCCL_CONF_FILE=" + contract.NCCLConfFile}
	carried := "NCCL_IB_HCA==mlx5_0:1\nNCCL_NET_GDR_LEVEL=SYS\nNCCL_SOCKET_IFNAME=eth9\n"
	for _, tc := range []struct {
		name    string
		env     []string
		version *Version
		want    string
	}{
		{"NCCL 2.19.3 ignores NCCL_CONF_FILE", withConf, &Version{2, 19, 3}, carried},
		{"NCCL 2.23.4 reads NCCL_CONF_FILE", withConf, &Version{2, 23, 4}, "NCCL_IB_HCA==mlx5_0:1\nNCCL_NET_GDR_LEVEL=SYS\n"},
		{"version unknown, NCCL_CONF_FILE set", withConf, nil, "NCCL_IB_HCA==mlx5_0:1\nNCCL_NET_GDR_LEVEL=SYS\n"},
		{"NCCL_CONF_FILE unset", []string{"NCCL_IB_HCA==mlx5_0:1"}, nil, "NCCL_IB_HCA==mlx5_0:1\nNCCL_NET_GDR_LEVEL=LOC\nNCCL_SOCKET_IFNAME=eth9\n"},
	} {
		in := base
		in.Env = tc.env
		if tc.version != nil {
			in.NCCL = NCCLPlan{Found: []NCCLFound{{Version: *tc.version}}}
		}
		if d := cmp.Diff(tc.want, DecideRankConf(in).Content); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
	}
}
