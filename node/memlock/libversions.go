package memlock

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Version is a library release: major.minor.patch.
type Version struct{ Major, Minor, Patch int }

// ParseVersion reads the leading "X.Y.Z" of a version as packages and
// headers write it ("2.21.5", "2.21.5-1+cuda12.4", "2.20.5.60200-66");
// a missing patch reads as 0.
func ParseVersion(s string) (Version, error) {
	end := strings.IndexFunc(s, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
	if end >= 0 {
		s = s[:end]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return Version{}, fmt.Errorf("version %q: want major.minor[.patch]", s)
	}
	var n [3]int
	for i := 0; i < 3 && i < len(parts); i++ {
		v, err := strconv.Atoi(parts[i])
		if err != nil || v < 0 {
			return Version{}, fmt.Errorf("version %q: want major.minor[.patch] of decimal numbers", s)
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

// AtLeast tells whether v is o or later.
func (v Version) AtLeast(o Version) bool {
	if v.Major != o.Major {
		return v.Major > o.Major
	}
	if v.Minor != o.Minor {
		return v.Minor > o.Minor
	}
	return v.Patch >= o.Patch
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// Libraries whose release changes what the agent sets.
const (
	LibNCCL = "NCCL"
	LibUCX  = "UCX"
)

// Feature is a behaviour a library gained at a release.
type Feature string

// Features the agent's choices depend on.
const (
	// FeatureDMABUF: GPUDirect RDMA through DMA-BUF, on by default.
	FeatureDMABUF Feature = "dmabuf"
	// FeatureAutoGID: the library picks the RoCE v2 IPv4 GID of each port
	// itself, and a set index disables the user's other GID selectors.
	FeatureAutoGID Feature = "auto-gid"
	// FeatureConfFile: NCCL_CONF_FILE names the first conf file; before it
	// only <home>/.nccl.conf is read there.
	FeatureConfFile Feature = "conf-file"
	// FeatureCommentLines: lines starting with '#' are skipped; before it a
	// "#...=..." line sets a variable named "#...".
	FeatureCommentLines Feature = "comment-lines"
	// FeatureHomeFromEnv: <home> is $HOME, no longer getpwuid's pw_dir.
	FeatureHomeFromEnv Feature = "home-from-env"
)

// Rule is one release that changed what to set: the one place the minimum
// versions are stated (docs/node-agent.md's table is tested against it).
type Rule struct {
	Library string
	Feature Feature
	Since   Version
	What    string
	Source  string
}

// Rules returns the releases that change what the agent sets, a fresh
// copy each call.
func Rules() []Rule {
	return []Rule{
		{LibNCCL, FeatureDMABUF, Version{2, 13, 4}, "GPUDirect RDMA through DMA-BUF on by default (NCCL_DMABUF_ENABLE=1); needs CUDA driver >= 11.7, rdma-core >= 34, Linux >= 5.12 and NVIDIA's open kernel modules",
			"NVIDIA/nccl v2.13.4-1 src/init.cc"},
		{LibNCCL, FeatureAutoGID, Version{2, 21, 5}, "NCCL_IB_GID_INDEX defaults to -1: NCCL picks per port the first GID of NCCL_IB_ADDR_FAMILY in NCCL_IB_ADDR_RANGE with NCCL_IB_ROCE_VERSION_NUM; a set index disables those three (before: index 0, RoCE v1 link-local)",
			"NVIDIA/nccl v2.21.5-1 src/transport/net_ib.cc (v2.20.5-1: IB_GID_INDEX default 0)"},
		{LibNCCL, FeatureConfFile, Version{2, 23, 4}, "NCCL_CONF_FILE names the first conf file (before: only ~/.nccl.conf, then /etc/nccl.conf)",
			"NVIDIA/nccl v2.23.4-1 src/misc/param.cc (v2.22.3-1 has no NCCL_CONF_FILE)"},
		{LibNCCL, FeatureCommentLines, Version{2, 26, 2}, "conf file lines starting with '#' are skipped (before: a '#...=...' line sets a variable named '#...')",
			"NVIDIA/nccl v2.26.2-1 src/misc/param.cc (v2.25.1-1 skips none)"},
		{LibNCCL, FeatureHomeFromEnv, Version{2, 30, 3}, "the home of ~/.nccl.conf is $HOME (before: getpwuid(getuid())->pw_dir)",
			"NVIDIA/nccl v2.30.3-1 src/misc/param.cc (v2.29.7-1: getpwuid)"},
		{LibUCX, FeatureAutoGID, Version{1, 6, 0}, "UCX_IB_GID_INDEX defaults to auto (RoCE v2 IPv4 first); a set index also applies to InfiniBand ports, and with UCX_IB_ROCE_SUBNETS it is an error (\"both GID_INDEX and ROCE_SUBNET_LIST are specified\")",
			"openucx/ucx src/uct/ib/base/ib_iface.c uct_ib_iface_init_roce_gid_info"},
	}
}

// since is the release of lib that gained f.
func since(lib string, f Feature) Version {
	for _, r := range Rules() {
		if r.Library == lib && r.Feature == f {
			return r.Since
		}
	}
	panic(fmt.Sprintf("no rule for %s %s", lib, f))
}

// NCCLFound is a version of NCCL found in a container's image, and where.
type NCCLFound struct {
	Version Version
	From    string
}

// NCCLPlan is what the agent may rely on of the NCCL a container loads.
// An image may hold several (a system libnccl and a Python wheel's): a
// feature counts only when every one found has it, and with none found the
// plan is the safe one for current releases.
type NCCLPlan struct {
	Found []NCCLFound
}

// Known tells whether any NCCL version was found.
func (p NCCLPlan) Known() bool { return len(p.Found) > 0 }

// Has tells whether every NCCL found has f; false when none was found.
func (p NCCLPlan) Has(f Feature) bool {
	return p.Known() && !slices.ContainsFunc(p.Found, func(n NCCLFound) bool { return !n.Version.AtLeast(since(LibNCCL, f)) })
}

// Lacks tells whether some NCCL found lacks f; false when none was found.
func (p NCCLPlan) Lacks(f Feature) bool {
	return slices.ContainsFunc(p.Found, func(n NCCLFound) bool { return !n.Version.AtLeast(since(LibNCCL, f)) })
}

// String names the versions found, for reasons and Events.
func (p NCCLPlan) String() string {
	if !p.Known() {
		return "NCCL version unknown"
	}
	var parts []string
	for _, n := range p.Found {
		parts = append(parts, "NCCL "+n.Version.String()+" ("+n.From+")")
	}
	return strings.Join(parts, ", ")
}

// GIDSelectors are the variables with which a user chooses NCCL's RoCE GID
// (NVIDIA/nccl v2.21.5-1 src/transport/net_ib.cc): a set NCCL_IB_GID_INDEX
// disables the other three, so the agent sets none where one is set.
func GIDSelectors() []string {
	return []string{"NCCL_IB_GID_INDEX", "NCCL_IB_ADDR_RANGE", "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ROCE_VERSION_NUM"}
}

// NeedsGIDIndex says whether the agent should set NCCL_IB_GID_INDEX for a
// container: only where an NCCL it may load does not choose the GID itself
// (before 2.21.5) and the user set none of the selectors (env holds
// "NAME=value" entries). why says which.
func (p NCCLPlan) NeedsGIDIndex(env []string) (need bool, why string) {
	m := envMap(env)
	for _, s := range GIDSelectors() {
		if _, set := m[s]; set {
			return false, s + " is set by the container: NCCL_IB_GID_INDEX would override the user's choice"
		}
	}
	auto := since(LibNCCL, FeatureAutoGID)
	switch {
	case !p.Known():
		return false, "the image's NCCL version is unknown; NCCL >= " + auto.String() + " picks the RoCE v2 IPv4 GID itself"
	case !p.Lacks(FeatureAutoGID):
		return false, p.String() + " picks the RoCE v2 IPv4 GID itself (from " + auto.String() + ")"
	}
	return true, p.String() + " uses GID 0 (RoCE v1, link-local) unless told (NCCL_IB_GID_INDEX defaults to -1 only from " + auto.String() + ")"
}
