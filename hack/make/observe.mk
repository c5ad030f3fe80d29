# Observability: HCA port counters, attribution and the idle rule
# (deviceplugin/counters), the chart's dashboard and alert rules (promtool).

COUNTERS_PKG := ./deviceplugin/counters/

BENCH_TARGETS += bench-counters

.PHONY: bench-counters
bench-counters: ## Counter benchmarks on the ND H100 v5 fixture (9 HCAs): one sysfs reading, reading + scrape, scrape alone.
	$(GO) test -run '^$$' -bench . -benchmem $(COUNTERS_PKG)
