# webhook core: the pure mutation core, its fuzz target, benchmark and the
# offline demo.

##@ Webhook core

FUZZ          += webhook/mutate/FuzzMutate
BENCH_TARGETS += bench-webhook-core

.PHONY: bench-webhook-core
bench-webhook-core: ## Benchmark the mutation core on an 8-GPU worker pod.
	$(GO) test -run='^$$' -bench='^Benchmark(Mutate|MutateReadmission|DeepCopy)$$' -benchmem ./webhook/mutate

DEMO_EXAMPLES ?= $(sort $(wildcard examples/*.yaml))

.PHONY: demo-offline
demo-offline: $(BIN)/ibkube ## Run `ibkube inject` on the bundled examples/ and print each before and after (no cluster needed).
	@for f in $(DEMO_EXAMPLES); do \
	  printf '\n\033[1m===== %s: before =====\033[0m\n' "$$f"; cat "$$f"; \
	  printf '\n\033[1m===== %s: after `ibkube inject -f %s` =====\033[0m\n' "$$f" "$$f"; \
	  $(BIN)/ibkube inject -f "$$f"; \
	done
	@printf '\n\033[1m===== a refusal (typo in the mode) =====\033[0m\n'
	@sed 's/rdma-shared/rdma-shard/' examples/pod-hb-mpi.yaml | $(BIN)/ibkube inject -f - && exit 1 || true

.PHONY: test-integration-affinity
test-integration-affinity: envtest-assets kube-scheduler ## The job affinity on the real kube-scheduler: a pod copying a job's name neither splits nor starves it.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) KUBE_SCHEDULER=$(KUBE_SCHEDULER) \
	  $(GO) test -count=1 -tags integration -run '^TestSchedulerDecoy$$' -v ./webhook/mutate
TEST_TARGETS += test-integration-affinity
