# Discovery (hca/discovery) and fixture trees (hca/fixture).

##@ Discovery and fixtures

DISCOVERY_PKG := ./hca/discovery/

# Every sysfs value parser at once; one alone: make fuzz/hca/discovery/FuzzParseRate.
FUZZ          += hca/discovery/FuzzSysfsValue
BENCH_TARGETS += bench-discovery

.PHONY: bench-discovery
bench-discovery: ## Discovery benchmarks on the ND H100 v5 fixture: a full Scan, one port poll (CPU per poll, share of a core at 500 ms), port change to Watch hint.
	$(GO) test -run '^$$' -bench . -benchmem $(DISCOVERY_PKG)

.PHONY: fixtures
fixtures: ## Regenerate hca/fixture/testdata/*.tree from hca/fixture/internal/hosts.
	$(GO) run ./hca/fixture/internal/gen hca/fixture/testdata
