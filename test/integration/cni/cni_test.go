//go:build cni_integration

// Package cni drives the ibkube-cni binary for real: libcni runs ADD, CHECK
// and DEL against network namespaces the test creates, and the plugin
// delegates to Debian's reference plugins (macvlan, host-device,
// host-local). IPoIB links cannot be created here, so veth/veth links named
// like the OCI fixture's RoCE netdevs stand in for the parents; the ipoib
// delegate path is covered by cni/plugin's golden configs.
//
// Needs root, iproute2 and containernetworking-plugins (make apt-deps).
// Every address lives inside the namespaces the test creates.
package cni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/ibkube/ibkube/hca/fixture"
)

// refPluginDirs are where distributions put the reference plugins.
var refPluginDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

type env struct {
	hostNS, podNS string
	fixture       string
	binDir        string
	cacheDir      string
	stateDir      string
	ipamDir       string
	cni           *libcni.CNIConfig
}

func run(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func setup(t *testing.T) *env {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the CNI integration test needs root (network namespaces, links); run it with make test-integration-cni as root")
	}
	refDir := ""
	for _, d := range refPluginDirs {
		if _, err := os.Stat(filepath.Join(d, "macvlan")); err == nil {
			refDir = d
			break
		}
	}
	if refDir == "" {
		t.Fatalf("no reference CNI plugins in %v: install containernetworking-plugins (make apt-deps)", refPluginDirs)
	}
	tmp := t.TempDir()
	e := &env{
		hostNS:   fmt.Sprintf("ibkube-cni-host-%d", os.Getpid()),
		podNS:    fmt.Sprintf("ibkube-cni-pod-%d", os.Getpid()),
		fixture:  filepath.Join(tmp, "node"),
		binDir:   filepath.Join(tmp, "bin"),
		cacheDir: filepath.Join(tmp, "cache"),
		stateDir: filepath.Join(tmp, "state"),
		ipamDir:  filepath.Join(tmp, "ipam"),
	}
	if err := fixture.Build(e.fixture, fixture.OCIH100); err != nil {
		t.Fatal(err)
	}
	// The plugin binary, built for this test, and a wrapper that runs it in
	// the stand-in host namespace (its delegates inherit that namespace).
	realDir := filepath.Join(tmp, "real")
	build := exec.Command("go", "build", "-o", filepath.Join(realDir, "ibkube-cni"), "github.com/ibkube/ibkube/cmd/ibkube-cni")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build ibkube-cni: %v\n%s", err, out)
	}
	if err := os.MkdirAll(e.binDir, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s %s \"$@\"\n", e.hostNS, filepath.Join(realDir, "ibkube-cni"))
	if err := os.WriteFile(filepath.Join(e.binDir, "ibkube-cni"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}

	for _, ns := range []string{e.hostNS, e.podNS} {
		run(t, "ip", "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	// rdma0: a veth standing in for the first RoCE port (macvlan parent);
	// rdma1: another veth standing in for the second (moved by host-device).
	run(t, "ip", "-n", e.hostNS, "link", "add", "rdma0", "type", "veth", "peer", "name", "rdma0-peer")
	run(t, "ip", "-n", e.hostNS, "link", "add", "rdma1", "type", "veth", "peer", "name", "rdma1-peer")
	// rdma2: the port of mlx5_3, the HCA "allocated" to the pod.
	run(t, "ip", "-n", e.hostNS, "link", "add", "rdma2", "type", "veth", "peer", "name", "rdma2-peer")
	for _, l := range []string{"lo", "rdma0", "rdma0-peer", "rdma1", "rdma1-peer", "rdma2", "rdma2-peer"} {
		run(t, "ip", "-n", e.hostNS, "link", "set", l, "up")
	}
	e.cni = libcni.NewCNIConfigWithCacheDir([]string{e.binDir, refDir}, e.cacheDir, nil)
	return e
}

func (e *env) confList(t *testing.T, name string, parent map[string]any, delegate map[string]any, subnet string, extra ...map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	plugin := map[string]any{
		"type":      "ibkube-cni",
		"parent":    parent,
		"delegate":  delegate,
		"sysfsRoot": fixture.SysfsRoot(e.fixture),
		"devRoot":   fixture.DevRoot(e.fixture),
		"stateDir":  e.stateDir,
		"ipam": map[string]any{
			"type": "host-local", "dataDir": e.ipamDir,
			"ranges": [][]map[string]string{{{"subnet": subnet}}},
		},
	}
	for _, x := range extra {
		for k, v := range x {
			plugin[k] = v
		}
	}
	raw, err := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": name, "plugins": []any{plugin}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func (e *env) rt(ifName string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{
		ContainerID: "ibkube-cni-test", NetNS: "/var/run/netns/" + e.podNS, IfName: ifName,
		// As Multus and containerd pass them.
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "team-a"}, {"K8S_POD_NAME", "trainer-0"}},
	}
}

