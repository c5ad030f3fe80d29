//go:build fleet

package fleet

// report is what a fleet run measured (_output/fleet/report.json); the
// plot tool (hack/tools/fleetplot) and docs/fleet.md read it.
type report struct {
	Nodes   int
	Smoke   bool
	Machine machineInfo
	// NodeLeaseSeconds is the nodes' Lease duration (fleet.sh
	// FLEET_LEASE_SECONDS; 40, a kubelet's, unless slowed for the machine).
	NodeLeaseSeconds int

	NodesReadySeconds      float64
	Startup                map[string]percentiles
	StartupRequestsPerNode float64
	ReadyBeforePublished   int
	// PublishedFromList: nodes whose publication the harness's watches
	// missed, timed from the API's records instead (1 s resolution).
	PublishedFromList int
	// PublishedLate: nodes whose first watch event came late (a reopened
	// watch), timed from the API's records as well.
	PublishedLate int
	// AgentRestarts: agents started again at start-up after their start
	// failed (restartOnFailure), in all.
	AgentRestarts int
	// ReadyCheckFailed: DRA agents whose slices the harness could not list
	// when they turned Ready (neither a pass nor a violation).
	ReadyCheckFailed               int
	SteadyRequestsPerNodePerSecond float64
	Throughput                     map[string]throughputResult
	// PartitionAffinity: jobs through the webhook, which adds the
	// partition affinity (the admission phase).
	PartitionAffinity partitionResult
	Flap              flapResult
	Rollout           rolloutResult
	Admission         admissionResult
	Storage           []storage
	// Surge: what the control plane did with a surging rollout of an
	// agent-shaped DaemonSet.
	Surge surgeResult
	// DRAFair: DRA against a reference driver, and with sharers, on the
	// same nodes in the same run (make fleet and FLEET_PHASES=dra).
	DRAFair            draFairResult
	APIServerRSSBefore int64
	APIServerRSSAfter  int64
}
