package handler

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// modeNone labels requests that never reached the core or were not injected.
const modeNone = contract.ModeNone

// modeLabel is the metric label for a request the core saw. A refused pod's
// annotation is user input, so it labels by the parsed mode, never by the
// text: the label takes one of the five canonical modes or "invalid".
func modeLabel(res mutate.Result, pod *corev1.Pod) string {
	if res.Injected {
		return res.Mode.String()
	}
	if v, ok := pod.Annotations[contract.AnnotationMode]; ok {
		m, err := contract.ParseMode(v)
		if err != nil {
			return "invalid"
		}
		return m.String()
	}
	return modeNone
}

// checkNetworks returns a refusal message when the pod's mode needs the IPoIB
// network and its NetworkAttachmentDefinition does not exist, or when the
// cluster does not serve NetworkAttachmentDefinitions at all. A pod admitted in
// either case would hang in ContainerCreating with a Multus error.
func (h *Handler) checkNetworks(ctx context.Context, pod *corev1.Pod, res mutate.Result, cfg *config.Config) (string, error) {
	if !res.Mode.IPoIB {
		return "", nil
	}
	ns, name := cfg.IPoIBNamespaceFor(pod.Namespace), cfg.IPoIB.Name
	ok, err := h.opts.Networks.NetworkExists(ctx, ns, name)
	switch {
	case errors.Is(err, ErrNetworkAPIMissing):
		return fmt.Sprintf(contract.AnnotationMode+" %q needs the Multus network %s/%s, but this cluster does not serve "+
			"NetworkAttachmentDefinitions (k8s.cni.cncf.io/v1): the Multus/NAD CRD is missing. Install Multus "+
			"(which brings the network-attachment-definitions.k8s.cni.cncf.io CRD), then create the network "+
			"(helm upgrade <release> ibkube --namespace %s --reuse-values --set networks.ipoib.enabled=true), "+
			"or choose a mode without ipoib", res.Mode.String(), ns, name, releaseOr(cfg, ns)), nil
	case err != nil:
		return "", fmt.Errorf("check IPoIB network: %w", err)
	case !ok:
		return fmt.Sprintf(contract.AnnotationMode+" %q needs the Multus network %s/%s, but NetworkAttachmentDefinition "+
			"%s/%s does not exist, so the pod would hang in ContainerCreating. Create it: "+
			"helm upgrade <release> ibkube --namespace %s --reuse-values --set networks.ipoib.enabled=true, "+
			"or kubectl apply -n %s -f a NetworkAttachmentDefinition named %s (see the ibkube networks docs); "+
			"or choose a mode without ipoib", res.Mode.String(), ns, name, ns, name, releaseOr(cfg, ns), ns, name), nil
	}
	return "", nil
}

func releaseOr(cfg *config.Config, ns string) string {
	if cfg.ReleaseNamespace != "" {
		return cfg.ReleaseNamespace
	}
	return ns
}
