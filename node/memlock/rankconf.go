package memlock

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/ibkube/ibkube/contract"
)

// A process started inside a container with an empty environment (sshd
// starting Open MPI's orted and the ranks it forks, or `env -i`) has none of
// the container's NCCL_* variables: not NCCL_CONF_FILE, not the node's
// NCCL_IB_HCA or NCCL_TOPO_FILE. NCCL still reads two files at init
// (NVIDIA/nccl src/misc/param.cc initEnvFunc): the file named by
// NCCL_CONF_FILE or, when that is unset or empty, "<home>/.nccl.conf" where
// home is getpwuid(getuid())->pw_dir (userHomeDir, not $HOME); then
// /etc/nccl.conf. Each line is applied with setenv(name, value, 0)
// (setEnvFile, ncclOsSetEnv in src/os/linux.cc), so the environment wins
// over the first file and the first file over /etc/nccl.conf.
//
// RankConf writes, for each container holding ibkube's devices, what its
// main process resolves before /etc/nccl.conf (its NCCL_* environment, then
// the conf file NCCL_CONF_FILE names) into a file that is bind-mounted
// read-only at "<home>/.nccl.conf". A process with an empty environment then
// reads that file and after it the image's own /etc/nccl.conf, which stays
// below exactly as for the main process.

const (
	// RankConfName is the file NCCL reads in the home directory when
	// NCCL_CONF_FILE is unset.
	RankConfName = ".nccl.conf"
	// RootHome is root's home directory in the container images NCCL runs in.
	RootHome = "/root"
	// ncclConfLineMax is the most of a name or a value setEnvFile keeps
	// (char envVar[1024], envValue[1024]).
	ncclConfLineMax = 1023
)

// RankOutcome classifies a RankConf decision for metrics and tests.
type RankOutcome string

// Rank conf outcomes.
const (
	RankWritten   RankOutcome = "written"    // the file is written and mounted
	RankNoDevices RankOutcome = "no_devices" // the container holds no ibkube device
	RankNoHome    RankOutcome = "no_home"    // the container's home directory is unknown
	RankUserMount RankOutcome = "user_mount" // the container already mounts something there
	RankNothing   RankOutcome = "nothing"    // the main process resolves no NCCL setting
)

// RankInput is everything RankConf looks at.
type RankInput struct {
	// PodAnnotations are the pod sandbox's annotations.
	PodAnnotations map[string]string
	// Devices are the container's Linux devices; IBDevices the node's.
	Devices   []Device
	IBDevices DeviceSet
	// Env is the container process's environment as the runtime starts
	// it ("NAME=value"): the image's, the device plugin's and the pod's.
	Env []string
	// UID is the container process's user, nil when the runtime does not
	// say.
	UID *uint32
	// MountDestinations are the container's mount points.
	MountDestinations []string
}

// RankConf is the decision for one container.
type RankConf struct {
	Outcome RankOutcome
	// Target is where the file is mounted in the container ("" if not).
	Target string
	// Content is the file's text.
	Content string
	// Settings are the NCCL settings in the file, by name.
	Settings map[string]string
	// Dropped names the settings the file cannot carry as the main process
	// sees them (a value with a newline, a name or value longer than NCCL
	// reads from a conf file).
	Dropped []string
	// Reason explains the decision in one sentence, for logs and events.
	Reason string
}

