// Package floods builds the pods of forged admission reviews that flood a
// decoder with one long list: the webhook handler's tests and the attack
// harness send the same shapes.
package floods

import (
	"bytes"
	"fmt"

	"github.com/ibkube/ibkube/contract"
)

// Pod is a pod object named name in namespace "training" whose spec holds
// the list opened by open and closed by closing (JSON fragments such as
// `"volumes":[` and `]`), built from n copies of item; ours adds ibkube's
// mode annotation, so the webhook looks at the pod.
func Pod(ours bool, name, open, item string, n int, closing string) []byte {
	var b bytes.Buffer
	b.Grow(len(item)*n + 256)
	annotations := `{"team":"a"}`
	if ours {
		annotations = fmt.Sprintf(`{"team":"a",%q:"rdma-shared"}`, contract.AnnotationMode)
	}
	fmt.Fprintf(&b, `{"metadata":{"name":%q,"namespace":"training","annotations":%s},"spec":{`, name, annotations)
	b.WriteString(open)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(item)
	}
	b.WriteString(closing)
	b.WriteString("}}")
	return b.Bytes()
}
