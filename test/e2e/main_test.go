//go:build e2e

// Package e2e runs ibkube on a real single-node Kubernetes brought up by
// test/e2e/node/node.sh (make e2e): the chart installed with helm, pods
// admitted by the webhook, devices and memlock given by the node agent, and
// what the container really got read back from the test image's report.
//
// Every scenario records pass, fail or skip (with what is missing) in
// _output/e2e/report.json, and a readable summary is printed at the end.
package e2e

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Result is one scenario's line in report.json.
type Result struct {
	Scenario string             `json:"scenario"`
	Status   string             `json:"status"` // pass, fail, skip
	Detail   string             `json:"detail,omitempty"`
	Seconds  float64            `json:"seconds"`
	Figures  map[string]float64 `json:"figures,omitempty"`
	Notes    []string           `json:"notes,omitempty"`
}

// Report is _output/e2e/report.json.
type Report struct {
	KubeVersion string    `json:"kubeVersion"`
	Started     time.Time `json:"started"`
	Seconds     float64   `json:"seconds"`
	// Load is the number of busy CPU workers the run had beside it
	// (make e2e E2E_LOAD=N), 0 for none.
	Load    int      `json:"load,omitempty"`
	Results []Result `json:"results"`
}

// harness is what every scenario shares: paths, clients and the report.
type harness struct {
	root, e2eDir, kubectl, helm, bin, kubeconfig, kubeVersion string
	cfg                                                       *rest.Config
	cs                                                        *kubernetes.Clientset

	mu      sync.Mutex
	results []Result
	started time.Time
}

// h is set up by TestMain; the scenarios are tests of one suite on one node.
var h *harness

func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	h, err = newHarness()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := h.writeReport(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: report:", err)
		code = 1
	}
	os.Exit(code)
}

func newHarness() (*harness, error) {
	need := func(k string) (string, error) {
		v := os.Getenv(k)
		if v == "" {
			return "", fmt.Errorf("%s is not set: run through `make e2e`", k)
		}
		return v, nil
	}
	x := &harness{started: time.Now()}
	var err error
	for _, p := range []struct {
		dst *string
		key string
	}{{&x.root, "ROOT"}, {&x.e2eDir, "E2E_DIR"}, {&x.helm, "HELM"}, {&x.bin, "BIN"}, {&x.kubeVersion, "KUBE_VERSION"}} {
		if *p.dst, err = need(p.key); err != nil {
			return nil, err
		}
	}
	k8sBin, err := need("K8S_BIN")
	if err != nil {
		return nil, err
	}
	x.kubectl = filepath.Join(k8sBin, "kubectl")
	x.kubeconfig = filepath.Join(x.e2eDir, "kubeconfig")
	x.cfg, err = clientcmd.BuildConfigFromFlags("", x.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	x.cfg.QPS, x.cfg.Burst = 200, 400
	x.cs, err = kubernetes.NewForConfig(x.cfg)
	if err != nil {
		return nil, err
	}
	return x, nil
}

// scenario records t's outcome under name when t ends. Figures and notes
// added through the returned *Result land in the report.
func (x *harness) scenario(t *testing.T, name string) *Result {
	t.Helper()
	r := &Result{Scenario: name, Figures: map[string]float64{}}
	start := time.Now()
	t.Cleanup(func() {
		r.Seconds = time.Since(start).Seconds()
		switch {
		case t.Skipped():
			r.Status = "skip"
		case t.Failed():
			r.Status = "fail"
		default:
			r.Status = "pass"
		}
		if len(r.Figures) == 0 {
			r.Figures = nil
		}
		x.mu.Lock()
		x.results = append(x.results, *r)
		x.mu.Unlock()
	})
	return r
}

// skip marks a scenario skipped because a part is missing; the reason is
// printed as a SKIP line and kept in the report (never a pass).
func skip(t *testing.T, r *Result, format string, args ...any) {
	t.Helper()
	r.Detail = fmt.Sprintf(format, args...)
	fmt.Printf("SKIP %s: %s\n", r.Scenario, r.Detail)
	t.Skip(r.Detail)
}

// fail records the first failure's text in the report and fails t now.
func fail(t *testing.T, r *Result, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if r.Detail == "" {
		r.Detail = msg
	}
	t.Fatal(msg)
}

// check records a failure but lets the scenario go on.
func check(t *testing.T, r *Result, ok bool, format string, args ...any) {
	t.Helper()
	if ok {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if r.Detail == "" {
		r.Detail = msg
	} else {
		r.Notes = append(r.Notes, msg)
	}
	t.Error(msg)
}

func (x *harness) writeReport() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	sort.SliceStable(x.results, func(i, j int) bool { return x.results[i].Scenario < x.results[j].Scenario })
	load, _ := strconv.Atoi(os.Getenv("E2E_LOAD"))
	rep := Report{KubeVersion: "v" + x.kubeVersion, Started: x.started.UTC(), Seconds: time.Since(x.started).Seconds(), Load: load, Results: x.results}
	data, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(x.e2eDir, "report.json")
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n==== ibkube e2e summary (Kubernetes v%s, %.0fs, %d busy CPU workers beside it) ====\n", x.kubeVersion, rep.Seconds, rep.Load)
	counts := map[string]int{}
	for _, r := range x.results {
		counts[r.Status]++
		fmt.Fprintf(&b, "%-4s  %-40s %6.1fs  %s\n", strings.ToUpper(r.Status), r.Scenario, r.Seconds, r.Detail)
		keys := make([]string, 0, len(r.Figures))
		for k := range r.Figures {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "        %-38s %g\n", k, r.Figures[k])
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "        also: %s\n", n)
		}
	}
	fmt.Fprintf(&b, "pass %d, fail %d, skip %d; report: %s\n", counts["pass"], counts["fail"], counts["skip"], path)
	fmt.Print(b.String())
	return os.WriteFile(filepath.Join(x.e2eDir, "summary.txt"), []byte(b.String()), 0o644)
}
