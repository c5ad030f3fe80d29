// Command fleetplot draws the figures of docs/fleet.md from make fleet's
// reports (_output/fleet/report-N.json) and prints their table in
// markdown: fleetplot -out docs/fleet report-1000.json [report-5000.json].
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The report's fields fleetplot reads (test/fleet/report.go).
type percentiles struct {
	P50, P99, Max float64
	N             int
}

type burst struct {
	Pods, Refused, Unmutated int
	PodsPerSecond            float64
	LatencyMs                percentiles
	AddedP99Ms               float64
}

type report struct {
	Nodes   int
	Machine struct {
		CPUs      int
		MemoryGiB float64
		Load1     string
	}
	Startup                        map[string]percentiles
	StartupRequestsPerNode         float64
	SteadyRequestsPerNodePerSecond float64
	Throughput                     map[string]struct {
		Pods          int
		Seconds       float64
		PodsPerSecond float64
		Unbound       int
	}
	Flap struct {
		Ports, PortsPerPeriod, Flaps int
		PeriodSeconds, Seconds       float64
		RequestsPerNodePerSecond     float64
		MaxWritesPerNodePerMinute    float64
	}
	Rollout struct {
		Seconds                        float64
		BatchSize                      int
		PodsPrepared, Stranded         int
		BoundWhileAgentDown            int
		SlicesWiped                    int
		PrepareDelay, AgentUnavailable percentiles
	}
	Admission struct {
		Baseline, Webhook, BaselineAgain, PolicyFloor, Policy                          burst
		PacedRate                                                                      float64
		BaselinePaced, WebhookPaced, BaselinePacedAgain, PolicyFloorPaced, PolicyPaced burst
		Kill, Crash                                                                    struct{ Pods, Refused, Unmutated, Kills int }
	}
	PartitionAffinity struct {
		Pods                                     int
		Seconds, PodsPerSecond                   float64
		Unbound                                  int
		Jobs, JobSize, Partitions, LabelledNodes int
		SplitJobs, WithoutAffinity               int
	}
	ReadyBeforePublished int
	PublishedFromList    int
	Storage              []struct {
		When        string
		Slices      int
		SliceBytes  int
		EtcdDBBytes int64
	}
	APIServerRSSBefore, APIServerRSSAfter int64
}

// Upstream's scheduler figures at 500 nodes (scheduler_perf, as measured in
// kubernetes issue 140877): claims ~270 pods/s, matchAttribute 109-117, extended
// resources through DRA a CI floor of 120-130. Upstream publishes none for
// device-plugin extended resources.
var upstream = map[string]float64{"dra-extended": 125, "dra-claim": 270, "dra-claim-numa": 113}

var workloads = []string{"deviceplugin-extended", "dra-extended", "dra-claim", "dra-claim-numa"}

func main() {
	out := flag.String("out", "docs/fleet", "directory for the PNG plots")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: fleetplot -out DIR report-1000.json [report-5000.json ...]")
		os.Exit(2)
	}
	var reports []report
	for _, p := range flag.Args() {
		b, err := os.ReadFile(p)
		if err != nil {
			fail(err)
		}
		var r report
		if err := json.Unmarshal(b, &r); err != nil {
			fail(fmt.Errorf("%s: %w", p, err))
		}
		reports = append(reports, r)
	}
	sort.Slice(reports, func(i, j int) bool { return reports[i].Nodes < reports[j].Nodes })
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fail(err)
	}
	main := reports[0]
	for _, r := range reports {
		if r.Nodes == 1000 {
			main = r
		}
	}
	for name, draw := range map[string]func(report, []report) (*plot.Plot, error){
		"throughput": throughputPlot, "startup": startupPlot, "requests": requestsPlot,
		"faults": faultsPlot, "admission": admissionPlot, "storage": storagePlot,
	} {
		p, err := draw(main, reports)
		if err != nil {
			fail(fmt.Errorf("%s: %w", name, err))
		}
		if err := p.Save(7*vg.Inch, 4*vg.Inch, filepath.Join(*out, name+".png")); err != nil {
			fail(err)
		}
	}
	table(os.Stdout, main, reports)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "fleetplot:", err)
	os.Exit(1)
}

