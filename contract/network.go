package contract

// IPoIB network defaults: the NetworkAttachmentDefinition the chart creates
// and the webhook adds to ipoib pods.
const (
	// IPoIBNetwork is the NetworkAttachmentDefinition's name.
	IPoIBNetwork = "ibkube-ipoib"
	// IPoIBRange is the whereabouts range of its addresses, the AKS
	// InfiniBand guide's (docs/networks.md, "Address ranges").
	IPoIBRange = "192.168.0.0/16"
)

// IPoIBNamespace is the namespace of the IPoIB network a pod joins: the
// configured one, else the namespace ibkube runs in, else the pod's own.
func IPoIBNamespace(configured, release, pod string) string {
	switch {
	case configured != "":
		return configured
	case release != "":
		return release
	}
	return pod
}
