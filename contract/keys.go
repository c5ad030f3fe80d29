package contract

import (
	"slices"
	"strings"
)

// Prefix is the prefix of every ibkube annotation and label.
const Prefix = "infiniband.azure.com/"

// Keys users write on pods and namespaces.
const (
	// LabelInject on a namespace opts its pods in (value InjectEnabled).
	LabelInject   = Prefix + "inject"
	InjectEnabled = "enabled"

	// AnnotationMode is the pod's mode (see ParseMode); on a namespace, the
	// default mode of its GPU pods.
	AnnotationMode = Prefix + "mode"
	// AnnotationHCAs is the rdma-exclusive count per selected container.
	AnnotationHCAs = Prefix + "hcas"
	// AnnotationContainers names the containers that get RDMA.
	AnnotationContainers = Prefix + "containers"
	// AnnotationProfile names the NCCL profile; also a namespace default.
	AnnotationProfile = Prefix + "profile"
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

// Keys ibkube writes on pods (accepted on re-admission; a user may also
// preset them).
const (
	// AnnotationInjected summarises what the webhook injected.
	AnnotationInjected = Prefix + "injected"
	// AnnotationMemlock is the RLIMIT_MEMLOCK the node agent's NRI plugin
	// sets: "unlimited" or a quantity such as 64Gi.
	AnnotationMemlock = Prefix + "memlock"
	// AnnotationNCCLConf carries the NCCL conf file text that a downwardAPI
	// volume projects to NCCLConfFile; the node agent copies it into each
	// RDMA container's per-rank conf.
	AnnotationNCCLConf = Prefix + "nccl-conf"
)

// userKeys and ownKeys are the suffixes accepted under Prefix on a pod.
var (
	userKeys = []string{"mode", "hcas", "containers", "profile", "socket-fallback", "rdma-idle-warning", "placement"}
	ownKeys  = []string{"injected", "memlock", "nccl-conf"}
)

// KnownKey reports whether suffix (the part of a key after Prefix) is an
// ibkube pod annotation.
func KnownKey(suffix string) bool {
	return slices.Contains(userKeys, suffix) || slices.Contains(ownKeys, suffix)
}

// AcceptedKeys lists the accepted suffixes for an error message.
func AcceptedKeys() string {
	return strings.Join(userKeys, ", ") + " (and " + strings.Join(ownKeys, ", ") + ", written by ibkube)"
}