// DecideRankConf computes the NCCL conf file that gives a process started
// with an empty environment the NCCL settings of the container's main
// process.
func DecideRankConf(in RankInput) RankConf {
	if ibkubeDevice(in.Devices, in.IBDevices) == "" {
		return RankConf{Outcome: RankNoDevices, Reason: "container holds no ibkube RDMA device"}
	}
	env := envMap(in.Env)
	home, why := homeDir(in.UID, env)
	if home == "" {
		return RankConf{Outcome: RankNoHome, Reason: why}
	}
	target := path.Join(home, RankConfName)
	for _, m := range in.MountDestinations {
		if path.Clean(m) == target {
			return RankConf{Outcome: RankUserMount, Target: target,
				Reason: fmt.Sprintf("the container already mounts %s; ibkube leaves it, so processes started without the container's environment read that file", target)}
		}
	}

	settings := map[string]string{}
	var dropped []string
	keep := func(name, value, from string) {
		if strings.ContainsAny(value, "\n") || len(name) > ncclConfLineMax || len(value) > ncclConfLineMax {
			dropped = append(dropped, name+" ("+from+")")
			return
		}
		settings[name] = value
	}
	for name, value := range env {
		if strings.HasPrefix(name, "NCCL_") && name != contract.EnvNCCLConfFile {
			keep(name, value, "environment")
		}
	}
	var notes []string
	switch conf := env[contract.EnvNCCLConfFile]; conf {
	case "":
		// NCCL then reads <home>/.nccl.conf, which is the very file
		// written here; an image's own file at that path is shadowed.
		notes = append(notes, "NCCL_CONF_FILE is unset, so the main process reads this file too")
	case contract.NCCLConfFile:
		for _, kv := range ParseNCCLConf(in.PodAnnotations[contract.AnnotationNCCLConf]) {
			if _, set := env[kv[0]]; set || kv[0] == contract.EnvNCCLConfFile {
				continue
			}
			keep(kv[0], kv[1], "profile conf file")
		}
	default:
		notes = append(notes, fmt.Sprintf("NCCL_CONF_FILE=%s is the container's own file, which the agent cannot read: processes started without the environment get its values only if they set NCCL_CONF_FILE themselves", conf))
	}
	sort.Strings(dropped)
	if len(dropped) > 0 {
		notes = append(notes, "not carried (a conf file line holds at most 1023 characters and no newline): "+strings.Join(dropped, ", "))
	}
	if len(settings) == 0 {
		return RankConf{Outcome: RankNothing, Dropped: dropped, Reason: strings.Join(append([]string{"the main process resolves no NCCL setting"}, notes...), "; ")}
	}
	names := make([]string, 0, len(settings))
	for n := range settings {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("# Written by the ibkube node agent: the NCCL settings this container's main\n")
	b.WriteString("# process resolves from its environment and NCCL_CONF_FILE, for processes\n")
	b.WriteString("# started without that environment (MPI ranks over SSH). /etc/nccl.conf is\n")
	b.WriteString("# read after this file, as for the main process.\n")
	for _, n := range names {
		b.WriteString(n + "=" + settings[n] + "\n")
	}
	reason := fmt.Sprintf("%d NCCL settings of the main process written to %s for processes started without its environment", len(settings), target)
	if why != "" {
		notes = append([]string{why}, notes...)
	}
	if len(notes) > 0 {
		reason += "; " + strings.Join(notes, "; ")
	}
	return RankConf{Outcome: RankWritten, Target: target, Content: b.String(), Settings: settings, Dropped: dropped, Reason: reason}
}

// homeDir returns the directory NCCL's getpwuid(getuid())->pw_dir gives the
// container's user, as far as the agent can tell without the image's
// /etc/passwd: /root for uid 0; HOME from the environment for another uid
// (runc sets HOME from /etc/passwd only at exec, so a HOME in the spec is
// the image's or the pod's own statement); "" and why otherwise.
func homeDir(uid *uint32, env map[string]string) (home, note string) {
	h := env["HOME"]
	switch {
	case uid != nil && *uid == 0:
		return RootHome, ""
	case uid != nil && path.IsAbs(h):
		return path.Clean(h), ""
	case uid != nil:
		return "", fmt.Sprintf("container runs as uid %d without HOME in its environment, so ibkube cannot tell where NCCL looks for ~/%s (the home directory in the image's /etc/passwd); set env HOME to that directory, or pass NCCL_CONF_FILE to the processes you start (mpirun -x NCCL_CONF_FILE -x NCCL_IB_HCA -x NCCL_TOPO_FILE)", *uid, RankConfName)
	case path.IsAbs(h):
		return path.Clean(h), "the runtime does not say the container's uid; using HOME"
	default:
		return RootHome, "the runtime does not say the container's uid; assuming root"
	}
}

// envMap turns a process environment into a map with getenv's rule: the
// first entry of a name is the one a process sees.
func envMap(env []string) map[string]string {
	m := make(map[string]string, len(env))
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		if _, seen := m[name]; !seen {
			m[name] = value
		}
	}
	return m
}

// ParseNCCLConf reads conf file text the way NCCL's setEnvFile does
// (NVIDIA/nccl src/misc/param.cc): a line starting with '#' is skipped, a
// line without '=' is skipped, the name is everything before the first '='
// and the value everything after it (no trimming), each cut at 1023
// characters. It returns the (name, value) pairs in file order.
func ParseNCCLConf(text string) [][2]string {
	var out [][2]string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok || name == "" {
			continue
		}
		out = append(out, [2]string{truncate(name), truncate(value)})
	}
	return out
}

func truncate(s string) string {
	if len(s) > ncclConfLineMax {
		return s[:ncclConfLineMax]
	}
	return s
}
