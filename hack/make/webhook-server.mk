# Webhook server: admission handler, server, ibkube-webhook, and its envtest suite.

##@ Webhook server

WEBHOOK_HANDLER_PKG := ./webhook/handler

FUZZ += webhook/handler/FuzzDecodeAdmissionReview
FUZZ += webhook/handler/FuzzElementCount
FUZZ += webhook/handler/FuzzCountValues

.PHONY: bench-webhook-handler
bench-webhook-handler: ## Benchmark the admission handler against a no-op controller-runtime defaulter (ratio x-noop), and the costliest pod it admits.
	$(GO) test -run '^$$' -bench '^(BenchmarkAdmission|BenchmarkLargestAdmittedPod)$$' -benchmem -count 1 $(WEBHOOK_HANDLER_PKG)
BENCH_TARGETS += bench-webhook-handler

ATTACK_SECONDS ?= 8
ATTACK_ONLY ?=

.PHONY: bench-webhook-attack
bench-webhook-attack: envtest-assets ## The real ibkube-webhook in a 256 MiB memory cgroup (root, cgroup v1) under floods of forged reviews, slow bodies, connection floods, list floods and echo amplification, a legitimate review stream beside it (loopback; ATTACK_SECONDS per attack, default 8; ATTACK_ONLY, a regular expression, picks attacks by name).
	$(GO) build -o $(OUTPUT)/bench/ibkube-webhook ./cmd/ibkube-webhook
	IBKUBE_WEBHOOK_BIN=$(OUTPUT)/bench/ibkube-webhook ATTACK_REPORT=$(OUTPUT)/reports/webhook-attack.md ATTACK_SECONDS=$(ATTACK_SECONDS) ATTACK_ONLY='$(ATTACK_ONLY)' \
		KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -tags integration -timeout 20m -v -run '^TestAttacks$$' ./test/attack/
BENCH_TARGETS += bench-webhook-attack

.PHONY: test-integration-webhook
test-integration-webhook: envtest-assets ## Webhook against a real kube-apiserver + etcd (envtest), with the shipped MutatingWebhookConfiguration.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -tags integration -timeout 15m ./test/integration/webhook/...
TEST_TARGETS += test-integration-webhook
