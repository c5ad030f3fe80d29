// Package attack replays, on loopback, what any pod of a default install can
// send to the admission port, against the real ibkube-webhook binary in a
// memory cgroup with the chart's limit and GOMEMLIMIT, while a legitimate
// review stream and a readiness probe run beside it; and what any tenant
// can create through the API server (envtest's kube-apiserver, calling the
// webhook under the chart's own MutatingWebhookConfiguration), beside a
// stream of legitimate creates. It reports, per attack, the peak memory of
// the cgroup against its limit, the legitimate reviews answered within the
// API server's timeout and their p99, and how often /readyz answered 200.
// It asserts only that the webhook survives; the figures are for
// docs/webhook-operations.md (make bench-webhook-attack).
package attack
