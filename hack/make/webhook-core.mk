# webhook core: the pure mutation core, its fuzz target, benchmark and the
# offline demo.

FUZZ_TARGETS  += fuzz-webhook-core
BENCH_TARGETS += bench-webhook-core

.PHONY: fuzz-webhook-core
fuzz-webhook-core: ## Fuzz the webhook's mutation core (FuzzMutate) for FUZZTIME.
	$(GO) test -run='^$$' -fuzz='^FuzzMutate$$' -fuzztime=$(FUZZTIME) ./webhook/mutate

.PHONY: bench-webhook-core
bench-webhook-core: ## Benchmark the mutation core on an 8-GPU worker pod.
	$(GO) test -run='^$$' -bench='^Benchmark(Mutate|MutateReadmission|DeepCopy)$$' -benchmem ./webhook/mutate
