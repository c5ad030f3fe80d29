package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/node/agent"
	"github.com/ibkube/ibkube/node/dra"
	"github.com/ibkube/ibkube/node/resource"
)

// draOptions choose how the kubelet gets the pools: device plugins or the
// DRA driver (docs/dra-driver.md).
type draOptions struct {
	allocation  string
	cdiDir      string
	pluginDir   string
	registryDir string
	podUID      string
	kubeconfig  string
}

func addDRAFlags(fs *flag.FlagSet, o *draOptions, getenv func(string) string) {
	fs.StringVar(&o.allocation, "allocation", contract.AllocationDevicePlugin, "how the kubelet gets the HCAs: "+contract.AllocationDevicePlugin+" (kubelet device plugins) or "+contract.AllocationDRA+" (a DRA driver publishing ResourceSlices; Kubernetes "+dra.MinKubernetes+"+); never both on one node")
	fs.StringVar(&o.cdiDir, "cdi-dir", dra.DefaultCDIDir, "with --allocation=dra: where prepared claims' CDI specs are written; the container runtime must read CDI specs there")
	fs.StringVar(&o.pluginDir, "kubelet-plugin-dir", kubeletplugin.KubeletPluginsDir+"/"+contract.DRADriverName, "with --allocation=dra: the DRA driver's socket directory under the kubelet's plugins directory")
	fs.StringVar(&o.registryDir, "kubelet-registry-dir", kubeletplugin.KubeletRegistryDir, "with --allocation=dra: the kubelet's plugin registration directory")
	fs.StringVar(&o.podUID, "pod-uid", getenv("POD_UID"), "with --allocation=dra: this agent pod's UID (default $POD_UID, from the downward API); set, two agent pods can serve a node during a rolling update")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "with --allocation=dra: kubeconfig file for the API server (default: in-cluster)")
}

func (o draOptions) validate() error {
	switch o.allocation {
	case contract.AllocationDevicePlugin, contract.AllocationDRA:
		return nil
	}
	return fmt.Errorf("--allocation %q: want %s or %s", o.allocation, contract.AllocationDevicePlugin, contract.AllocationDRA)
}

// addDRAServer makes the DRA driver the agent's kubelet server when
// --allocation=dra, after checking that the API server keeps the fields DRA
// mode relies on; the device plugin servers then do not start.
// cluster is the in-cluster API connection (nil outside a cluster);
// --kubeconfig names another.
func addDRAServer(ctx context.Context, a *agent.Agent, opts options, cluster *api, log logr.Logger) error {
	if opts.dra.allocation != contract.AllocationDRA {
		return nil
	}
	log = log.WithName("dra")
	cs, rc, err := draClient(opts.dra.kubeconfig, cluster)
	if err != nil {
		return err
	}
	claims, err := reconcileClient(rc)
	if err != nil {
		return err
	}
	if err := dra.CheckGates(ctx, cs.ResourceV1().DeviceClasses(), cs.ResourceV1().ResourceSlices(), opts.nodeName, hasShared(a.Model())); err != nil {
		return err
	}
	sysfs := opts.sysfsRoot
	cfg := dra.Config{
		NodeName: opts.nodeName,
		CDIDir:   opts.dra.cdiDir,
		PCIeRoot: func(addr string) (string, error) { return dra.PCIeRoot(sysfs, addr) },
		NUMANode: func(addr string) (int, error) { return dra.NUMANode(sysfs, addr) },
		Slices:   cs.ResourceV1().ResourceSlices(),
		Metrics:  a.Registry(),
		Claims:   claims.ResourceV1(),
		Plugin:   dra.PluginOptions{Client: cs, PodUID: opts.dra.podUID, PluginDir: opts.dra.pluginDir, RegistryDir: opts.dra.registryDir},
	}
	if cluster != nil {
		cfg.Events = recorderSink{rec: cluster.recorder, node: opts.nodeName}
		cfg.PodEvents = podEventSink{rec: cluster.recorder}
	}
	d, err := dra.New(cfg, log)
	if err != nil {
		return err
	}
	a.Serve(d)
	return nil
}

// podEventSink sends the DRA driver's pod Events through the agent's
// recorder (one broadcaster: client-go aggregates repeats and limits each
// pod's rate).
type podEventSink struct{ rec record.EventRecorder }

func (s podEventSink) PodEvent(pod dra.PodRef, eventType, reason, message string) {
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
	s.rec.Event(ref, eventType, reason, message)
}

func hasShared(m *resource.Model) bool {
	for _, p := range m.Pools {
		if !p.Exclusive() {
			return true
		}
	}
	return false
}

func draClient(kubeconfig string, cluster *api) (kubernetes.Interface, *rest.Config, error) {
	if kubeconfig == "" {
		if cluster == nil {
			return nil, nil, fmt.Errorf("--allocation=%s needs the API server: not in a cluster (outside a pod, pass --kubeconfig)", contract.AllocationDRA)
		}
		return cluster.cs, cluster.config, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, nil, fmt.Errorf("API client from --kubeconfig %s: %w", kubeconfig, err)
	}
	return cs, c, nil
}

// reconcileClient is the stale-spec reconcile's own client: without a
// client-side rate limit, since the driver paces its reads itself
// (dra.DefaultReconcileQPS), and sharing no token bucket with the client
// of Prepare, the slices and the Events.
func reconcileClient(c *rest.Config) (kubernetes.Interface, error) {
	if c == nil {
		return nil, fmt.Errorf("--allocation=%s: no API configuration for the CDI reconcile's client", contract.AllocationDRA)
	}
	c = rest.CopyConfig(c)
	c.RateLimiter, c.QPS = nil, -1
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("API client for the CDI reconcile: %w", err)
	}
	return cs, nil
}
