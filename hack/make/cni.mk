# Networks area: Multus annotation handling, NAD rendering, the ibkube-cni plugin.
# See docs/networks.md.

##@ Networks (Multus, ibkube-cni)

FUZZ += webhook/multus/FuzzMerge cni/plugin/FuzzParseConfig

# The reference plugins the integration test delegates to (Debian's
# containernetworking-plugins, also among the apt-deps packages of hack/make/tools.mk); idempotent.
CNI_REF_PLUGINS := /usr/lib/cni/macvlan /usr/lib/cni/host-device /usr/lib/cni/host-local

.PHONY: cni-ref-plugins
cni-ref-plugins: ## Install Debian's reference CNI plugins and iproute2 if missing.
	@for f in $(CNI_REF_PLUGINS); do test -x $$f || missing=1; done; command -v ip >/dev/null || missing=1; \
	if [ -n "$${missing:-}" ]; then apt-get update -qq && apt-get install -y -qq containernetworking-plugins iproute2; fi

.PHONY: test-integration-cni
test-integration-cni: cni-ref-plugins ## ibkube-cni ADD/CHECK/DEL via libcni in real netns with Debian's macvlan/host-device (root).
	$(GO) test -count=1 -tags cni_integration ./test/integration/cni/...

.PHONY: bench-cni
bench-cni: ## Benchmark the Multus annotation merge (reports only).
	$(GO) test -run '^$$' -bench . -benchmem ./webhook/multus

BENCH_TARGETS += bench-cni
.PHONY: test-cni-integration
test-cni-integration: # deprecated name, kept for scripts
	@echo "make test-cni-integration is deprecated: it is make test-integration-cni now" >&2
	@$(MAKE) --no-print-directory test-integration-cni

TEST_TARGETS += test-integration-cni
