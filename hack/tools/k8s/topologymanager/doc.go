// Package topologymanager measures what the kubelet's Topology Manager
// (k8s.io/kubernetes pkg/kubelet/cm/topologymanager, the version this
// helper module pins) gives ibkube's device-plugin mode on the fixtures'
// layouts: for each policy and scope, whether a pod asking n GPUs and
// their HCAs is admitted and on which NUMA nodes its devices land. Its
// only code is a test (go test -vet=off ./topologymanager/ in hack/tools/k8s:
// vet would analyse the ~1,200 kubelet and scheduler packages it imports); its
// input is node/deviceplugin's kubelet view of each fixture, its output
// testdata/figures.txt, and docs/node-agent.md ("GPU and HCA alignment")
// reads the figures.
package topologymanager
