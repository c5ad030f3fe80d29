# Node agent (node/{config,resource,deviceplugin,agent}, hca/selector,
# cmd/ibkube-node-agent, ibkube node). See docs/node-agent.md.

##@ Node agent

AGENT_PKGS       := ./node/config/... ./hca/selector/... ./node/resource/... \
                    ./node/deviceplugin/... ./node/agent/... ./cmd/ibkube-node-agent/...
AGENT_BENCH_PKGS := ./node/resource/ ./node/deviceplugin/ ./node/agent/ ./cmd/ibkube-node-agent/

BENCH_TARGETS += bench-agent

.PHONY: test-agent
test-agent: ## Node agent unit tests (config, selectors, model, kubelet-stub server, agent, ibkube node goldens).
	$(GO) test -count=1 $(AGENT_PKGS) ./cmd/ibkube/

.PHONY: bench-agent
bench-agent: ## Node agent benchmarks: Allocate latency, port-down to Unhealthy through the port poll, kubelet restart to re-registration, agent RSS.
	$(GO) test -run '^$$' -bench . -benchmem $(AGENT_BENCH_PKGS)

FUZZ += node/config/FuzzParse
