# ibkube: `make help` lists the targets.
#
# Each area of the project keeps its targets in hack/make/<area>.mk and adds
# its test, bench and tool targets to the lists below, so the areas never edit
# one another's rules. `make test` runs every test CI runs, installing what it
# needs first.

SHELL        := /usr/bin/env bash
.SHELLFLAGS  := -eu -o pipefail -c
.DEFAULT_GOAL := help

ROOT         := $(abspath .)
OUTPUT       := $(ROOT)/_output
BIN          := $(OUTPUT)/bin
GO           ?= go
VERSION      ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS      := -X github.com/ibkube/ibkube/internal/version.Version=$(VERSION)
COMMANDS     := $(notdir $(wildcard cmd/*))
# Fuzz targets run this much each in `make test`: a count of executions, not
# seconds, because on a loaded 2-core machine Go 1.26's fuzz coordinator can
# end a time-bounded run with "context deadline exceeded" while its workers
# are still gathering baseline coverage. Run `make fuzz FUZZTIME=10m` by hand.
FUZZTIME     ?= 20000x

# Each tool the tests build (hack/make/tools.mk) has its own module under
# hack/tools, whose go.mod pins the tool's version, once.
TOOLS_DIR    := $(ROOT)/hack/tools
# mod_version TOOL MODULE: the version (without the v) hack/tools/TOOL/go.mod
# requires of MODULE; the Make values and the rebuild stamps derive from it.
mod_version = $(shell awk '$$1 == "require" && $$2 == "$(2)" { sub(/^v/, "", $$3); print $$3 }' $(TOOLS_DIR)/$(1)/go.mod)

# Filled in by hack/make/*.mk. FUZZ lists fuzz targets as PKG_DIR/FuzzName.
TEST_TARGETS  :=
BENCH_TARGETS :=
FUZZ          :=

include $(sort $(wildcard hack/make/*.mk))

FUZZ_TARGETS := $(addprefix fuzz/,$(FUZZ))

##@ General

# help prints the targets by section: a `##@ Title` line starts one, and a
# file without one gets a section named after it (hack/make/<area>.mk).
# Every $(VAR) in a description is shown with its value.
HELP_VARS = $(sort $(patsubst $$(%),%,$(shell grep -hE '^[a-zA-Z0-9_%/.-]+:.*\#\# ' $(MAKEFILE_LIST) | grep -o '\$$([A-Z_]*)')))
help_escape = $(subst &,\&,$(subst |,\|,$(subst $(ROOT)/,,$(1))))
HELP_SED = $(foreach v,$(HELP_VARS),-e 's|$$($(v))|$(call help_escape,$($(v)))|g')

.PHONY: help
help: ## List the targets, by section, with the values of the variables they name.
	@awk -F':.*## ' ' \
	  FNR == 1 { sect = FILENAME; sub(/.*\//, "", sect); sub(/\.mk$$/, "", sect); if (sect == "Makefile") sect = "General"; shown = 0 } \
	  /^##@ / { sect = substr($$0, 5); shown = 0; next } \
	  /^[a-zA-Z0-9_%\/.-]+:.*## / { if (!shown) { printf "\n%s\n", sect; shown = 1 }; printf "  %-26s %s\n", $$1, $$2 }' \
	  $(MAKEFILE_LIST) | sed $(HELP_SED)

.PHONY: build
build: $(addprefix $(BIN)/,$(COMMANDS)) ## Build every binary under cmd/ into _output/bin.

$(BIN)/%: FORCE
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $@ ./cmd/$*

.PHONY: FORCE
FORCE:

.PHONY: lint
# Every build tag the tree uses, so the code behind them is vetted too (the
# tools tag guards hack/tools helper modules, which vet in their own modules).
VET_TAGS := integration,e2e,chart,cni_integration,promtool,fleet

# staticcheck runs every check (staticcheck.conf says why) over the files of
# every build tag at once (no file is excluded by a tag). deadcode looks for
# functions no binary under cmd/ can reach: code only tests call is dead too,
# except in contract, whose facts the chart's YAML also holds and tests tie
# the chart to (DeviceClassSelector): there a test is a rightful reader.
lint: staticcheck deadcode ## gofmt, go vet, staticcheck, deadcode (every test build tag), and make help without unexpanded values.
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags '$(VET_TAGS)' ./...
	$(STATICCHECK) -tags '$(VET_TAGS)' ./...
	@out=$$($(DEADCODE) ./cmd/...); out=$$(printf '%s' "$$out" | grep -v '^contract/' || true); if [ -n "$$out" ]; then echo "$$out"; \
	  echo "deadcode: the functions above are unreachable from every binary under cmd/; delete them (a function only tests call is dead too)"; exit 1; fi
	@if $(MAKE) -s --no-print-directory help | grep -F '$$('; then echo "make help shows an unexpanded variable (above)"; exit 1; fi

.PHONY: unit
unit: ## Unit tests (go test ./... without the integration and e2e suites), and the fleet harness's own.
	$(GO) test -count=1 ./...
	$(GO) test -count=1 -tags fleet -skip '^TestFleet$$' ./test/fleet/

.PHONY: fuzz
fuzz: $(FUZZ_TARGETS) ## Every fuzz target for FUZZTIME each (the list: make -s list-fuzz).

# A pattern rule is never looked up for a .PHONY target, so FORCE keeps it
# running every time instead.
fuzz/%: FORCE ## One fuzz target for FUZZTIME, e.g. make fuzz/hca/discovery/FuzzParseRate FUZZTIME=10m.
	$(GO) test -run '^$$' -fuzz '^$(notdir $*)$$' -fuzztime=$(FUZZTIME) ./$(patsubst %/,%,$(dir $*))

.PHONY: list-fuzz
list-fuzz: ## The fuzz targets make fuzz and make test run.
	@printf '%s\n' $(FUZZ_TARGETS)

# Every package whose tests compare with goldens (internal/testing/golden);
# listed when the target runs, not at each make call. The chart's renders
# (test/chart, build tag chart) need helm: make update-golden-chart.
GOLDEN_PKGS = $(shell $(GO) list -f '{{.ImportPath}}{{range .TestImports}} {{.}}{{end}}{{range .XTestImports}} {{.}}{{end}}' ./... | \
  awk '/ github.com\/ibkube\/ibkube\/internal\/testing\/golden( |$$)/ { print $$1 }')

.PHONY: update-golden
update-golden: ## Rewrite every golden file the Go code renders (go test -update), building nothing; the chart's: make update-golden-chart. Review the diff.
	$(GO) test -count=1 $(GOLDEN_PKGS) -args -update

.PHONY: test
test: lint unit $(FUZZ_TARGETS) $(TEST_TARGETS) ## Every test CI runs (installs what the tests need).

.PHONY: bench
bench: $(BENCH_TARGETS) ## Benchmarks; they report figures, they never fail on time.

.PHONY: clean
clean: ## Remove _output (built binaries, tools, reports).
	rm -rf $(OUTPUT)
