package dra

import (
	"context"
	"fmt"
	"os"
	"path"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/ibkube/ibkube/contract"
)

// PluginOptions say where the kubelet finds the plugin and how it is
// deployed.
type PluginOptions struct {
	Client kubernetes.Interface
	// PodUID is the agent pod's UID (downward API): with it two agent pods
	// can serve one node during a DaemonSet rolling update
	// (kubeletplugin.RollingUpdate, kubelet 1.33+). Empty: no rolling
	// update, the DaemonSet must replace pods OnDelete or maxSurge 0.
	PodUID string
	// PluginDir is the kubelet's plugin data directory for this driver
	// (kubeletplugin.KubeletPluginsDir/<driver>); RegistryDir is the
	// kubelet's plugin registration directory. Empty: the kubelet's
	// defaults.
	PluginDir, RegistryDir string
	// ExitTimeout bounds the wait for the exit taint (0:
	// DefaultExitTimeout).
	ExitTimeout time.Duration
}

// Run serves the kubelet until ctx ends: it starts the registration and
// DRA gRPC services (health included), publishes the current model and
// every later Update, and stops them cleanly, so that a rolling update's
// next pod does not find stale sockets.
func (d *Driver) Run(ctx context.Context) error {
	o := d.cfg.Plugin
	if o.PluginDir == "" {
		o.PluginDir = path.Join(kubeletplugin.KubeletPluginsDir, contract.DRADriverName)
	}
	if o.RegistryDir == "" {
		o.RegistryDir = kubeletplugin.KubeletRegistryDir
	}
	opts := []kubeletplugin.Option{
		kubeletplugin.DriverName(contract.DRADriverName),
		// The slice controller's informer feeds the view Published reads.
		kubeletplugin.KubeClient(observedClient{Interface: o.Client, view: d.view}),
		kubeletplugin.NodeName(d.cfg.NodeName),
		kubeletplugin.HealthService(true),
		kubeletplugin.PluginDataDirectoryPath(o.PluginDir),
		kubeletplugin.RegistrarDirectoryPath(o.RegistryDir),
	}
	if o.PodUID != "" {
		opts = append(opts, kubeletplugin.RollingUpdate(types.UID(o.PodUID)))
	}
	// The kubelet makes its plugins and registry directories, but not the
	// driver's own directory under plugins, and the helper does not either.
	for _, dir := range []string{o.PluginDir, o.RegistryDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("DRA plugin directory: %w", err)
		}
	}
	// Specs left by claims that went while the agent was away would hold
	// their HCAs for ever: remove them before the kubelet asks for any.
	if n, err := d.ReconcileCDI(ctx); err != nil {
		d.log.Error(err, "reconcile CDI specs with their claims at start", "removed", n)
	}
	if d.cfg.Claims != nil {
		go d.reconcileLoop(ctx, d.cfg.ReconcilePeriod)
	}
	// What is left after that is held by live claims; an HCA among them
	// held both ways is for the operator to end.
	d.reportHeldTwice()
	// The helper stops when Stop is called below, not when ctx ends: its
	// ResourceSlice controller must still be running to write the exit
	// taint (drainOnExit), and stops on its own with ctx otherwise.
	helper, err := kubeletplugin.Start(klog.NewContext(context.WithoutCancel(ctx), d.log), d, opts...)
	if err != nil {
		return fmt.Errorf("start the DRA kubelet plugin: %w", err)
	}
	defer func() {
		d.attach(nil)
		d.drainOnExit(helper, o)
		helper.Stop()
	}()
	d.attach(helper)
	d.log.Info("DRA kubelet plugin started", "driver", contract.DRADriverName, "node", d.cfg.NodeName, "cdiDir", d.cfg.CDIDir, "rollingUpdate", o.PodUID != "")
	select {
	case <-ctx.Done():
		return nil
	case err := <-d.fatal:
		return err
	}
}
