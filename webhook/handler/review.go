package handler

import (
	"encoding/json"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
)

// The admission.k8s.io versions the handler answers. v1beta1 has the same JSON
// shape as v1; the response echoes the version the request came in.
const (
	admissionV1      = "admission.k8s.io/v1"
	admissionV1beta1 = "admission.k8s.io/v1beta1"
	kindReview       = "AdmissionReview"
)

// review is the part of an AdmissionReview the handler reads. Fields it does not
// need (userInfo, oldObject, options) are skipped by the decoder instead of being
// built, and the object stays raw bytes until the handler knows it is a pod CREATE,
// so a pod is decoded exactly once and anything else is never decoded at all.
type review struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Request    *reviewRequest `json:"request"`
}

type reviewRequest struct {
	UID         types.UID                   `json:"-"` // from uid, once decodeReview has checked it
	RawUID      uidField                    `json:"uid"`
	Kind        metav1.GroupVersionKind     `json:"kind"`
	Resource    metav1.GroupVersionResource `json:"resource"`
	SubResource string                      `json:"subResource"`
	Name        string                      `json:"name"`
	Namespace   string                      `json:"-"` // from namespace, once decodeReview has checked its length
	RawNS       namespaceField              `json:"namespace"`
	Operation   admissionv1.Operation       `json:"operation"`
	DryRun      *bool                       `json:"dryRun"`
	Object      rawObject                   `json:"object"`
	// values counts the JSON values of the whole review (countValues).
	values int
}

// rawObject is a JSON value kept as the bytes of the body it came in,
// not copied: the body outlives the request's decision, and a review of
// 4 MiB is not held twice. (json.RawMessage copies.)
type rawObject []byte

func (r *rawObject) UnmarshalJSON(b []byte) error {
	*r = b
	return nil
}

// boundedText is a JSON string decoded only when its text could hold at
// most max bytes (each byte at most 6 bytes of text, `\u00XX`): a forged
// review of megabytes in a field the API server fills with a few dozen
// bytes is refused whole, and copying them into a string first doubled
// what such a review held. textLen is the text's length, without its
// quotes, when it is too long to decode.
type boundedText struct {
	s       string
	textLen int
}

func (t *boundedText) decode(b []byte, max int, field string) error {
	if len(b) > 6*max+2 {
		t.textLen = len(b) - 2
		return nil
	}
	if err := json.Unmarshal(b, &t.s); err != nil {
		return fmt.Errorf("request %s: %w", field, err)
	}
	return nil
}

// len is the string's length, or its text's when it was not decoded.
func (t boundedText) len() int { return max(len(t.s), t.textLen) }

// uidField is the request's uid (maxUIDBytes).
type uidField struct{ boundedText }

func (u *uidField) UnmarshalJSON(b []byte) error { return u.decode(b, maxUIDBytes, "uid") }

// namespaceField is the request's namespace, a DNS-1123 label.
type namespaceField struct{ boundedText }

func (n *namespaceField) UnmarshalJSON(b []byte) error {
	return n.decode(b, validation.DNS1123LabelMaxLength, "namespace")
}

// errBadReview marks a request body that is not an AdmissionReview the handler
// can answer; the HTTP layer turns it into 400.
var errBadReview = errors.New("bad AdmissionReview")

// decodeReview decodes the envelope of an AdmissionReview request and checks the
// fields every answer needs.
func decodeReview(body []byte) (*review, error) {
	var r review
	// Case-sensitive like the API server itself, so "Object" is not "object".
	if err := kjson.UnmarshalCaseSensitivePreserveInts(body, &r); err != nil {
		return nil, fmt.Errorf("%w: decode: %w", errBadReview, err)
	}
	if r.Kind != kindReview || (r.APIVersion != admissionV1 && r.APIVersion != admissionV1beta1) {
		return nil, fmt.Errorf("%w: got apiVersion %q kind %q, want %s or %s %s",
			errBadReview, clip(r.APIVersion), clip(r.Kind), admissionV1, admissionV1beta1, kindReview)
	}
	if r.Request == nil {
		return nil, fmt.Errorf("%w: no request", errBadReview)
	}
	r.Request.UID, r.Request.Namespace = types.UID(r.Request.RawUID.s), r.Request.RawNS.s
	if r.Request.RawUID.len() == 0 {
		return nil, fmt.Errorf("%w: request has no uid", errBadReview)
	}
	if n := r.Request.RawNS.textLen; n > 0 {
		return nil, fmt.Errorf("%w: request namespace of %d bytes; accepted: a DNS-1123 label, at most %d characters", errBadReview, n, validation.DNS1123LabelMaxLength)
	}
	if n := r.Request.RawUID.len(); n > maxUIDBytes {
		return nil, fmt.Errorf("%w: request uid of %d bytes; accepted: at most %d (the API server sends a 36-byte UUID)", errBadReview, n, maxUIDBytes)
	}
	r.Request.values = countValues(body)
	return &r, nil
}

// reviewResponse is what the handler writes back.
type reviewResponse struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Response   *admissionv1.AdmissionResponse `json:"response"`
}

func encodeResponse(apiVersion string, resp *admissionv1.AdmissionResponse) ([]byte, error) {
	out, err := json.Marshal(reviewResponse{APIVersion: apiVersion, Kind: kindReview, Response: resp})
	if err != nil {
		return nil, fmt.Errorf("encode AdmissionReview response: %w", err)
	}
	return out, nil
}

func allowed(uid types.UID) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{UID: uid, Allowed: true}
}

func denied(uid types.UID, msg string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		UID:     uid,
		Allowed: false,
		Result: &metav1.Status{
			Status:  metav1.StatusFailure,
			Code:    403,
			Reason:  metav1.StatusReasonForbidden,
			Message: msg,
		},
	}
}
