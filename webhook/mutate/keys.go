package mutate

import "strings"

// Prefix is the prefix of every ibkube annotation and label.
const Prefix = "infiniband.azure.com/"

// Keys users write.
const (
	// LabelInject on a namespace opts its pods in (value InjectEnabled).
	LabelInject   = Prefix + "inject"
	InjectEnabled = "enabled"

	AnnotationMode       = Prefix + "mode"
	AnnotationHCAs       = Prefix + "hcas"
	AnnotationContainers = Prefix + "containers"
	AnnotationProfile    = Prefix + "profile"
	// AnnotationSocketFallback says whether NCCL may fall back to TCP
	// sockets when RDMA is unusable (SocketFallbackAllow, the default) or
	// must fail instead (SocketFallbackDeny). Also a namespace default.
	AnnotationSocketFallback = Prefix + "socket-fallback"
	SocketFallbackAllow      = "allow"
	SocketFallbackDeny       = "deny"
	// AnnotationIdleWarning set to "false" stops the node agent warning that
	// the pod's RDMA devices sit idle (pods that hold HCAs but legitimately
	// never communicate over them). The webhook only checks its value.
	AnnotationIdleWarning = Prefix + "rdma-idle-warning"
)

// Keys ibkube writes (accepted on re-admission; a user may also preset them).
const (
	// AnnotationInjected summarises what was injected.
	AnnotationInjected = Prefix + "injected"
	// AnnotationMemlock is the RLIMIT_MEMLOCK the node agent's NRI plugin sets.
	AnnotationMemlock = Prefix + "memlock"
	// AnnotationNCCLConf carries the NCCL conf file text that a downwardAPI
	// volume projects to NCCLConfFile.
	AnnotationNCCLConf = Prefix + "nccl-conf"
)

// Pod Security label the capability policy reads.
const LabelPodSecurityEnforce = "pod-security.kubernetes.io/enforce"

// Where the NCCL conf file appears in selected containers.
const (
	NCCLConfVolume   = "ibkube-nccl-conf"
	NCCLConfDir      = "/etc/ibkube/nccl"
	NCCLConfFileName = "nccl.conf"
	NCCLConfFile     = NCCLConfDir + "/" + NCCLConfFileName
	// EnvNCCLConfFile is the variable NCCL reads its conf file path from
	// (NVIDIA/nccl src/misc/param.cc initEnvFunc).
	EnvNCCLConfFile = "NCCL_CONF_FILE"
)

// Modes.
const (
	ModeShared    = "rdma-shared"
	ModeExclusive = "rdma-exclusive"
	ModeIPoIB     = "ipoib"
	ModeNone      = "none"
)

const acceptedModes = "rdma-shared, rdma-exclusive, ipoib, rdma-shared,ipoib, rdma-exclusive,ipoib, none"

// userKeys and ownKeys are the suffixes accepted under Prefix on a pod.
var (
	userKeys = []string{"mode", "hcas", "containers", "profile", "socket-fallback", "rdma-idle-warning"}
	ownKeys  = []string{"injected", "memlock", "nccl-conf"}
)

func knownKey(suffix string) bool {
	for _, k := range userKeys {
		if k == suffix {
			return true
		}
	}
	for _, k := range ownKeys {
		if k == suffix {
			return true
		}
	}
	return false
}

func acceptedKeys() string {
	return strings.Join(userKeys, ", ") + " (and " + strings.Join(ownKeys, ", ") + ", written by ibkube)"
}
