# DRA driver (node/dra, contract, the agent's --allocation=dra). See docs/dra-driver.md.

##@ DRA driver

.PHONY: test-dra
test-dra: ## DRA driver unit tests (slices, CDI specs, prepare/unprepare, health, gate check, the gRPC socket).
	$(GO) test -count=1 ./node/dra/... ./contract/...

.PHONY: test-integration-dra
test-integration-dra: envtest-assets ## DRA driver against a real kube-apiserver + etcd (envtest): gate check, slices validated server-side, the whole agent in DRA mode, the aligned claim's templates and their controller.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -tags integration -timeout 10m ./test/integration/dra/...
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -tags integration -timeout 10m -run '^TestRunDRA$$' ./cmd/ibkube-node-agent/
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -tags integration ./webhook/aligned/... ./webhook/templates/...
TEST_TARGETS += test-integration-dra

BENCH_TARGETS += bench-dra

.PHONY: bench-dra
bench-dra: ## DRA driver benchmarks: Prepare p50/p99, port change to ResourceSlice through the agent.
	$(GO) test -run '^$$' -bench 'BenchmarkPrepare|BenchmarkPortChangeToSlice' -benchtime 100x ./node/dra/

BENCH_TARGETS += bench-dra-allocator

# Six counts for benchstat (go run golang.org/x/perf/cmd/benchstat@latest
# FILE); the rows' ratios compare cases run interleaved in one process.
.PHONY: bench-dra-allocator
bench-dra-allocator: ## The scheduler's allocator over the node's slices: CPU per node and ratios against classes without selectors, the order before, no shares elsewhere.
	$(GO) test -run '^$$' -bench BenchmarkAllocator -benchtime 200x -count 6 ./node/dra/

BENCH_TARGETS += bench-dra-aligned

.PHONY: bench-dra-aligned
bench-dra-aligned: ## The aligned GPU+HCA claim against the pod's two independent claims, through the scheduler's allocator: CPU per node and the ratio, on nodes where it fits and where it does not.
	$(GO) test -run '^$$' -bench BenchmarkAlignedAllocator -benchtime 100x ./node/dra/
