package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/ibkube/ibkube/hca/fixture"
	"github.com/ibkube/ibkube/hca/inventory"
)

// fakeExec stands in for the delegate plugin: it records each call and
// answers ADD with a fixed result.
type fakeExec struct {
	mu    sync.Mutex
	calls []call
	fail  error
}

type call struct {
	Command, Plugin string
	Conf            map[string]any
}

func (f *fakeExec) ExecPlugin(_ context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var conf map[string]any
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, err
	}
	cmd := ""
	for _, e := range environ {
		if v, ok := strings.CutPrefix(e, "CNI_COMMAND="); ok {
			cmd = v
		}
	}
	f.calls = append(f.calls, call{Command: cmd, Plugin: filepath.Base(pluginPath), Conf: conf})
	if f.fail != nil {
		return nil, f.fail
	}
	if cmd == "ADD" {
		return []byte(`{"cniVersion":"1.0.0","interfaces":[{"name":"net1","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.200.0.5/16","interface":0}]}`), nil
	}
	return nil, nil
}

func (f *fakeExec) FindInPath(plugin string, _ []string) (string, error) {
	return "/opt/cni/bin/" + plugin, nil
}

func (f *fakeExec) Decode(b []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(b)
}

type nodeScanner struct{ node inventory.Node }

func (s nodeScanner) Scan(context.Context) (inventory.Node, error) { return s.node, nil }

func newTestPlugin(t *testing.T, fixtureName string) (*Plugin, *fakeExec, *bytes.Buffer) {
	t.Helper()
	node := scanFixture(t, fixtureName)
	ex := &fakeExec{}
	out := &bytes.Buffer{}
	p := New(Options{
		NewScanner: func(string, string) Scanner { return nodeScanner{node} },
		Exec:       ex,
		Stdout:     out,
	})
	return p, ex, out
}

