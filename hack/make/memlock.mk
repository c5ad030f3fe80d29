# Memlock decisions (node/memlock), the NRI plugin (node/nri) and the node doctor (node/doctor).
# See docs/memlock.md.

##@ Memlock, NRI and doctor

MEMLOCK_INTEGRATION_TIMEOUT ?= 15m

.PHONY: test-integration-memlock
test-integration-memlock: containerd apt-deps ## NRI memlock plugin against a real containerd 2.x + runc started by the test (root).
	CONTAINERD_BIN=$(CONTAINERD_BIN) $(GO) test -count=1 -tags integration -timeout $(MEMLOCK_INTEGRATION_TIMEOUT) -v ./test/integration/memlock/...
TEST_TARGETS += test-integration-memlock

FUZZ += node/memlock/FuzzParseValue

.PHONY: bench-imagefs
bench-imagefs: ## Reading an image's /etc/passwd as the NRI plugin does at CreateContainer: a five-layer snapshot, and the worst images by depth and layers (CPU and heap of one lookup).
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 20x ./node/imagefs/
BENCH_TARGETS += bench-imagefs

FUZZ += node/imagefs/FuzzUnionReadFile
