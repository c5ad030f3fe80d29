// Package contract holds what the webhook, the node agent, the CNI plugin
// and the Helm chart agree on: the annotation and label keys pods and
// namespaces carry, the modes a pod may ask for, the extended resource names
// the agent advertises and the webhook requests, and the IPoIB network's
// defaults. It imports the standard library only, so every side, including
// the offline CLI, can depend on it without pulling in anything else.
//
// One file per concern: keys.go (annotations and labels), mode.go,
// resources.go, network.go, ncclconf.go; the DRA driver's names (driver,
// DeviceClasses, device attributes) belong in dra.go beside them.
//
// A test in test/chart ties the chart's rendered defaults to these values,
// and the binaries' own defaults are built from them.
package contract
