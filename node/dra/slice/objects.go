package slice

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/contract"
)

// sliceIndexMinLength is the width of the hex index the kubeletplugin's
// slice controller puts at the front of a slice's name
// (k8s.io/dynamic-resource-allocation/resourceslice
// resourceSliceIndexMinLength): the allocator tries slices in name order.
const sliceIndexMinLength = 5

// Objects are the ResourceSlice objects the kubeletplugin's slice
// controller creates for a node's slices on its first publish, as the API server
// receives them: the name a generateName of the slice's index, the driver
// and the node, owned by the Node (its UID is looked up at run time, so it
// is empty here), generation 1. It is what `ibkube node -o slices` prints
// and what the tests hand the scheduler's allocator.
func Objects(slices []Slice, node string) []*resourceapi.ResourceSlice {
	var out []*resourceapi.ResourceSlice
	poolName := node
	{
		width := max(sliceIndexMinLength, len(strconv.FormatInt(int64(len(slices)-1), 16)))
		for i, s := range slices {
			out = append(out, &resourceapi.ResourceSlice{
				TypeMeta: metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
				ObjectMeta: metav1.ObjectMeta{
					GenerateName: fmt.Sprintf("%0*x-%s-%s-", width, i, contract.DRADriverName, node),
					OwnerReferences: []metav1.OwnerReference{{
						APIVersion: corev1.SchemeGroupVersion.String(), Kind: "Node", Name: node, Controller: ptr.To(true),
					}},
				},
				Spec: resourceapi.ResourceSliceSpec{
					Driver:         contract.DRADriverName,
					Pool:           resourceapi.ResourcePool{Name: poolName, Generation: 1, ResourceSliceCount: int64(len(slices))},
					NodeName:       ptr.To(node),
					Devices:        s.Devices,
					SharedCounters: s.SharedCounters,
				},
			})
		}
	}
	return out
}
