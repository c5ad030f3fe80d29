// Package handler is the admission HTTP handler around the pure mutation core
// (webhook/mutate): it decodes the AdmissionReview once, reads the namespace
// through a cache, calls mutate.Mutate, and answers with the core's own JSON
// patch operations, so the pod is never marshalled and diffed as a whole.
package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/semaphore"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kjson "sigs.k8s.io/json"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/webhook/config"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// Path is where the API server sends pod admission requests.
const Path = "/mutate-v1-pod"

// MaxBodyBytes bounds a request body. The API server refuses write requests
// over 3 MiB (MaxRequestBodyBytes = 3 * 1024 * 1024 in k8s.io/apiserver
// pkg/server/config.go, NewConfig), and an AdmissionReview for a pod CREATE
// carries that object once (oldObject is null); 1 MiB more covers the
// envelope (uid, kind, userInfo with its groups and extra, options). A body
// over this can never come from the API server for a pod CREATE, so it is
// refused before it is read in full.
const MaxBodyBytes = 4 << 20

// Options configure a Handler.
type Options struct {
	// Config returns the current configuration (it changes when the file is
	// re-read). Required.
	Config func() *config.Config
	// Namespaces reads namespace metadata. Required.
	Namespaces NamespaceLookup
	// Networks checks that the NetworkAttachmentDefinition a pod needs exists.
	// Nil turns the check off.
	Networks NetworkLookup
	// ReleaseNamespace is the namespace ibkube runs in; its pods are never
	// mutated (nor kube-system's).
	ReleaseNamespace string
	// Metrics records counts and latency; nil records nothing.
	Metrics *Metrics
	Log     logr.Logger
	// Mutate is the core; nil means mutate.Mutate. Tests put stand-ins here.
	Mutate func(*corev1.Pod, mutate.Namespace, *config.Config) (mutate.Result, error)
}

// decodeBytesPerValue is what decoding and mutating a pod allocates per
// JSON value of its review, at most: the costliest pod admitted
// (MaxReviewValues empty volumes) allocates 10.3 MB through the real core
// (BenchmarkLargestAdmittedPod), 1,260 bytes a value.
const decodeBytesPerValue = 1280

// MaxDecodeBytes bounds what the pods being decoded and mutated at once may
// allocate, each estimated before it is decoded as its object's bytes (the
// decoder copies strings out of them) and decodeBytesPerValue for each of
// its review's values: one costliest pod at a time (10.5 MB), and real pods
// beside it (the 8-GPU worker's review, 174 values, 225 KB). A pod waits in
// line for its share up to decodeWait.
const MaxDecodeBytes = 12 << 20

// decodeWait is how long a pod waits for its share of MaxDecodeBytes: the
// chart's timeoutSeconds, after which the API server has given up on the
// call anyway.
const decodeWait = 5 * time.Second

// Handler answers AdmissionReview requests for pods. It is an http.Handler so
// that decoding and encoding stay in its own hands (see the package comment).
type Handler struct {
	opts     Options
	decoding *semaphore.Weighted
}

// New returns a Handler.
func New(opts Options) (*Handler, error) {
	if opts.Config == nil {
		return nil, errors.New("handler: Options.Config is required")
	}
	if opts.Namespaces == nil {
		return nil, errors.New("handler: Options.Namespaces is required")
	}
	if opts.Mutate == nil {
		opts.Mutate = mutate.Mutate
	}
	return &Handler{opts: opts, decoding: semaphore.NewWeighted(MaxDecodeBytes)}, nil
}

// httpError is an answer the API server sees as a failed call, so the webhook
// configuration's failurePolicy decides, instead of a denial.
type httpError struct {
	code int
	err  error
}

func (e *httpError) Error() string { return e.err.Error() }
func (e *httpError) Unwrap() error { return e.err }