var (
	blue   = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	orange = color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff}
	grey   = color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}
)

// bars draws groups side by side: one bar series per entry of series.
func bars(title, ylabel string, labels []string, series []struct {
	name string
	vals []float64
	c    color.Color
}) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	w := vg.Points(20)
	for i, s := range series {
		b, err := plotter.NewBarChart(plotter.Values(s.vals), w)
		if err != nil {
			return nil, err
		}
		b.Color = s.c
		b.LineStyle.Width = 0
		b.Offset = w * vg.Length(float64(i)-float64(len(series)-1)/2)
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.Legend.Top = true
	p.NominalX(labels...)
	// Head room above the tallest bar for the legend.
	top := 0.0
	for _, s := range series {
		for _, v := range s.vals {
			top = max(top, v)
		}
	}
	p.Y.Min, p.Y.Max = 0, max(top*1.35, 1)
	p.X.Min, p.X.Max = -0.7, float64(len(labels)-1)+0.7
	return p, nil
}

type series = struct {
	name string
	vals []float64
	c    color.Color
}

func throughputPlot(r report, _ []report) (*plot.Plot, error) {
	var got, up []float64
	for _, w := range workloads {
		got = append(got, r.Throughput[w].PodsPerSecond)
		up = append(up, upstream[w])
	}
	got = append(got, r.PartitionAffinity.PodsPerSecond)
	up = append(up, 0)
	return bars(fmt.Sprintf("Scheduler throughput at %d nodes (pods/s)", r.Nodes), "pods/s",
		[]string{"device plugin", "DRA ext. resource", "DRA claim", "claim + numaNode", "partition affinity"},
		[]series{{"this fleet", got, blue}, {"upstream, 500 nodes", up, grey}})
}

func startupPlot(r report, _ []report) (*plot.Plot, error) {
	keys := []string{"dra_published", "dra_ready", "deviceplugin_capacity", "deviceplugin_ready"}
	var p50, p99 []float64
	for _, k := range keys {
		p50 = append(p50, r.Startup[k].P50)
		p99 = append(p99, r.Startup[k].P99)
	}
	return bars(fmt.Sprintf("%d agents started at once: seconds until", r.Nodes), "seconds",
		[]string{"DRA slices in the API", "DRA agent Ready", "DP capacity on the Node", "DP agent Ready"},
		[]series{{"p50", p50, blue}, {"p99", p99, orange}})
}

func requestsPlot(r report, _ []report) (*plot.Plot, error) {
	p, err := bars(fmt.Sprintf("Agents' API requests at %d nodes (per node per second)", r.Nodes), "requests/s per node",
		[]string{"steady state", "1% of ports flapping per minute"},
		[]series{{"measured", []float64{r.SteadyRequestsPerNodePerSecond, r.Flap.RequestsPerNodePerSecond}, blue}})
	if err != nil {
		return nil, err
	}
	goal, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 0.05}, {X: 1.5, Y: 0.05}})
	if err != nil {
		return nil, err
	}
	goal.Color = orange
	goal.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(goal)
	p.Legend.Add("goal 0.05", goal)
	return p, nil
}

func faultsPlot(r report, _ []report) (*plot.Plot, error) {
	a, c := r.Admission.Kill, r.Admission.Crash
	return bars(fmt.Sprintf("Faults at %d nodes (goal 0 each): rollout; webhook replica deleted, SIGKILLed", r.Nodes), "pods",
		[]string{"stranded", "bound, no agent", "refused, del.", "unmutated, del.", "refused, KILL", "unmutated, KILL"},
		[]series{{"pods", []float64{float64(r.Rollout.Stranded), float64(r.Rollout.BoundWhileAgentDown),
			float64(a.Refused), float64(a.Unmutated), float64(c.Refused), float64(c.Unmutated)}, blue}})
}

