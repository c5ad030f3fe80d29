package inject

import (
	"fmt"
	"sort"
	"strings"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/nccl"
)

// forwardedNodeFacts are the variables that, forwarded from an MPI launcher
// with `mpirun -x`, reach every rank's environment and so outrank what each
// worker resolves for itself: the launcher's own node facts (HCAs, UCX
// devices, topology file), and NCCL_CONF_FILE, whose presence makes NCCL
// skip ~/.nccl.conf (NVIDIA/nccl src/misc/param.cc initEnvFunc), the file
// through which the node agent gives ranks started over SSH their worker's
// node facts.
var forwardedNodeFacts = map[string]string{
	"NCCL_CONF_FILE":  "NCCL then skips ~/.nccl.conf, where the node agent gives ranks started over SSH their worker's HCAs and topology file",
	"NCCL_IB_HCA":     "every rank gets the launcher's HCA list instead of its own worker's",
	"UCX_NET_DEVICES": "every rank gets the launcher's devices instead of its own worker's",
	"NCCL_TOPO_FILE":  "every rank gets the launcher's topology file instead of its own worker's",
}

// mpiForwardWarnings warns about a Kubeflow MPIJob whose launcher forwards
// node facts to the ranks with `mpirun -x NAME` (in command or args, also
// inside a shell string) or OMPI_MCA_mca_base_env_list.
func mpiForwardWarnings(root map[string]any) []string {
	if kind, _ := root["kind"].(string); kind != "MPIJob" {
		return nil
	}
	containers, _ := nested(root, "spec", "mpiReplicaSpecs", "Launcher", "template", "spec", "containers").([]any)
	found := map[string]bool{}
	for _, c := range containers {
		cm, _ := c.(map[string]any)
		var words []string
		for _, key := range []string{"command", "args"} {
			list, _ := cm[key].([]any)
			for _, s := range list {
				str, _ := s.(string)
				words = append(words, strings.Fields(str)...)
			}
		}
		for i := 0; i+1 < len(words); i++ {
			if words[i] == "-x" || words[i] == "--x" {
				name, _, _ := strings.Cut(words[i+1], "=")
				found[name] = true
			}
		}
		env, _ := cm["env"].([]any)
		for _, e := range env {
			em, _ := e.(map[string]any)
			if em["name"] != "OMPI_MCA_mca_base_env_list" {
				continue
			}
			v, _ := em["value"].(string)
			for _, item := range strings.Split(v, ";") {
				name, _, _ := strings.Cut(strings.TrimSpace(item), "=")
				found[name] = true
			}
		}
	}
	var out []string
	for name := range found {
		if why, ok := forwardedNodeFacts[name]; ok {
			out = append(out, fmt.Sprintf("the MPI launcher forwards %s to the ranks (mpirun -x or OMPI_MCA_mca_base_env_list): %s; drop it, ranks started over SSH read their worker's NCCL settings without forwarding (docs/node-agent.md, MPI ranks)", name, why))
		}
	}
	sort.Strings(out)
	return out
}

// roceGIDWarning says when an injected pod template runs over RoCE (its
// profile asks the RoCE pool) with no NCCL_IB_GID_INDEX of its own: NCCL
// finds the entry itself from 2.21.5 on (NVIDIA/nccl v2.21.5-1
// src/transport/net_ib.cc, IB_GID_INDEX default -1); for an image whose
// NCCL is older the node agent sets the entry of the pod's own address when
// every port has one, else the pod gets an Event; an older NCCL left alone
// uses GID 0, RoCE v1 link-local, which does not route on RoCEv2.
func roceGIDWarning(tmpl map[string]any, profile func(string) (nccl.Profile, bool)) string {
	injected, _ := nested(tmpl, "metadata", "annotations", contract.AnnotationInjected).(string)
	var name string
	for _, part := range strings.Split(injected, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "profile="); ok {
			name = v
		}
	}
	p, ok := profile(name)
	if !ok || p.ExclusiveResource != contract.ResourceRoCE {
		return ""
	}
	containers, _ := nested(tmpl, "spec", "containers").([]any)
	for _, c := range containers {
		cm, _ := c.(map[string]any)
		env, _ := cm["env"].([]any)
		for _, e := range env {
			if em, _ := e.(map[string]any); em["name"] == "NCCL_IB_GID_INDEX" {
				return ""
			}
		}
	}
	return fmt.Sprintf("profile %s runs over RoCE and leaves NCCL_IB_GID_INDEX to NCCL, which picks the RoCE v2 IPv4 GID itself from 2.21.5; for an image with an older NCCL the node agent sets the entry of the pod's own address when every port it holds has one, else the pod gets a RoCEGIDIndexNotSet Event (an older NCCL left alone uses GID 0, RoCE v1 link-local, which does not route on RoCEv2)", name)
}