type link struct {
	IfName   string `json:"ifname"`
	LinkInfo struct {
		InfoKind string `json:"info_kind"`
	} `json:"linkinfo"`
	AddrInfo []struct {
		Local string `json:"local"`
	} `json:"addr_info"`
}

func links(t *testing.T, ns string) map[string]link {
	t.Helper()
	var ls []link
	if err := json.Unmarshal([]byte(run(t, "ip", "-n", ns, "-d", "-j", "addr", "show")), &ls); err != nil {
		t.Fatal(err)
	}
	out := map[string]link{}
	for _, l := range ls {
		out[l.IfName] = l
	}
	return out
}

func TestPluginWithReferenceDelegates(t *testing.T) {
	e := setup(t)
	ctx := context.Background()

	// One network on the first ACTIVE GPU-fabric port, via macvlan.
	roce := e.confList(t, "ibkube-roce",
		map[string]any{"policy": "first-active", "netdevs": []string{"rdma*"}},
		map[string]any{"type": "macvlan", "mode": "bridge"}, "198.18.200.0/25")
	// One network on the port at index 1, moved in whole by host-device.
	exclusive := e.confList(t, "ibkube-roce-1",
		map[string]any{"policy": "index", "index": 1, "netdevs": []string{"rdma*"}},
		map[string]any{"type": "host-device"}, "198.18.200.128/26")
	// The pod's allocated HCA, as Multus passes it for a NAD with the
	// k8s.v1.cni.cncf.io/resourceName annotation (macvlan: this kernel has no ipvlan).
	allocated := e.confList(t, "ibkube-roce-allocated",
		map[string]any{"policy": "auto"},
		map[string]any{"type": "macvlan", "mode": "bridge"}, "198.18.200.192/26",
		map[string]any{"deviceID": "mlx5_3", "pciBusID": "mlx5_3"})

	res, err := e.cni.AddNetworkList(ctx, roce, e.rt("net1"))
	if err != nil {
		t.Fatalf("ADD macvlan network: %v", err)
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.IPs) != 1 || !netip.MustParsePrefix("198.18.200.0/25").Contains(netip.MustParseAddr(r.IPs[0].Address.IP.String())) {
		t.Errorf("ADD result IPs = %v, want one in 198.18.200.0/25", r.IPs)
	}
	if _, err := e.cni.AddNetworkList(ctx, exclusive, e.rt("net2")); err != nil {
		t.Fatalf("ADD host-device network: %v", err)
	}
	if _, err := e.cni.AddNetworkList(ctx, allocated, e.rt("net3")); err != nil {
		t.Fatalf("ADD macvlan network on the allocated HCA: %v", err)
	}

	pod := links(t, e.podNS)
	if l, ok := pod["net1"]; !ok || l.LinkInfo.InfoKind != "macvlan" || !hasAddrIn(l, "198.18.200.0/25") {
		t.Errorf("pod net1 = %+v, want a macvlan with a 198.18.200.0/25 address", l)
	}
	if l, ok := pod["net2"]; !ok || l.LinkInfo.InfoKind != "veth" || !hasAddrIn(l, "198.18.200.128/26") {
		t.Errorf("pod net2 = %+v, want the host's rdma1 (veth) with a 198.18.200.128/26 address", l)
	}
	if l, ok := pod["net3"]; !ok || l.LinkInfo.InfoKind != "macvlan" || !hasAddrIn(l, "198.18.200.192/26") {
		t.Errorf("pod net3 = %+v, want a macvlan with a 198.18.200.192/26 address", l)
	}
	if got := recordedParent(t, e.stateDir, "ibkube-roce-allocated"); got != "rdma2" {
		t.Errorf("allocated network's parent = %q, want rdma2 (mlx5_3's port)", got)
	}
	if _, still := links(t, e.hostNS)["rdma1"]; still {
		t.Error("rdma1 is still in the host namespace after the host-device ADD")
	}

	attached := []struct {
		list *libcni.NetworkConfigList
		ifn  string
	}{{roce, "net1"}, {exclusive, "net2"}, {allocated, "net3"}}
	for _, n := range attached {
		if err := e.cni.CheckNetworkList(ctx, n.list, e.rt(n.ifn)); err != nil {
			t.Errorf("CHECK %s: %v", n.list.Name, err)
		}
	}

	// CHECK reaches the delegate: remove the macvlan behind its back.
	run(t, "ip", "-n", e.podNS, "link", "del", "net1")
	if err := e.cni.CheckNetworkList(ctx, roce, e.rt("net1")); err == nil {
		t.Error("CHECK succeeded after net1 was deleted in the pod")
	}

	for _, n := range attached {
		if err := e.cni.DelNetworkList(ctx, n.list, e.rt(n.ifn)); err != nil {
			t.Errorf("DEL %s: %v", n.list.Name, err)
		}
		// DEL is idempotent.
		if err := e.cni.DelNetworkList(ctx, n.list, e.rt(n.ifn)); err != nil {
			t.Errorf("second DEL %s: %v", n.list.Name, err)
		}
	}
	if _, back := links(t, e.hostNS)["rdma1"]; !back {
		t.Error("rdma1 did not return to the host namespace after DEL")
	}
	pod = links(t, e.podNS)
	for _, name := range []string{"net1", "net2", "net3"} {
		if _, left := pod[name]; left {
			t.Errorf("pod still has %s after DEL", name)
		}
	}
	if entries, _ := os.ReadDir(e.stateDir); len(entries) != 0 {
		t.Errorf("plugin state left after DEL: %v", entries)
	}
}

