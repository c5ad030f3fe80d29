package handler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// modeNone labels requests that never reached the core or were not injected.
const modeNone = "none"

// knownModes bounds the "mode" metric label: a refused pod's annotation is user
// input and must not create label values at will.
var knownModes = map[string]bool{
	"rdma-shared": true, "rdma-exclusive": true, "ipoib": true,
	"rdma-shared,ipoib": true, "rdma-exclusive,ipoib": true, modeNone: true,
}

// modeLabel is the metric label for a request the core saw.
func modeLabel(res mutate.Result, pod *corev1.Pod) string {
	if res.Mode != "" {
		return res.Mode
	}
	if m, ok := pod.Annotations[mutate.AnnotationMode]; ok {
		if knownModes[m] {
			return m
		}
		return "invalid"
	}
	return modeNone
}

func needsIPoIB(mode string) bool {
	for m := range strings.SplitSeq(mode, ",") {
		if strings.TrimSpace(m) == "ipoib" {
			return true
		}
	}
	return false
}

// checkNetworks returns a refusal message when the pod's mode needs the IPoIB
// network and its NetworkAttachmentDefinition does not exist, or when the
// cluster does not serve NetworkAttachmentDefinitions at all. A pod admitted in
// either case would hang in ContainerCreating with a Multus error.
func (h *Handler) checkNetworks(ctx context.Context, pod *corev1.Pod, res mutate.Result, cfg *config.Config) (string, error) {
	if !needsIPoIB(res.Mode) {
		return "", nil
	}
	ns, name := cfg.IPoIBNamespace(), cfg.IPoIB.Name
	if ns == "" {
		ns = pod.Namespace
	}
	ok, err := h.opts.Networks.NetworkExists(ctx, ns, name)
	switch {
	case errors.Is(err, ErrNetworkAPIMissing):
		return fmt.Sprintf("infiniband.azure.com/mode %q needs the Multus network %s/%s, but this cluster does not serve "+
			"NetworkAttachmentDefinitions (k8s.cni.cncf.io/v1): the Multus/NAD CRD is missing. Install Multus "+
			"(which brings the network-attachment-definitions.k8s.cni.cncf.io CRD), then create the network "+
			"(helm upgrade <release> ibkube --namespace %s --reuse-values --set networks.ipoib.enabled=true), "+
			"or choose a mode without ipoib", res.Mode, ns, name, releaseOr(cfg, ns)), nil
	case err != nil:
		return "", fmt.Errorf("check IPoIB network: %w", err)
	case !ok:
		return fmt.Sprintf("infiniband.azure.com/mode %q needs the Multus network %s/%s, but NetworkAttachmentDefinition "+
			"%s/%s does not exist, so the pod would hang in ContainerCreating. Create it: "+
			"helm upgrade <release> ibkube --namespace %s --reuse-values --set networks.ipoib.enabled=true, "+
			"or kubectl apply -n %s -f a NetworkAttachmentDefinition named %s (see the ibkube networks docs); "+
			"or choose a mode without ipoib", res.Mode, ns, name, ns, name, releaseOr(cfg, ns), ns, name), nil
	}
	return "", nil
}

func releaseOr(cfg *config.Config, ns string) string {
	if cfg.ReleaseNamespace != "" {
		return cfg.ReleaseNamespace
	}
	return ns
}
