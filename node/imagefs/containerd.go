package imagefs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/api/types"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Containerd finds a container's snapshot through containerd's snapshots
// API. The CRI plugin prepares the snapshot under the container's ID as
// key (internal/cri/server/container_create.go WithNewSnapshot, an option
// applied before the one that calls NRI's CreateContainer).
type Containerd struct {
	// Address is containerd's gRPC socket.
	Address string
	// Namespace is the CRI plugin's containerd namespace ("k8s.io").
	Namespace string
	// Snapshotters are tried in order (containerd's CRI default is
	// "overlayfs"; a runtime handler may name another).
	Snapshotters []string
	// MergeHidden: see Union.MergeHidden.
	MergeHidden bool
}

// Defaults for Containerd.
const (
	DefaultContainerdAddress   = "/run/containerd/containerd.sock"
	DefaultContainerdNamespace = "k8s.io"
	DefaultSnapshotter         = "overlayfs"
)

// ReadFile reads name from the root filesystem prepared for container id,
// within max bytes; it stops as soon as ctx ends.
func (c Containerd) ReadFile(ctx context.Context, id, name string, max int64) ([]byte, error) {
	u, err := c.Union(ctx, id)
	if err != nil {
		return nil, err
	}
	return u.ReadFile(ctx, name, max)
}

// Union is the root filesystem of container id as its layers.
func (c Containerd) Union(ctx context.Context, id string) (Union, error) {
	conn, err := grpc.NewClient("unix://"+c.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return Union{}, fmt.Errorf("containerd at %s: %w", c.Address, err)
	}
	defer conn.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, "containerd-namespace", c.Namespace)
	client := snapshotsapi.NewSnapshotsClient(conn)
	var tried []string
	for _, sn := range c.Snapshotters {
		resp, err := client.Mounts(ctx, &snapshotsapi.MountsRequest{Snapshotter: sn, Key: id})
		if status.Code(err) == codes.NotFound {
			tried = append(tried, sn)
			continue
		}
		if err != nil {
			return Union{}, fmt.Errorf("snapshot %s of snapshotter %s at %s: %w", id, sn, c.Address, err)
		}
		u, err := UnionOf(resp.GetMounts())
		u.MergeHidden = c.MergeHidden
		return u, err
	}
	return Union{}, fmt.Errorf("no snapshot %s in containerd's snapshotters %s", id, strings.Join(tried, ", "))
}

// UnionOf reads the layers out of a snapshot's mounts: a bind mount is one
// directory; an overlay mount its upperdir over its lowerdirs, with its
// marks where the option userxattr puts them. Other kinds (block devices,
// FUSE) are not read.
func UnionOf(mounts []*types.Mount) (Union, error) {
	if len(mounts) != 1 {
		return Union{}, fmt.Errorf("snapshot of %d mounts; only one bind or overlay mount is read", len(mounts))
	}
	m := mounts[0]
	switch m.GetType() {
	case "bind", "rbind":
		return Union{Layers: []string{m.GetSource()}}, nil
	case "overlay":
		var u Union
		var lower []string
		for _, o := range m.GetOptions() {
			if v, ok := strings.CutPrefix(o, "upperdir="); ok {
				u.Layers = append(u.Layers, v)
			}
			if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
				lower = strings.Split(v, ":")
			}
			if o == "userxattr" {
				u.UserXattr = true
			}
		}
		u.Layers = append(u.Layers, lower...)
		if len(u.Layers) == 0 {
			return Union{}, errors.New("overlay mount without layers")
		}
		return u, nil
	}
	return Union{}, fmt.Errorf("snapshot mount of type %q is not read (bind and overlay are)", m.GetType())
}