// outcome is what one request came to, for metrics and logs.
type outcome struct {
	mode, result string
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	out, apiVersion, resp, err := h.serve(w, r)
	log := h.opts.Log
	if err != nil {
		var he *httpError
		code := http.StatusInternalServerError
		if errors.As(err, &he) {
			code = he.code
		}
		log.Error(err, "admission request failed", "code", code)
		http.Error(w, err.Error(), code)
		h.opts.Metrics.observe(out.mode, OutcomeError, time.Since(start))
		return
	}
	body, err := encodeResponse(apiVersion, resp)
	if err != nil {
		log.Error(err, "admission response")
		http.Error(w, err.Error(), http.StatusInternalServerError)
		h.opts.Metrics.observe(out.mode, OutcomeError, time.Since(start))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if _, err := w.Write(body); err != nil {
		log.V(1).Info("write admission response", "err", err.Error())
	}
	h.opts.Metrics.observe(out.mode, out.result, time.Since(start))
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) (outcome, string, *admissionv1.AdmissionResponse, error) {
	out := outcome{mode: modeNone, result: OutcomeSkipped}
	if r.Method != http.MethodPost {
		return out, "", nil, &httpError{http.StatusMethodNotAllowed, fmt.Errorf("method %s not allowed, use POST", clip(r.Method))}
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		return out, "", nil, &httpError{http.StatusUnsupportedMediaType, fmt.Errorf("content type %q, want application/json", clip(ct))}
	}
	if r.ContentLength > MaxBodyBytes {
		return out, "", nil, tooLarge()
	}
	// The declared length only refuses early: the buffer grows with what
	// really arrives, so a client announcing 4 MiB and sending 10 bytes costs
	// 10 bytes.
	body, err := readBody(w, r)
	if _, over := errors.AsType[*http.MaxBytesError](err); over {
		return out, "", nil, tooLarge()
	}
	if err != nil {
		return out, "", nil, &httpError{http.StatusBadRequest, fmt.Errorf("read request body: %w", err)}
	}
	rev, err := decodeReview(body)
	if err != nil {
		return out, "", nil, &httpError{http.StatusBadRequest, err}
	}
	out, resp, err := h.admit(r.Context(), rev.Request)
	return out, rev.APIVersion, resp, err
}

// admit decides one request.
func (h *Handler) admit(ctx context.Context, req *reviewRequest) (outcome, *admissionv1.AdmissionResponse, error) {
	out := outcome{mode: modeNone, result: OutcomeSkipped}
	ns, in, err := h.optedIn(ctx, req)
	if err != nil {
		return out, nil, err
	}
	if !in {
		return out, allowed(req.UID), nil
	}
	head, err := readHead(req.Object)
	if err != nil {
		return out, nil, &httpError{http.StatusBadRequest, fmt.Errorf("AdmissionReview %s: %w", req.UID, err)}
	}
	if err := checkPodNamespace(head, req); err != nil {
		return out, nil, err
	}
	// A pod ibkube does not look at comes out of the core unchanged: it is
	// answered from its head, whatever the rest of it holds.
	if !head.Metadata.Annotations.relevant(ns) {
		return out, allowed(req.UID), nil
	}
	if refusal := workRefusal(head, req.values); refusal != "" {
		out.mode, out.result = modeLabel(mutate.Result{}, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: head.Metadata.Annotations.own}}), OutcomeRefused
		h.opts.Log.Info("pod refused", "uid", req.UID, "namespace", req.Namespace, "pod", clip(req.Name), "reason", refusal)
		return out, denied(req.UID, refusal), nil
	}
	release, err := h.reserveDecode(ctx, req)
	if err != nil {
		return out, nil, err
	}
	defer release()
	pod, err := decodePod(req)
	if err != nil {
		return out, nil, err
	}
	log := h.opts.Log.WithValues("uid", req.UID, "namespace", req.Namespace, "pod", podName(pod, req))

	cfg := h.opts.Config()
	res, err := h.opts.Mutate(pod, ns, cfg)
	out.mode = modeLabel(res, pod)
	if err != nil {
		var refusal *mutate.Refusal
		if errors.As(err, &refusal) {
			out.result = OutcomeRefused
			log.Info("pod refused", "reason", refusal.Error())
			return out, denied(req.UID, refusal.Error()), nil
		}
		return out, nil, &httpError{http.StatusInternalServerError, fmt.Errorf("mutate pod: %w", err)}
	}
	return h.answer(ctx, req, pod, res, cfg, out, log)
}

// answer turns a mutation into the response: refused when the pod's
// networks do not hold what it needs, else the patch (or none).
func (h *Handler) answer(ctx context.Context, req *reviewRequest, pod *corev1.Pod, res mutate.Result, cfg *config.Config, out outcome, log logr.Logger) (outcome, *admissionv1.AdmissionResponse, error) {
	if h.opts.Networks != nil {
		msg, err := h.checkNetworks(ctx, pod, res, cfg)
		if err != nil {
			return out, nil, &httpError{http.StatusInternalServerError, err}
		}
		if msg != "" {
			out.result = OutcomeRefused
			log.Info("pod refused", "reason", msg)
			return out, denied(req.UID, msg), nil
		}
	}
	resp, err := patched(req.UID, res)
	if err != nil {
		return out, nil, err
	}
	out.result = OutcomeUnchanged
	if resp.Patch != nil {
		out.result = OutcomeInjected
		log.V(1).Info("pod mutated", "mode", out.mode, "ops", len(res.Patch))
	}
	return out, resp, nil
}

