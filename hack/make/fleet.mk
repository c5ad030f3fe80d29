# The fleet: hundreds to thousands of simulated GPU nodes (KWOK) against the
# real control plane of the e2e, each node with an ibkube agent's API side
# running for real. See docs/fleet.md.

KWOK_VERSION := $(call mod_version,kwok,sigs.k8s.io/kwok)
KWOK         := $(BIN)/kwok

.PHONY: kwok
kwok: ## Build KWOK v$(KWOK_VERSION) (hack/tools/kwok) into $(KWOK).
	@$(GOBUILD) $(TOOLS_DIR)/kwok $(KWOK) "v$(KWOK_VERSION)" "kwok v$(KWOK_VERSION)" "~4 min" -- \
	  -ldflags '-s -w' sigs.k8s.io/kwok/cmd/kwok
$(KWOK): kwok ; @:
