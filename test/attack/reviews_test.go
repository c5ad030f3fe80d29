//go:build integration

package attack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/ibkube/ibkube/internal/testing/floods"
	"github.com/ibkube/ibkube/webhook/handler"
	"github.com/ibkube/ibkube/webhook/mutate"
)

// review wraps a pod object (JSON) in an AdmissionReview for a CREATE in
// namespace training; uid, namespace and name are what a forger sets.
func review(object []byte, uid, namespace, name string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":%q,`+
		`"kind":{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},`+
		`"requestKind":{"group":"","version":"v1","kind":"Pod"},"name":%q,"namespace":%q,"operation":"CREATE",`+
		`"userInfo":{"username":"system:serviceaccount:kubeflow:training-operator","groups":["system:serviceaccounts","system:authenticated"]},"object":`,
		uid, name, namespace)
	b.Write(object)
	b.WriteString(`,"oldObject":null,"dryRun":false,"options":{"kind":"CreateOptions","apiVersion":"meta.k8s.io/v1"}}}`)
	return b.Bytes()
}

// workerPod is a PyTorchJob worker as the API server sends it (defaulted),
// asking rdma-exclusive and IPoIB with 8 GPUs: the legitimate stream.
func workerPod() []byte {
	return []byte(`{"metadata":{"generateName":"llama-pretrain-worker-","namespace":"training",` +
		`"labels":{"training.kubeflow.org/job-name":"llama-pretrain","training.kubeflow.org/replica-type":"worker"},` +
		`"annotations":{"infiniband.azure.com/mode":"rdma-exclusive,ipoib","infiniband.azure.com/profile":"ndv5"}},` +
		`"spec":{"containers":[{"name":"pytorch","image":"nvcr.io/nvidia/pytorch:24.05-py3","command":["torchrun"],` +
		`"resources":{"limits":{"nvidia.com/gpu":"8"},"requests":{"nvidia.com/gpu":"8"}},` +
		`"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}],` +
		`"restartPolicy":"Never","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","schedulerName":"default-scheduler",` +
		`"securityContext":{},"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority","priority":0}}`)
}

// widePod is a pod of n containers. Minimal containers ("{}") are the
// cheapest forged request per container; defaulted ones are what the API
// server sends for a pod created with only names and images.
func widePod(n int, defaulted bool) []byte {
	var b bytes.Buffer
	b.WriteString(`{"metadata":{"name":"wide","namespace":"training","annotations":{"infiniband.azure.com/mode":"rdma-shared"}},"spec":{"containers":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		if defaulted {
			fmt.Fprintf(&b, `{"name":"c%d","image":"busybox","resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"Always"}`, i)
		} else {
			b.WriteString("{}")
		}
	}
	b.WriteString(`]}}`)
	return b.Bytes()
}

// containersFor is the most containers whose review stays within size
// bytes.
func containersFor(size int, defaulted bool) int {
	per := len(widePod(2, defaulted)) - len(widePod(1, defaulted))
	n := (size - len(review(widePod(0, defaulted), "u", "training", "wide"))) / per
	for len(review(widePod(n, defaulted), "u", "training", "wide")) > size {
		n -= max(1, (len(review(widePod(n, defaulted), "u", "training", "wide"))-size)/per)
	}
	return n
}

// padded is a review whose uid, namespace or pod name is size bytes.
func padded(field string, size int) []byte {
	pad := strings.Repeat("x", size)
	uid, ns, name := "0c6a4b8e-1111-2222-3333-444455556666", "training", "p"
	switch field {
	case "uid":
		uid = pad
	case "namespace":
		ns = pad
	case "name":
		name = pad
	}
	obj := workerPod()
	if field == "name" {
		obj = bytes.Replace(obj, []byte(`"generateName":"llama-pretrain-worker-"`), []byte(`"name":`+mustJSON(pad)), 1)
		// refused (unknown mode), so the webhook logs the pod's name
		obj = bytes.Replace(obj, []byte(`"rdma-exclusive,ipoib"`), []byte(`"rdma-exclusiv"`), 1)
	}
	return review(obj, uid, ns, name)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// listReview is a review of a pod whose spec holds n copies of item in the
// list opened by open and closed by closing (JSON fragments); ours adds
// ibkube's mode annotation. One more list floods the webhook's decoder per
// element, whatever the list.
func listReview(ours bool, open, item string, n int, closing string) []byte {
	return review(floods.Pod(ours, "lists", open, item, n, closing), "u", "training", "lists")
}

// mountsReview is 128 containers of n empty volumeMounts each.
func mountsReview(n int) []byte {
	mounts := strings.Repeat("{},", n)
	container := `{"name":"c","image":"busybox","volumeMounts":[` + mounts[:len(mounts)-1] + `]}`
	return listReview(true, `"containers":[`, container, mutate.MaxContainers, "]")
}

// largestByValues is the review of a pod ibkube looks at with exactly
// handler.MaxReviewValues JSON values, every one it can spare an empty
// volume: the costliest pod to decode that the webhook admits.
func largestByValues() []byte {
	base := countJSONValues(listReview(true, `"volumes":[`, "{}", 0, "]"))
	return listReview(true, `"volumes":[`, "{}", handler.MaxReviewValues-base, "]")
}

// countJSONValues counts the values of a JSON document with the decoder.
func countJSONValues(doc []byte) int {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		panic(err)
	}
	var count func(any) int
	count = func(v any) int {
		n := 1
		switch v := v.(type) {
		case []any:
			for _, e := range v {
				n += count(e)
			}
		case map[string]any:
			for _, e := range v {
				n += count(e)
			}
		}
		return n
	}
	return count(v)
}
