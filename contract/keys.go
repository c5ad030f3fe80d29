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

// UserKeys are the suffixes under Prefix a user writes on a pod, in the
// order messages list them. A new pod annotation is a constant above and an
// entry here (or in OwnKeys); the webhook, the admission policy and their
// tests read the list from here.
func UserKeys() []string {
	return suffixes(AnnotationMode, AnnotationHCAs, AnnotationContainers, AnnotationProfile, AnnotationSocketFallback, AnnotationIdleWarning, AnnotationPlacement)
}

// OwnKeys are the suffixes under Prefix ibkube writes on a pod (accepted on
// re-admission).
func OwnKeys() []string {
	return suffixes(AnnotationInjected, AnnotationMemlock, AnnotationNCCLConf)
}

// KnownKeys are UserKeys then OwnKeys: every suffix accepted under Prefix
// on a pod.
func KnownKeys() []string { return append(UserKeys(), OwnKeys()...) }

func suffixes(keys ...string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = strings.TrimPrefix(k, Prefix)
	}
	return out
}

// KnownKey reports whether suffix (the part of a key after Prefix) is an
// ibkube pod annotation.
func KnownKey(suffix string) bool {
	return slices.Contains(KnownKeys(), suffix)
}

// AcceptedKeys lists the accepted suffixes for an error message.
func AcceptedKeys() string {
	return strings.Join(UserKeys(), ", ") + " (and " + strings.Join(OwnKeys(), ", ") + ", written by ibkube)"
}

// Enum is a pod annotation whose value is one of a few words: the values
// it accepts and the "accepted: ..." text a refusal ends with. The
// webhook's checks and the admission policies' CEL both read them from
// Enums, so neither can drift from the other.
type Enum struct {
	Key      string
	Values   []string
	Accepted string
}

// Enums are the enum-valued pod annotations.
func Enums() []Enum {
	return []Enum{
		{AnnotationSocketFallback, []string{SocketFallbackAllow, SocketFallbackDeny},
			SocketFallbackAllow + " (NCCL may fall back to TCP sockets, NCCL's default) or " + SocketFallbackDeny + " (NCCL fails instead)"},
		{AnnotationIdleWarning, []string{"true", "false"}, "true, false"},
		{AnnotationPlacement, []string{PlacementPartition, PlacementAny},
			PlacementPartition + " (the job's pods on one InfiniBand partition, the default), " + PlacementAny + " (anywhere)"},
	}
}

// EnumOf is key's entry in Enums; ok is false for a key that is no enum.
func EnumOf(key string) (e Enum, ok bool) {
	for _, e := range Enums() {
		if e.Key == key {
			return e, true
		}
	}
	return Enum{}, false
}