func ipoibConf(stateDir string, extra string) []byte {
	return []byte(`{"cniVersion":"1.0.0","name":"ibkube-ipoib","type":"ibkube-cni",
		"delegate":{"type":"ipoib"},"ipam":{"type":"whereabouts","range":"10.200.0.0/16"},
		"stateDir":` + quote(stateDir) + extra + `}`)
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

func TestAddCheckDel(t *testing.T) {
	t.Parallel()
	p, ex, out := newTestPlugin(t, fixture.NDv5)
	state := t.TempDir()
	args := &skel.CmdArgs{ContainerID: "c1", Netns: "/var/run/netns/x", IfName: "net1",
		StdinData: ipoibConf(state, `,"deviceID":"mlx5_4","pciBusID":"mlx5_4"`)} // as Multus injects them
	if err := p.Add(args); err != nil {
		t.Fatalf("Add() error = %v", err)
	}
	if !strings.Contains(out.String(), `"10.200.0.5/16"`) {
		t.Errorf("Add() printed %s, want the delegate's result", out)
	}
	if got := ex.calls[0].Conf["master"]; got != "ibP261p0s0" {
		t.Errorf("delegate ADD master = %v, want ibP261p0s0 (mlx5_4)", got)
	}
	for _, k := range []string{"deviceID", "pciBusID", "parent", "delegate", "stateDir"} {
		if _, leaked := ex.calls[0].Conf[k]; leaked {
			t.Errorf("%s passed to the delegate", k)
		}
	}

	// The node changes after ADD: CHECK and DEL must still use mlx5_4's netdev.
	p.opts.NewScanner = func(string, string) Scanner { return nodeScanner{} }
	check := *args
	check.StdinData = ipoibConf(state, `,"deviceID":"mlx5_4","prevResult":{"cniVersion":"1.0.0","interfaces":[{"name":"net1"}]}`)
	if err := p.Check(&check); err != nil {
		t.Fatalf("Check() error = %v", err)
	}
	if c := ex.calls[1]; c.Command != "CHECK" || c.Conf["master"] != "ibP261p0s0" || c.Conf["prevResult"] == nil {
		t.Errorf("delegate CHECK = %+v, want master ibP261p0s0 and the prevResult", c)
	}
	if err := p.Del(args); err != nil {
		t.Fatalf("Del() error = %v", err)
	}
	if c := ex.calls[2]; c.Command != "DEL" || c.Conf["master"] != "ibP261p0s0" {
		t.Errorf("delegate DEL = %+v, want master ibP261p0s0", c)
	}
	// DEL again: nothing recorded: success, no delegate call.
	if err := p.Del(args); err != nil {
		t.Fatalf("second Del() error = %v", err)
	}
	if len(ex.calls) != 3 {
		t.Errorf("second Del() called the delegate: %+v", ex.calls[3:])
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("state dir not empty after DEL: %v", entries)
	}
}

func TestDeviceIDFromRuntimeConfig(t *testing.T) {
	t.Parallel()
	p, ex, _ := newTestPlugin(t, fixture.NDv5)
	conf := ipoibConf(t.TempDir(), `,"capabilities":{"deviceID":true},"runtimeConfig":{"deviceID":"0107:00:00.0"}`)
	if err := p.Add(&skel.CmdArgs{ContainerID: "c1", IfName: "net1", StdinData: conf}); err != nil {
		t.Fatalf("Add() error = %v", err)
	}
	if got := ex.calls[0].Conf["master"]; got != "ibP263p0s0" {
		t.Errorf("delegate master = %v, want ibP263p0s0 (the VF at 0107:00:00.0)", got)
	}
}

func TestAddDelegateFailureLeavesNoState(t *testing.T) {
	t.Parallel()
	p, ex, _ := newTestPlugin(t, fixture.NDv5)
	ex.fail = types.NewError(types.ErrInternal, "failed to create ipoib link", "")
	state := t.TempDir()
	err := p.Add(&skel.CmdArgs{ContainerID: "c1", IfName: "net1", StdinData: ipoibConf(state, "")})
	var te *types.Error
	if !errors.As(err, &te) || !strings.Contains(te.Msg, "delegate ipoib on ibP257p0s0 (mlx5_0 port 1): failed to create ipoib link") {
		t.Fatalf("Add() error = %v, want the delegate's error naming the parent", err)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("state left after a failed ADD: %v", entries)
	}
}

func TestBadConfigsGetCNIErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		fixture  string
		conf     string
		wantCode uint
		wantMsg  string
	}{
		{name: "not JSON", conf: `{`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: "not a JSON object"},
		{name: "no cniVersion", conf: `{"name":"n","delegate":{"type":"ipoib"}}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `network "n" has no "cniVersion"; accepted: 0.3.0`},
		{name: "no delegate", conf: `{"cniVersion":"1.0.0","name":"n","type":"ibkube-cni"}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `has no "delegate"; accepted: an object with "type" one of host-device, ipoib, ipvlan, macvlan`},
		{name: "unknown delegate", conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"bridge"}}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `delegate.type "bridge" is not supported`},
		{name: "hard-coded master", conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib","master":"ibP257p0s0"}}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: "delegate.master is chosen by ibkube-cni"},
		{name: "typo at top level", conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"},"parnet":{}}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: "unknown key(s) parnet"},
		{name: "bad policy", conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"},"parent":{"policy":"nearest"}}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `unknown parent.policy "nearest"; accepted: auto, allocated, first-active, index`},
		{name: "index without index", conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"},"parent":{"policy":"index"}}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `needs parent.index`},
		{name: "bad link layer", conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"},"parent":{"linkLayer":"ib"}}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `parent.linkLayer "ib"; accepted: InfiniBand, Ethernet`},
		{name: "bad selector", conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"},"parent":{"selector":{"vendors":["0x15b3"]}}}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `parent.selector.vendors[0]`},
		{name: "bad hcaIndex arg", conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"},"args":{"cni":{"hcaIndex":"two"}}}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `CNI arg "hcaIndex" must be a non-negative integer`},
		{name: "no IB port on a RoCE node: retry later", fixture: fixture.OCIH100, conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"}}`, wantCode: types.ErrTryAgainLater, wantMsg: `network "n": no candidate parent interface on this node`},
		{name: "index out of range", fixture: fixture.NDv5, conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"},"parent":{"policy":"index","index":12}}`, wantCode: types.ErrInvalidNetworkConfig, wantMsg: `parent index 12 is out of range: this node has 8 candidate(s): [0] ibP257p0s0 (mlx5_0 port 1, InfiniBand, ACTIVE)`},
		{name: "allocated device is DOWN", fixture: fixture.Broken, conf: `{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"},"deviceID":"mlx5_1"}`, wantCode: types.ErrTryAgainLater, wantMsg: `whose port is DOWN, not ACTIVE`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fx := tt.fixture
			if fx == "" {
				fx = fixture.NDv5
			}
			p, ex, _ := newTestPlugin(t, fx)
			var conf map[string]any
			raw := []byte(tt.conf)
			if json.Unmarshal(raw, &conf) == nil {
				conf["stateDir"] = t.TempDir()
				raw, _ = json.Marshal(conf)
			}
			err := p.Add(&skel.CmdArgs{ContainerID: "c", IfName: "net1", StdinData: raw})
			var te *types.Error
			if !errors.As(err, &te) {
				t.Fatalf("Add() error = %T %v, want *types.Error", err, err)
			}
			if te.Code != tt.wantCode || !strings.Contains(te.Msg, tt.wantMsg) {
				t.Errorf("Add() error = code %d %q, want code %d containing %q", te.Code, te.Msg, tt.wantCode, tt.wantMsg)
			}
			if len(ex.calls) != 0 {
				t.Errorf("delegate called despite the error: %+v", ex.calls)
			}
		})
	}
}

// FuzzParseConfig: any stdin gives a config or a *ConfigError, never a panic.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"}}`,
		`{"cniVersion":"1.0.0","name":"n","delegate":{"type":"macvlan"},"parent":{"policy":"index","index":3,"netdevs":["rdma*"]}}`,
		`{"cniVersion":"1.0.0","name":"n","delegate":{"type":"host-device"},"args":{"cni":{"hca":"mlx5_1","hcaIndex":2}}}`,
		`{"cniVersion":"1.0.0","name":"n","delegate":{"type":"ipoib"},"parent":{"selector":{"names":["["]}}}`,
		`[]`, `null`, `{"delegate":null}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		conf, err := ParseConfig(data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("ParseConfig() error = %T %v, want *ConfigError", err, err)
			}
			return
		}
		if _, err := conf.DelegateConfig(Parent{Netdev: "ib0"}, true); err != nil {
			t.Fatalf("DelegateConfig() of a valid config: %v", err)
		}
		Resolve(inventory.Node{}, conf.EffectiveParent(), Request{})
	})
}

func TestGCForgetsStaleRecords(t *testing.T) {
	t.Parallel()
	p, _, _ := newTestPlugin(t, fixture.NDv5)
	state := t.TempDir()
	for _, id := range []string{"live", "gone"} {
		if err := p.Add(&skel.CmdArgs{ContainerID: id, IfName: "net1", StdinData: ipoibConf(state, "")}); err != nil {
			t.Fatal(err)
		}
	}
	other := []byte(`{"cniVersion":"1.1.0","name":"other","delegate":{"type":"ipoib"},"stateDir":` + quote(state) + `}`)
	if err := p.Add(&skel.CmdArgs{ContainerID: "gone", IfName: "net2", StdinData: other}); err != nil {
		t.Fatal(err)
	}
	gc := ipoibConf(state, `,"cni.dev/valid-attachments":[{"containerID":"live","ifname":"net1"}]`)
	if err := p.GC(&skel.CmdArgs{StdinData: gc}); err != nil {
		t.Fatalf("GC() error = %v", err)
	}
	var left []string
	entries, _ := os.ReadDir(state)
	for _, e := range entries {
		left = append(left, e.Name())
	}
	want := []string{"ibkube-ipoib_live_net1.json", "other_gone_net2.json"}
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Errorf("records after GC = %v, want %v (other networks untouched)", left, want)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	p, _, _ := newTestPlugin(t, fixture.OCIH100)
	conf := func(delegate string) []byte {
		return []byte(`{"cniVersion":"1.1.0","name":"n","delegate":{"type":"` + delegate + `"},"parent":{"netdevs":["rdma*"]}}`)
	}
	if err := p.Status(&skel.CmdArgs{StdinData: conf("macvlan")}); err != nil {
		t.Errorf("Status(macvlan on a RoCE node) = %v, want ready", err)
	}
	err := p.Status(&skel.CmdArgs{StdinData: conf("ipoib")})
	var te *types.Error
	if !errors.As(err, &te) || te.Code != types.ErrTryAgainLater {
		t.Errorf("Status(ipoib on a RoCE node) = %v, want code 11", err)
	}
}
