# Discovery (hca/discovery) and fixture trees (hca/fixture).

DISCOVERY_PKG := ./hca/discovery/

FUZZ_TARGETS  += fuzz-discovery
BENCH_TARGETS += bench-discovery

.PHONY: fuzz-discovery
fuzz-discovery: ## Fuzz every sysfs value parser at once for FUZZTIME.
	$(GO) test -run '^$$' -fuzz '^FuzzSysfsValue$$' -fuzztime=$(FUZZTIME) $(DISCOVERY_PKG)

.PHONY: fuzz-discovery-%
fuzz-discovery-%: ## Fuzz one sysfs parser for FUZZTIME, e.g. make fuzz-discovery-ParseRate FUZZTIME=10m.
	$(GO) test -run '^$$' -fuzz '^Fuzz$*$$' -fuzztime=$(FUZZTIME) $(DISCOVERY_PKG)

.PHONY: bench-discovery
bench-discovery: ## Discovery benchmarks on the ND H100 v5 fixture: a full Scan, one port poll (CPU per poll, share of a core at 500 ms), port change to Watch hint.
	$(GO) test -run '^$$' -bench . -benchmem $(DISCOVERY_PKG)

.PHONY: fixtures
fixtures: ## Regenerate hca/fixture/testdata/*.tree from hca/fixture/internal/hosts.
	$(GO) run ./hca/fixture/internal/gen hca/fixture/testdata

.PHONY: update-discovery-golden
update-discovery-golden: ## Rewrite hca/discovery/testdata/*.golden.json (review the diff).
	$(GO) test -count=1 -run TestScanFixtures $(DISCOVERY_PKG) -update
