# The host check: ibkube node, doctor and the slices preview on this host,
# and where a GPU and PyTorch's NCCL are present, a real NCCL reading the
# conf files the node agent writes (as root and as a non-root rank).
# See docs/node-agent.md, "Host check".

##@ Host check

HOST_CHECK_OUT     ?= $(OUTPUT)/host-check
HOST_CHECK_TIMEOUT ?= 300

.PHONY: host-check
host-check: ## ibkube node/doctor/slices here, and a real NCCL reading the agent's conf files where a GPU is present; output in $(HOST_CHECK_OUT), at most $(HOST_CHECK_TIMEOUT) s.
	@mkdir -p $(BIN) $(HOST_CHECK_OUT)
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ibkube ./cmd/ibkube
	$(GO) build -o $(BIN)/hostcheck ./hack/hostcheck
	OUT=$(HOST_CHECK_OUT) IBKUBE=$(BIN)/ibkube HOSTCHECK=$(BIN)/hostcheck timeout $(HOST_CHECK_TIMEOUT) hack/host-check.sh