func admissionPlot(r report, _ []report) (*plot.Plot, error) {
	ad := r.Admission
	return bars(fmt.Sprintf("Admission: added p99 latency (ms) over no admission, at %.0f pods/s and in a burst", ad.PacedRate), "ms",
		[]string{"webhook (2 replicas)", "one-op policy (floor)", "policy mode"},
		[]series{
			{fmt.Sprintf("%.0f pods/s", ad.PacedRate), []float64{ad.WebhookPaced.AddedP99Ms, ad.PolicyFloorPaced.AddedP99Ms, ad.PolicyPaced.AddedP99Ms}, blue},
			{"burst, 32 clients", []float64{ad.Webhook.AddedP99Ms, ad.PolicyFloor.AddedP99Ms, ad.Policy.AddedP99Ms}, orange},
		})
}

func storagePlot(_ report, rs []report) (*plot.Plot, error) {
	var labels []string
	var slices, rss []float64
	for _, r := range rs {
		labels = append(labels, fmt.Sprintf("%d nodes", r.Nodes))
		var b float64
		for _, s := range r.Storage {
			if s.When == "agents" {
				b = float64(s.SliceBytes) / (1 << 20)
			}
		}
		slices = append(slices, b)
		rss = append(rss, float64(r.APIServerRSSAfter-r.APIServerRSSBefore)/(1<<20))
	}
	return bars("ResourceSlices as stored, and API server memory growth (MiB)", "MiB", labels,
		[]series{{"ResourceSlices (protobuf)", slices, blue}, {"kube-apiserver RSS growth", rss, orange}})
}

