package deviceplugin

import (
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/ibkube/ibkube/node/resource"
)

// allocateResponse is the kubelet's form of a grant.
func allocateResponse(g resource.Grant) *pluginapi.ContainerAllocateResponse {
	resp := &pluginapi.ContainerAllocateResponse{Envs: g.EnvMap()}
	for _, d := range g.Devices {
		resp.Devices = append(resp.Devices, &pluginapi.DeviceSpec{ContainerPath: d.ContainerPath, HostPath: d.HostPath, Permissions: d.Permissions})
	}
	for _, m := range g.Mounts {
		resp.Mounts = append(resp.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: true})
	}
	return resp
}
