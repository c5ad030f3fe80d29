package memlock

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ibkube/ibkube/contract"
)

// A process started inside a container with an empty environment (sshd
// starting Open MPI's orted and the ranks it forks, or `env -i`) has none of
// the container's NCCL_* variables: not NCCL_CONF_FILE, not the node's
// NCCL_IB_HCA or NCCL_TOPO_FILE. NCCL still reads two files at init
// (NVIDIA/nccl src/misc/param.cc initEnvFunc): the file named by
// NCCL_CONF_FILE or, when that is unset or empty, "<home>/.nccl.conf"; then
// /etc/nccl.conf. Each line is applied with setenv(name, value, 0)
// (setEnvFile, ncclOsSetEnv in src/os/linux.cc), so the environment wins
// over the first file and the first file over /etc/nccl.conf. <home> is
// getpwuid(getuid())->pw_dir up to NCCL 2.29 and getenv("HOME") from 2.30.3
// (commit b3aeda4a). A rank that sshd starts has HOME set to its passwd home
// (openssh session.c do_setup_env), so on every NCCL version it looks in the
// home that the image's /etc/passwd gives the container's uid.
//
// RankConf writes, for each container holding ibkube's devices, what its
// main process resolves before /etc/nccl.conf (its NCCL_* environment, then
// the conf file NCCL_CONF_FILE names) into a file that is bind-mounted
// read-only at "<passwd home>/.nccl.conf", and also at "$HOME/.nccl.conf"
// when the container's HOME is another absolute directory (NCCL >= 2.30.3
// in a process that keeps HOME). A process with an empty environment then
// reads that file and after it the image's own /etc/nccl.conf, which stays
// below exactly as for the main process.

const (
	// RankConfName is the file NCCL reads in the home directory when
	// NCCL_CONF_FILE is unset.
	RankConfName = ".nccl.conf"
	// RCCLConfName is RCCL's: "$HOME/.rccl.conf" when NCCL_CONF_FILE is
	// unset, then /etc/rccl.conf (ROCm/rocm-systems projects/rccl
	// src/misc/param.cc at 40cf641); older RCCL reads only getpwuid's
	// "<pw_dir>/.rccl.conf", then /etc/rccl.conf, skips no '#' line and
	// has no NCCL_CONF_FILE (ROCm/rccl src/misc/param.cc, rocm-6.3 branch
	// at 0cbce2a7).
	RCCLConfName = ".rccl.conf"
	// RootHome is root's home directory in the container images NCCL runs in.
	RootHome = "/root"
	// ncclConfLineMax is the most of a name or a value setEnvFile keeps
	// (char envVar[1024], envValue[1024]).
	ncclConfLineMax = 1023
	// RankConfMaxBytes bounds the file: NCCL has a few hundred settings, so
	// a container whose environment holds more than this of NCCL_* text
	// (100,000 inherited variables) gets the first of them by name, not a
	// file as large as its environment written inside the runtime's call.
	RankConfMaxBytes = 64 << 10
	// pathMax is the longest mount target the kernel resolves (PATH_MAX).
	pathMax = 4096
	// namesShown is how many dropped names a reason lists.
	namesShown = 8
)

// RankOutcome classifies a RankConf decision for metrics and tests.
type RankOutcome string

// Rank conf outcomes.
const (
	RankWritten   RankOutcome = "written"    // the file is written and mounted
	RankNoDevices RankOutcome = "no_devices" // the container holds no ibkube device
	RankNoHome    RankOutcome = "no_home"    // no home directory where the file can go
	RankNoPasswd  RankOutcome = "no_passwd"  // the image's /etc/passwd has no entry for the uid
	RankUserMount RankOutcome = "user_mount" // the container already mounts something there
	RankNothing   RankOutcome = "nothing"    // the main process resolves no NCCL setting
)

// PasswdStatus says what the agent learned from the image's /etc/passwd.
type PasswdStatus string

// Passwd statuses.
const (
	// PasswdUnread: the agent could not read the image's file (no access to
	// the runtime's snapshots, a hostile or oversized file); Why says why.
	PasswdUnread PasswdStatus = ""
	// PasswdFound: the file has an entry for the uid; Home is its pw_dir.
	PasswdFound PasswdStatus = "found"
	// PasswdNoEntry: the image has no /etc/passwd, or no entry for the uid.
	PasswdNoEntry PasswdStatus = "no_entry"
)