func TestPluginErrorsThroughLibcni(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	tests := []struct {
		name     string
		parent   map[string]any
		delegate map[string]any
		wantCode uint
		wantMsg  string
	}{
		{"ipoib on a RoCE node", map[string]any{}, map[string]any{"type": "ipoib"}, types.ErrTryAgainLater,
			`no candidate parent interface on this node: want a port with a netdev, link layer InfiniBand`},
		{"index past the last port", map[string]any{"policy": "index", "index": 16, "netdevs": []string{"rdma*"}},
			map[string]any{"type": "macvlan"}, types.ErrInvalidNetworkConfig, "parent index 16 is out of range: this node has 16 candidate(s)"},
		{"hard-coded parent", map[string]any{}, map[string]any{"type": "macvlan", "master": "rdma0"},
			types.ErrInvalidNetworkConfig, "delegate.master is chosen by ibkube-cni"},
		{"unknown policy", map[string]any{"policy": "closest"}, map[string]any{"type": "macvlan"},
			types.ErrInvalidNetworkConfig, `unknown parent.policy "closest"; accepted: auto, allocated, first-active, index`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			list := e.confList(t, "bad", tt.parent, tt.delegate, "198.18.200.0/25")
			_, err := e.cni.AddNetworkList(ctx, list, e.rt("net9"))
			var te *types.Error
			if !errors.As(err, &te) {
				t.Fatalf("ADD error = %T %v, want a CNI error", err, err)
			}
			if te.Code != tt.wantCode || !strings.Contains(te.Msg, tt.wantMsg) {
				t.Errorf("ADD error = code %d %q, want code %d containing %q", te.Code, te.Msg, tt.wantCode, tt.wantMsg)
			}
			if strings.Contains(te.Msg, "panic") || strings.Contains(te.Details, "goroutine") {
				t.Errorf("ADD error looks like a panic: %v", te)
			}
		})
	}
	if _, ok := links(t, e.podNS)["net9"]; ok {
		t.Error("a failed ADD left net9 in the pod")
	}
}

// recordedParent reads the parent netdev the plugin recorded for network.
func recordedParent(t *testing.T, stateDir, network string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(stateDir, network+"_*.json"))
	if len(matches) != 1 {
		t.Fatalf("records for %s: %v, want one", network, matches)
	}
	b, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Parent struct {
			Netdev string `json:"netdev"`
		} `json:"parent"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Parent.Netdev
}

func hasAddrIn(l link, cidr string) bool {
	p := netip.MustParsePrefix(cidr)
	for _, a := range l.AddrInfo {
		if addr, err := netip.ParseAddr(a.Local); err == nil && p.Contains(addr) {
			return true
		}
	}
	return false
}
