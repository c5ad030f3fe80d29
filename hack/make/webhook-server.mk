# Webhook server: admission handler, server, ibkube-webhook, and its envtest suite.

WEBHOOK_HANDLER_PKG := ./webhook/handler

FUZZ += webhook/handler/FuzzDecodeAdmissionReview

.PHONY: bench-webhook-handler
bench-webhook-handler: ## Benchmark the admission handler against a no-op controller-runtime defaulter (ratio x-noop).
	$(GO) test -run '^$$' -bench '^BenchmarkAdmission$$' -benchmem -count 1 $(WEBHOOK_HANDLER_PKG)
BENCH_TARGETS += bench-webhook-handler

.PHONY: bench-webhook-attack
bench-webhook-attack: ## Peak heap and RSS of the webhook server under stalled uploads and floods of large reviews (loopback).
	$(GO) test -run '^$$' -bench '^BenchmarkAttack' -benchtime 2x -count 1 ./webhook/server
BENCH_TARGETS += bench-webhook-attack

.PHONY: test-integration-webhook
test-integration-webhook: envtest-assets ## Webhook against a real kube-apiserver + etcd (envtest), with the shipped MutatingWebhookConfiguration.
	KUBEBUILDER_ASSETS=$(ENVTEST_ASSETS) $(GO) test -count=1 -tags integration -timeout 15m ./test/integration/webhook/...
TEST_TARGETS += test-integration-webhook