// Passwd is the image's /etc/passwd entry for the container's uid, as
// getpwuid would return it inside the container.
type Passwd struct {
	Status PasswdStatus
	Home   string
	Why    string
}

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
	// Passwd is what the image's /etc/passwd says of UID.
	Passwd Passwd
	// MountDestinations are the container's mount points.
	MountDestinations []string
	// NCCL is what the image says of the NCCL the container loads; RCCL
	// is true when it loads RCCL (an AMD GPU container).
	NCCL NCCLPlan
	RCCL bool
	// ImageHomeConf is the image's own .nccl.conf in the passwd home, which
	// the mounted file hides ("" when it has none or it was not read).
	ImageHomeConf string
}

// RankConf is the decision for one container.
type RankConf struct {
	Outcome RankOutcome
	// Targets are where the file is mounted in the container, the passwd
	// home's first.
	Targets []string
	// Content is the file's text.
	Content string
	// Settings are the NCCL settings in the file, by name.
	Settings map[string]string
	// Dropped names the settings the file cannot carry as the main process
	// sees them (a value with a newline, a name or value longer than NCCL
	// reads from a conf file, a name that is not a plain variable name, the
	// file's bound), at most namesShown of them plus a count.
	Dropped []string
	// Reason explains the decision, for logs and events.
	Reason string
	// Warn is set when a written file still leaves some processes without
	// the settings (a home the file cannot go to): worth a pod Event.
	Warn bool
}

// HoldsIBDevice tells whether the container holds one of ibkube's RDMA
// devices, the only containers RankConf writes for.
func HoldsIBDevice(in RankInput) bool {
	return ibkubeDevice(in.Devices, in.IBDevices) != ""
}

// DecideRankConf computes the NCCL conf file that gives a process started
// with an empty environment the NCCL settings of the container's main
// process.
func DecideRankConf(in RankInput) RankConf {
	if !HoldsIBDevice(in) {
		return RankConf{Outcome: RankNoDevices, Reason: "container holds no ibkube RDMA device"}
	}
	env := envMap(in.Env)
	homes, notes, info, outcome, why := homeDirs(in.UID, in.Passwd, env["HOME"])
	if len(homes) == 0 {
		return RankConf{Outcome: outcome, Reason: why}
	}
	var targets []string
	warn := len(notes) > 0
	if info != "" {
		notes = append(notes, info)
	}
	names := []string{RankConfName}
	if in.RCCL {
		names = append(names, RCCLConfName)
	}
	for _, home := range homes {
		for _, name := range names {
			target := path.Join(home, name)
			if slices.ContainsFunc(in.MountDestinations, func(m string) bool { return path.Clean(m) == target }) {
				notes = append(notes, fmt.Sprintf("the container already mounts %s; ibkube leaves it, so processes that look there read that file", target))
				continue
			}
			targets = append(targets, target)
		}
	}
	if len(targets) == 0 {
		return RankConf{Outcome: RankUserMount, Reason: strings.Join(notes, "; ")}
	}

	settings, dropped, more, confNotes := resolveSettings(in, env)
	notes = append(notes, confNotes...)
	if len(dropped) > 0 {
		shown := dropped[:min(len(dropped), namesShown)]
		note := "not carried (a conf file line holds at most 1023 characters, no newline, after a plain variable name): " + strings.Join(shown, ", ")
		if n := len(dropped) - len(shown); n > 0 {
			note += fmt.Sprintf(" and %d more", n)
		}
		notes = append(notes, note)
		dropped = shown
	}
	if more > 0 {
		notes = append(notes, fmt.Sprintf("%d more NCCL settings beyond the file's %d-byte bound not carried", more, RankConfMaxBytes))
	}
	if len(settings) == 0 {
		return RankConf{Outcome: RankNothing, Dropped: dropped, Reason: strings.Join(append([]string{"the main process resolves no NCCL setting"}, notes...), "; ")}
	}
	content := rankConfText(settings, commentsRead(in))
	reason := fmt.Sprintf("%d NCCL settings of the main process written to %s for processes started without its environment", len(settings), strings.Join(targets, " and "))
	if len(notes) > 0 {
		reason += "; " + strings.Join(notes, "; ")
	}
	return RankConf{Outcome: RankWritten, Targets: targets, Content: content, Settings: settings, Dropped: dropped, Reason: reason, Warn: warn}
}

// commentsRead tells whether every library that reads the file skips its
// '#' lines: NCCL from 2.26.2 (an older one turns a "#...=..." line into a
// variable); RCCL's older releases skip none, so not for RCCL containers.
func commentsRead(in RankInput) bool {
	return in.NCCL.Has(FeatureCommentLines) && !in.RCCL
}