func table(w io.Writer, r report, rs []report) {
	fmt.Fprintf(w, "| figure | measured (%d nodes) | goal or upstream |\n|---|---|---|\n", r.Nodes)
	for _, name := range workloads {
		t := r.Throughput[name]
		ratio := "no upstream figure"
		if u := upstream[name]; u > 0 {
			ratio = fmt.Sprintf("%.0f pods/s at 500 nodes; ratio %.2f", u, t.PodsPerSecond/u)
		}
		fmt.Fprintf(w, "| scheduler throughput, %s | %.0f pods/s (%d pods in %.1f s) | %s |\n", name, t.PodsPerSecond, t.Pods, t.Seconds, ratio)
	}
	s := r.Startup
	fmt.Fprintf(w, "| agents start → DRA slices in the API | p50 %.1f s, p99 %.1f s | — |\n", s["dra_published"].P50, s["dra_published"].P99)
	fmt.Fprintf(w, "| agents start → DRA agent Ready | p50 %.1f s, p99 %.1f s | after its slices |\n", s["dra_ready"].P50, s["dra_ready"].P99)
	fmt.Fprintf(w, "| agents start → device-plugin capacity on the Node | p50 %.1f s, p99 %.1f s | kubelet status every 10 s |\n", s["deviceplugin_capacity"].P50, s["deviceplugin_capacity"].P99)
	fmt.Fprintf(w, "| agent API requests, steady state | %.4f req/s per node | ≤ 0.05 |\n", r.SteadyRequestsPerNodePerSecond)
	fmt.Fprintf(w, "| agent API requests, flap storm (%d of %d ports per %.0f s) | %.4f req/s per node; at most %.1f slice/Node writes per node per minute | bounded |\n",
		r.Flap.PortsPerPeriod, r.Flap.Ports, r.Flap.PeriodSeconds, r.Flap.RequestsPerNodePerSecond, r.Flap.MaxWritesPerNodePerMinute)
	ro := r.Rollout
	fmt.Fprintf(w, "| rollout of every agent (batches of %d) under a pod stream | %d stranded, %d bound while their agent was down, %d prepared (delay p99 %.1f s), %.0f s | 0 stranded |\n",
		ro.BatchSize, ro.Stranded, ro.BoundWhileAgentDown, ro.PodsPrepared, ro.PrepareDelay.P99, ro.Seconds)
	pa := r.PartitionAffinity
	fmt.Fprintf(w, "| scheduler throughput, jobs of %d pods with the webhook's partition affinity (%d partitions) | %.0f pods/s (%d pods in %.1f s); %d jobs split, %d pods unbound | 0 split |\n",
		pa.JobSize, pa.Partitions, pa.PodsPerSecond, pa.Pods, pa.Seconds, pa.SplitJobs, pa.Unbound)
	k := r.Admission.Kill
	fmt.Fprintf(w, "| webhook replica deleted every 30 s (%d times, 10 pods/s) | %d refused, %d unmutated of %d | 0 |\n", k.Kills, k.Refused, k.Unmutated, k.Pods)
	c := r.Admission.Crash
	fmt.Fprintf(w, "| webhook replica SIGKILLed every 30 s (%d times, 10 pods/s) | %d refused, %d unmutated of %d | 0 |\n", c.Kills, c.Refused, c.Unmutated, c.Pods)
	ad := r.Admission
	fmt.Fprintf(w, "| admission at %.0f pods/s, webhook | p99 %.1f ms (+%.1f ms over no admission) | — |\n", ad.PacedRate, ad.WebhookPaced.LatencyMs.P99, ad.WebhookPaced.AddedP99Ms)
	fmt.Fprintf(w, "| admission at %.0f pods/s, a one-operation MutatingAdmissionPolicy (the API server's floor) | p99 %.1f ms (+%.1f ms over no admission measured again just before) | — |\n", ad.PacedRate, ad.PolicyFloorPaced.LatencyMs.P99, ad.PolicyFloorPaced.AddedP99Ms)
	fmt.Fprintf(w, "| admission at %.0f pods/s, policy mode | p99 %.1f ms (+%.1f ms) | ≤ 5 ms added |\n", ad.PacedRate, ad.PolicyPaced.LatencyMs.P99, ad.PolicyPaced.AddedP99Ms)
	fmt.Fprintf(w, "| admission burst (32 clients), no admission | %.0f pods/s, p99 %.1f ms | — |\n", ad.Baseline.PodsPerSecond, ad.Baseline.LatencyMs.P99)
	fmt.Fprintf(w, "| admission burst, webhook | %.0f pods/s, p99 %.1f ms (+%.1f ms) | — |\n", ad.Webhook.PodsPerSecond, ad.Webhook.LatencyMs.P99, ad.Webhook.AddedP99Ms)
	fmt.Fprintf(w, "| admission burst, no admission, again before policy mode | %.0f pods/s, p99 %.1f ms | — |\n", ad.BaselineAgain.PodsPerSecond, ad.BaselineAgain.LatencyMs.P99)
	fmt.Fprintf(w, "| admission burst, a one-operation MutatingAdmissionPolicy | %.0f pods/s, p99 %.1f ms (+%.1f ms) | — |\n", ad.PolicyFloor.PodsPerSecond, ad.PolicyFloor.LatencyMs.P99, ad.PolicyFloor.AddedP99Ms)
	fmt.Fprintf(w, "| admission burst, policy mode | %.0f pods/s, p99 %.1f ms (+%.1f ms) | — |\n", ad.Policy.PodsPerSecond, ad.Policy.LatencyMs.P99, ad.Policy.AddedP99Ms)
	fmt.Fprintf(w, "| DRA agents Ready before their slices were in the API | %d | 0 |\n", r.ReadyBeforePublished)
	if r.PublishedFromList > 0 {
		fmt.Fprintf(w, "| nodes the harness's watches missed at start, timed from the API's records (1 s resolution) | %d | — |\n", r.PublishedFromList)
	}
	for _, x := range rs {
		for _, st := range x.Storage {
			if st.When == "agents" {
				fmt.Fprintf(w, "| ResourceSlices stored, %d nodes | %d slices, %.1f MiB (protobuf); etcd database %.0f MiB | — |\n",
					x.Nodes, st.Slices, float64(st.SliceBytes)/(1<<20), float64(st.EtcdDBBytes)/(1<<20))
			}
		}
		fmt.Fprintf(w, "| kube-apiserver RSS, %d nodes | %.0f → %.0f MiB | — |\n", x.Nodes, float64(x.APIServerRSSBefore)/(1<<20), float64(x.APIServerRSSAfter)/(1<<20))
	}
}
