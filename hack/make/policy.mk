# Admission as API server policies (admission.mode policy): webhook/policy,
# its chart copy, and its tests. See docs/admission-policy.md.

##@ Admission policies

.PHONY: policy-chart
policy-chart: ## Regenerate charts/ibkube/files/admission-policy.yaml from webhook/policy.
	$(GO) run ./cmd/ibkube policy --chart-data > $(CHART_DIR)/files/admission-policy.yaml.tmp
	@mv -f $(CHART_DIR)/files/admission-policy.yaml.tmp $(CHART_DIR)/files/admission-policy.yaml

.PHONY: test-chart-policy
test-chart-policy: helm ## The chart's policy mode against the Go renderer for the same values.
	HELM=$(HELM) $(GO) test -count=1 -tags chart ./test/integration/policy/...

.PHONY: test-integration-policy
test-integration-policy: helm envtest-assets ## The chart's policies in a real kube-apiserver admit webhook/mutate's corpus as the Go core does.
	HELM=$(HELM) KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -tags integration -timeout 15m -v -run . ./test/integration/policy/...
TEST_TARGETS += test-chart-policy test-integration-policy

.PHONY: bench-policy
bench-policy: ## CEL cost (per policy and per variable) and evaluation time of the policies for a 16-container pod and the fleet's pod (API server's own evaluator).
	$(GO) test -run '^$$' -bench '^BenchmarkPolicy' -benchtime 50x -count 1 ./webhook/policy
BENCH_TARGETS += bench-policy
