# Observability: HCA port counters, attribution and the idle rule
# (node/counters), the chart's dashboard and alert rules (promtool).

##@ Observability (counters, alerts, dashboard)

COUNTERS_PKG := ./node/counters/

BENCH_TARGETS += bench-counters

.PHONY: bench-counters
bench-counters: ## Counter benchmarks on the ND H100 v5 fixture (9 HCAs): one sysfs reading, reading + scrape, scrape alone.
	$(GO) test -run '^$$' -bench . -benchmem $(COUNTERS_PKG)

# promtool, built from the Go module proxy like the other tools
# (hack/tools/gobuild.sh), checks and unit-tests the chart's alert rules.
PROMETHEUS_VERSION := $(call mod_version,promtool,github.com/prometheus/prometheus)
PROMTOOL           := $(BIN)/promtool

.PHONY: promtool
promtool: ## Build promtool (github.com/prometheus/prometheus v$(PROMETHEUS_VERSION)) into $(PROMTOOL).
	@$(GOBUILD) $(TOOLS_DIR)/promtool $(PROMTOOL) "v$(PROMETHEUS_VERSION)" "promtool v$(PROMETHEUS_VERSION)" "~10 min" -- \
	  -ldflags '-s -w' github.com/prometheus/prometheus/cmd/promtool
$(PROMTOOL): promtool ; @:

tools: promtool

TEST_TARGETS += test-promtool

.PHONY: test-promtool
test-promtool: promtool ## Chart alerts: promtool check rules + test rules with input series; every metric a rule or dashboard panel uses is one the binaries export.
	PROMTOOL=$(PROMTOOL) $(GO) test -count=1 -tags chart,promtool -run 'TestPrometheusRules|TestObservedMetricsAreExported' ./test/chart/