// optedIn says whether the request is a pod create in a namespace that
// opted in, with that namespace; anything else is allowed untouched.
func (h *Handler) optedIn(ctx context.Context, req *reviewRequest) (mutate.Namespace, bool, error) {
	if !isPodCreate(req) || h.protected(req.Namespace) {
		return mutate.Namespace{}, false, nil
	}
	// The API server only sends real namespace names; anything else is a
	// forged review, answered before any lookup is made with it.
	if err := checkNamespaceName(req.Namespace); err != nil {
		return mutate.Namespace{}, false, &httpError{http.StatusBadRequest, fmt.Errorf("AdmissionReview %s: %w", req.UID, err)}
	}
	ns, err := h.opts.Namespaces.Namespace(ctx, req.Namespace)
	if err != nil {
		return mutate.Namespace{}, false, &httpError{http.StatusInternalServerError, err}
	}
	// The webhook configuration's namespaceSelector matches the opt-in label
	// already; checked again so a misconfigured selector never mutates a
	// namespace that did not opt in.
	return ns, ns.Labels[contract.LabelInject] == contract.InjectEnabled, nil
}

// reserveDecode waits in line for req's share of MaxDecodeBytes;
// release gives it back.
func (h *Handler) reserveDecode(ctx context.Context, req *reviewRequest) (release func(), err error) {
	n := min(int64(len(req.Object))+int64(req.values)*decodeBytesPerValue, MaxDecodeBytes)
	ctx, cancel := context.WithTimeout(ctx, decodeWait)
	defer cancel()
	if err := h.decoding.Acquire(ctx, n); err != nil {
		return nil, &httpError{http.StatusServiceUnavailable, fmt.Errorf("AdmissionReview %s: pods being decoded hold %d bytes, none freed within %s: %w",
			req.UID, MaxDecodeBytes, decodeWait, err)}
	}
	return func() { h.decoding.Release(n) }, nil
}

// checkPodNamespace refuses a pod whose own namespace differs from the
// request's: the API server refuses such a pod itself (the namespace of
// the object must match the request's), and a forged review must not steer
// the network lookup into another namespace.
func checkPodNamespace(head *podHead, req *reviewRequest) error {
	if ns := head.Metadata.Namespace; ns != "" && ns != req.Namespace {
		return &httpError{http.StatusBadRequest, fmt.Errorf("AdmissionReview %s: pod namespace %q differs from the request's %q",
			req.UID, clip(ns), req.Namespace)}
	}
	return nil
}

// decodePod decodes the request's pod, in the request's namespace
// (checkPodNamespace has checked its own).
func decodePod(req *reviewRequest) (*corev1.Pod, error) {
	var pod corev1.Pod
	if err := kjson.UnmarshalCaseSensitivePreserveInts(req.Object, &pod); err != nil {
		return nil, &httpError{http.StatusBadRequest, fmt.Errorf("decode pod in AdmissionReview %s: %w", req.UID, err)}
	}
	if pod.Namespace == "" {
		// Pods created through a namespaced POST often leave it empty; the
		// core resolves networks relative to it.
		pod.Namespace = req.Namespace
	}
	return &pod, nil
}

// patched is the allowed response for a mutation: its warnings, and its
// JSON patch when it changes anything.
func patched(uid types.UID, res mutate.Result) (*admissionv1.AdmissionResponse, error) {
	resp := allowed(uid)
	resp.Warnings = res.Warnings
	if len(res.Patch) == 0 {
		return resp, nil
	}
	patch, err := json.Marshal(res.Patch)
	if err != nil {
		return nil, &httpError{http.StatusInternalServerError, fmt.Errorf("encode patch: %w", err)}
	}
	pt := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &pt
	return resp, nil
}

func isPodCreate(req *reviewRequest) bool {
	return req.Operation == admissionv1.Create &&
		req.Kind.Group == "" && req.Kind.Kind == "Pod" &&
		req.SubResource == ""
}

func (h *Handler) protected(namespace string) bool {
	return namespace == "" || namespace == "kube-system" || namespace == h.opts.ReleaseNamespace
}

func podName(pod *corev1.Pod, req *reviewRequest) string {
	switch {
	case pod.Name != "":
		return clip(pod.Name)
	case req.Name != "":
		return clip(req.Name)
	default:
		return clip(pod.GenerateName) + "*"
	}
}

// readBody is the request body, taken as is when the server read it in
// full already (its Bytes), else read here within MaxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if b, ok := r.Body.(interface{ Bytes() []byte }); ok && len(b.Bytes()) <= MaxBodyBytes {
		return b.Bytes(), nil
	}
	return io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
}

func tooLarge() error {
	return &httpError{http.StatusRequestEntityTooLarge,
		fmt.Errorf("request body over %d bytes: the API server sends at most one 3 MiB object plus its envelope", MaxBodyBytes)}
}
