# The fleet: hundreds to thousands of simulated GPU nodes (KWOK) against the
# real control plane of the e2e, each node with an ibkube agent's API side
# running for real. See docs/fleet.md.

##@ Fleet (simulated GPU nodes under KWOK)

KWOK_VERSION := $(call mod_version,kwok,sigs.k8s.io/kwok)
KWOK         := $(BIN)/kwok

.PHONY: kwok
kwok: ## Build KWOK v$(KWOK_VERSION) (hack/tools/kwok) into $(KWOK).
	@$(GOBUILD) $(TOOLS_DIR)/kwok $(KWOK) "v$(KWOK_VERSION)" "kwok v$(KWOK_VERSION)" "~4 min" -- \
	  -ldflags '-s -w' sigs.k8s.io/kwok/cmd/kwok
$(KWOK): kwok ; @:

FLEET_DIR     := $(OUTPUT)/fleet
# Nodes of make fleet (FLEET_NODES=5000 for the large run; docs/fleet.md says
# what this machine held); make fleet-smoke runs 20.
FLEET_NODES   ?= 1000
FLEET_TIMEOUT ?= 90m
# Where KWOK's stage files are: its module, as the kwok build downloaded it.
KWOK_STAGES    = $(shell cd $(TOOLS_DIR)/kwok && $(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/stage
FLEET_ENV      = ROOT=$(ROOT) E2E_DIR=$(FLEET_DIR) K8S_BIN=$(K8S_BIN) KWOK=$(KWOK) KWOK_STAGES=$(KWOK_STAGES) BIN=$(BIN)
FLEET_TEST_BIN := $(OUTPUT)/e2e-bin/fleet.test

.PHONY: fleet-tools
fleet-tools: apt-deps kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm $(BIN)/ibkube $(BIN)/ibkube-webhook
	@mkdir -p $(dir $(FLEET_TEST_BIN))
	@$(GO) test -c -tags fleet -o $(FLEET_TEST_BIN) ./test/fleet/

.PHONY: fleet-up
fleet-up: fleet-tools ## Bring the fleet's control plane and KWOK up in netns ibkf (KUBECONFIG=_output/fleet/kubeconfig); no nodes yet.
	@$(FLEET_ENV) $(ROOT)/test/fleet/fleet.sh up

.PHONY: fleet-down
fleet-down: ## Stop the fleet's control plane, KWOK and webhook replicas; delete netns ibkf.
	@$(FLEET_ENV) $(ROOT)/test/fleet/fleet.sh down

# fleet_run NODES SMOKE REPORT [PHASES]: under the e2e lock (one e2e or fleet per
# machine), a fresh control plane, the harness, the control plane down.
define fleet_run
	@exec 9>$(E2E_LOCK); flock 9; \
	  $(FLEET_ENV) $(ROOT)/test/fleet/fleet.sh down >/dev/null 2>&1 || true; \
	  $(FLEET_ENV) $(ROOT)/test/fleet/fleet.sh up || { $(FLEET_ENV) $(ROOT)/test/fleet/fleet.sh down; exit 1; }; \
	  rc=0; cd $(ROOT)/test/fleet && $(FLEET_ENV) FLEET_KUBECONFIG=$(FLEET_DIR)/kubeconfig FLEET_DIR=$(FLEET_DIR) \
	    FLEET_SCRIPT=$(ROOT)/test/fleet/fleet.sh FLEET_REPORT=$(3) FLEET_NODES=$(1) FLEET_SMOKE=$(2) $(if $(4),FLEET_PHASES=$(4)) \
	    FLEET_CHART=$(ROOT)/charts/ibkube HELM=$(HELM) IBKUBE=$(BIN)/ibkube KUBECTL=$(KUBECTL) \
	    $(FLEET_TEST_BIN) -test.v -test.count=1 -test.timeout $(FLEET_TIMEOUT) -test.run '^TestFleet$$' || rc=$$?; \
	  $(FLEET_ENV) $(ROOT)/test/fleet/fleet.sh down; \
	  exit $$rc
endef

.PHONY: fleet
fleet: fleet-tools ## The fleet: FLEET_NODES (1000) KWOK nodes with real agents against the real control plane; report in _output/fleet/report-N.json (docs/fleet.md).
	$(call fleet_run,$(FLEET_NODES),,$(FLEET_DIR)/report-$(FLEET_NODES).json)

.PHONY: fleet-admission
fleet-admission: fleet-tools ## make fleet's admission phase alone, no nodes (~12 min): webhook against policy mode; FLEET_PROFILE=1 adds API server CPU profiles.
	$(call fleet_run,10,,$(FLEET_DIR)/report-admission.json,admission)

.PHONY: fleet-smoke
fleet-smoke: fleet-tools ## make fleet's phases at 20 nodes, shortened (~5 min), checking the goals.
	$(call fleet_run,20,1,$(FLEET_DIR)/report-smoke.json)

# In `make test`: the smoke fleet, ~5 min once the tools are built.
TEST_TARGETS += fleet-smoke

# The plots of docs/fleet.md, drawn by hack/tools/fleetplot (gonum/plot from
# the module proxy) from the reports of make fleet; it prints the table too.
FLEETPLOT := $(BIN)/fleetplot
FLEETPLOT_STAMP = $(shell cat $(TOOLS_DIR)/fleetplot/go.sum $(TOOLS_DIR)/fleetplot/*.go | sha256sum | cut -c1-16)

.PHONY: fleetplot
fleetplot: ## Build the fleet report plotter (hack/tools/fleetplot) into $(FLEETPLOT).
	@$(GOBUILD) $(TOOLS_DIR)/fleetplot $(FLEETPLOT) "$(FLEETPLOT_STAMP)" "fleetplot" "~1 min" -- -ldflags '-s -w' .

.PHONY: fleet-plots
fleet-plots: fleetplot ## Redraw docs/fleet/*.png from _output/fleet/report-*.json and print the table for docs/fleet.md.
	$(FLEETPLOT) -out $(ROOT)/docs/fleet $(filter-out %-smoke.json %-admission.json,$(wildcard $(FLEET_DIR)/report-*.json))
