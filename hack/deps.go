//go:build deps

// Package hack pins the project's direct dependencies while the packages that
// use them are being written, so that parallel work never races on go.mod.
// Delete an import here once real code imports the package.
package hack

import (
	_ "github.com/containerd/nri/pkg/stub"
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/cni/pkg/skel"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/apis/k8s.cni.cncf.io/v1"
	_ "github.com/k8snetworkplumbingwg/network-attachment-definition-client/pkg/utils"
	_ "github.com/open-policy-agent/cert-controller/pkg/rotator"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/vishvananda/netlink"
	_ "google.golang.org/grpc"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/apimachinery/pkg/runtime"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	_ "sigs.k8s.io/controller-runtime"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/yaml"
)
