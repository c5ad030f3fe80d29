//go:build fleet

package fleet

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ibkube/ibkube/node/config"
)

func TestFleet(t *testing.T) {
	s := loadSettings(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rc, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	admin := rest.CopyConfig(rc)
	admin.QPS, admin.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	acfgYAML := agentConfigYAML
	if s.pools == "split" {
		acfgYAML = agentConfigSplitYAML
	}
	acfg, err := config.Parse(acfgYAML)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{
		s: s, ctx: ctx, log: testr.New(t), verbose: os.Getenv("FLEET_VERBOSE") != "", rest: rc, admin: cs,
		agentConfig: acfg, byName: map[string]*simNode{}, kubeletStatusPeriod: 10 * time.Second, agentRestartBackoff: 10 * time.Second,
		report: &report{Nodes: s.nodes, Smoke: s.smoke, Machine: machineFacts()},
	}
	defer f.writeReport(t)
	f.report.APIServerRSSBefore = apiserverRSS(s.dir)
	f.report.NodeLeaseSeconds = s.leaseSeconds

	f.setup(t)
	if s.admissionOnly {
		f.report.Nodes = 0
		f.admission(t)
		return
	}
	f.createNodes(t)
	f.startAgents(t)
	f.kubelet = newDRAKubelet(f)
	go f.kubelet.run(ctx, workNS)
	// Each phase's figures are written as soon as it ends, so a run cut
	// short keeps what it measured.
	phases := []func(*testing.T){
		f.measureSteady, func(t *testing.T) { f.measureStorage(t, "agents") },
		f.surgeCheck, f.throughput, f.flapStorm, f.rollout, f.admission,
	}
	if s.draFair {
		phases = slices.Insert(phases, 4, f.draFair) // after throughput
	}
	if s.startupOnly {
		phases = phases[:2]
	}
	if s.draOnly {
		phases = []func(*testing.T){f.throughput, f.draFair}
	}
	for _, phase := range phases {
		f.report.APIServerRSSAfter = apiserverRSS(s.dir)
		f.writeReport(t)
		phase(t)
	}
	f.report.APIServerRSSAfter = apiserverRSS(s.dir)
	f.stopAgents(t)
}