// rankConfText is the file: a header where comment lines are skipped, then
// one NAME=value line per setting, by name.
func rankConfText(settings map[string]string, comments bool) string {
	names := make([]string, 0, len(settings))
	for n := range settings {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	if comments {
		b.WriteString("# Written by the ibkube node agent: the NCCL settings this container's main\n")
		b.WriteString("# process resolves from its environment and NCCL_CONF_FILE, for processes\n")
		b.WriteString("# started without that environment (MPI ranks over SSH). /etc/nccl.conf is\n")
		b.WriteString("# read after this file, as for the main process.\n")
	}
	for _, n := range names {
		b.WriteString(n + "=" + settings[n] + "\n")
	}
	return b.String()
}

// resolveSettings is what the main process resolves before /etc/nccl.conf:
// its NCCL_* environment, then the profile's conf file when NCCL_CONF_FILE
// names it; within RankConfMaxBytes, by name. dropped names what a conf
// file cannot carry; more counts what the bound left out.
func resolveSettings(in RankInput, env map[string]string) (settings map[string]string, dropped []string, more int, notes []string) {
	var all []setting
	annotations, plan := in.PodAnnotations, in.NCCL
	taken := map[string]bool{contract.EnvNCCLConfFile: true}
	for name := range env {
		taken[name] = true
	}
	for name, value := range env {
		if strings.HasPrefix(name, "NCCL_") && name != contract.EnvNCCLConfFile {
			all = append(all, setting{name, value, "environment"})
		}
	}
	switch conf := env[contract.EnvNCCLConfFile]; conf {
	case "":
		// NCCL then reads <home>/.nccl.conf, which is the very file
		// written here; an image's own file at that path is shadowed.
		notes = append(notes, "NCCL_CONF_FILE is unset, so the main process reads this file too")
	case contract.NCCLConfFile:
		if plan.Lacks(FeatureConfFile) {
			notes = append(notes, fmt.Sprintf("%s ignores NCCL_CONF_FILE (read from %s), so the main process reads this file, which carries the profile's settings", plan, since(LibNCCL, FeatureConfFile)))
		}
		for _, p := range ParseNCCLConf(annotations[contract.AnnotationNCCLConf]) {
			if taken[p[0]] {
				continue
			}
			taken[p[0]] = true
			all = append(all, setting{p[0], p[1], "profile conf file"})
		}
	default:
		notes = append(notes, fmt.Sprintf("NCCL_CONF_FILE=%s is the container's own file, which the agent cannot read: processes started without the environment get its values only if they set NCCL_CONF_FILE themselves", shown(conf)))
	}
	if image, note := imageHomeSettings(in, env, taken); note != "" {
		all = append(all, image...)
		notes = append(notes, note)
	}
	settings, dropped, more = boundSettings(all)
	return settings, dropped, more, notes
}

// boundSettings keeps, by name, the settings a conf file line can carry
// within RankConfMaxBytes: dropped names the others, more counts what the
// bound left out.
func boundSettings(all []setting) (settings map[string]string, dropped []string, more int) {
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	settings = map[string]string{}
	size := 0
	for _, s := range all {
		if !plainName(s.name) || strings.ContainsAny(s.value, "\n\x00") || len(s.name) > ncclConfLineMax || len(s.value) > ncclConfLineMax {
			dropped = append(dropped, shown(s.name)+" ("+s.from+")")
			continue
		}
		line := len(s.name) + len(s.value) + 2
		if size+line > RankConfMaxBytes {
			more++
			continue
		}
		size += line
		settings[s.name] = s.value
	}
	return settings, dropped, more
}

// setting is one NAME=value of the file and where it came from.
type setting struct{ name, value, from string }

// imageHomeSettings are the lines of the image's own ~/.nccl.conf, hidden
// by the mount, that the main process read there: where NCCL_CONF_FILE is
// unset, or ignored by an NCCL older than 2.23.4. They go below the rest
// (taken), first one of a name winning, as NCCL's setenv(..., 0) applies
// them; note says how many, "" when none apply.
func imageHomeSettings(in RankInput, env map[string]string, taken map[string]bool) ([]setting, string) {
	if in.ImageHomeConf == "" || env[contract.EnvNCCLConfFile] != "" && !in.NCCL.Lacks(FeatureConfFile) {
		return nil, ""
	}
	var out []setting
	for _, p := range ParseNCCLConf(in.ImageHomeConf) {
		if !taken[p[0]] {
			taken[p[0]] = true
			out = append(out, setting{p[0], p[1], "image's ~/.nccl.conf"})
		}
	}
	return out, fmt.Sprintf("%d settings of the image's own ~/.nccl.conf, which the mount hides, carried below the others", len(out))
}

// plainName tells whether name is a variable name a conf file line can
// carry as itself: letters, digits and '_'. Anything else (a newline in a
// name, which would start a line of its own, an '=' or a '#') is dropped.
func plainName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r == '_' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// shown quotes a name or value for a reason, cut to 64 bytes, so that a
// hostile one neither breaks a log line nor grows an Event.
func shown(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	if plainName(s) || strings.HasPrefix(s, "/") && strconv.Quote(s) == `"`+s+`"` {
		return s
	}
	return strconv.Quote(s)
}

// homeDirs returns the directories the file goes to: the home the image's
// passwd gives the uid (where a rank started by sshd looks, on every NCCL
// version), and HOME when it is another absolute directory (NCCL >= 2.30.3
// in a process that keeps the container's HOME). With no directory it
// returns the outcome and why. notes name a directory left out; info says
// where the directories come from when the passwd was not read.
func homeDirs(uid *uint32, pw Passwd, envHome string) (homes, notes []string, info string, outcome RankOutcome, why string) {
	add := func(h, from string) {
		if h == "" || slices.Contains(homes, h) {
			return
		}
		if err := checkHome(h); err != nil {
			notes = append(notes, fmt.Sprintf("%s %s is not where the file can go (%v)", from, shown(h), err))
			return
		}
		homes = append(homes, h)
	}
	spec := func() {
		if path.IsAbs(envHome) {
			add(path.Clean(envHome), "HOME")
		}
	}
	switch {
	case uid == nil:
		spec()
		if len(homes) == 0 {
			homes = []string{RootHome}
		}
		return homes, notes, "the runtime does not say the container's uid; using HOME, else " + RootHome, RankWritten, ""
	case pw.Status == PasswdNoEntry:
		return nil, nil, "", RankNoPasswd, fmt.Sprintf("uid %d has no entry in the image's /etc/passwd: sshd refuses a session for a user without one (and runc gives it HOME=/), so MPI ranks launched over ssh cannot run as it; add the user to the image (useradd -m -u %d NAME) or run the container as a uid the image defines", *uid, *uid)
	case pw.Status == PasswdFound:
		add(pw.Home, fmt.Sprintf("the home of uid %d in the image's /etc/passwd", *uid))
		spec()
		if len(homes) == 0 {
			return nil, nil, "", RankNoHome, strings.Join(append(notes, "no NCCL conf file mounted for processes started without the container's environment"), "; ")
		}
		return homes, notes, "", RankWritten, ""
	}
	// The image's passwd is unknown: root's home is /root in the images
	// NCCL runs in; for another uid only HOME says anything.
	unread := "the image's /etc/passwd was not read"
	if pw.Why != "" {
		unread += " (" + pw.Why + ")"
	}
	if *uid == 0 {
		add(RootHome, "root's home")
	}
	spec()
	if len(homes) == 0 {
		return nil, nil, "", RankNoHome, fmt.Sprintf("container runs as uid %d without HOME in its environment and %s, so ibkube cannot tell where NCCL looks for ~/%s; set env HOME to the user's home directory, or pass NCCL_CONF_FILE to the processes you start (mpirun -x NCCL_CONF_FILE -x NCCL_IB_HCA -x NCCL_TOPO_FILE)", *uid, unread, RankConfName)
	}
	return homes, notes, unread + "; using " + strings.Join(homes, " and "), RankWritten, ""
}

// checkHome accepts a directory the file can be mounted in: a clean
// absolute path, not too long, of printable characters, outside the
// kernel's /proc, /sys and /dev.
func checkHome(h string) error {
	switch {
	case !path.IsAbs(h):
		return errors.New("not an absolute path")
	case path.Clean(h) != h:
		return errors.New("not a clean path")
	case len(h)+len(RankConfName)+1 > pathMax:
		return fmt.Errorf("longer than %d bytes", pathMax)
	case strings.IndexFunc(h, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return errors.New("holds a control character")
	}
	for _, k := range []string{"/proc", "/sys", "/dev"} {
		if h == k || strings.HasPrefix(h, k+"/") {
			return fmt.Errorf("under %s", k)
		}
	}
	return nil
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
