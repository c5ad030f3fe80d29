// Package dra is the node agent's DRA (Dynamic Resource Allocation) kubelet
// plugin: it publishes the node's HCAs as devices in a ResourceSlice,
// prepares allocated claims by writing one CDI spec per claim, and reports
// device health to the kubelet.
//
// The cores are pure: Resources turns the resource model into the
// ResourceSlice content (the slice model itself is package slice), Health
// turns it into the health report, and ClaimSpec turns a claim's allocation
// into a CDI spec from the resource model's grant. Driver holds the latest
// model and does the file I/O; Start wires it to the kubelet through
// k8s.io/dynamic-resource-allocation/kubeletplugin.
package dra
