# Networks area: Multus annotation handling, NAD rendering, the ibkube-cni plugin.
# See docs/networks.md.

.PHONY: fuzz-cni-multus
fuzz-cni-multus: ## Fuzz the Multus network-annotation merge for FUZZTIME.
	$(GO) test -run '^$$' -fuzz '^FuzzMerge$$' -fuzztime $(FUZZTIME) ./cni/multus

FUZZ_TARGETS += fuzz-cni-multus
