package deviceplugin

import (
	"strings"
)

// SocketName is the stem of a resource's plugin socket names:
// rdma/shared_ib -> ibkube-rdma_shared_ib.sock. A server listens on
// SocketFile(resource, generation), ibkube-rdma_shared_ib.<generation>.sock.
func SocketName(resource string) string {
	return socketStem(resource) + ".sock"
}

func socketStem(resource string) string {
	return "ibkube-" + strings.NewReplacer("/", "_", ".", "_").Replace(resource)
}

// SocketFile is the socket name of one server start of a resource's plugin.
func SocketFile(resource, generation string) string {
	return socketStem(resource) + "." + generation + ".sock"
}

// IsSocketOf tells whether name is a socket name of resource's plugin, of
// any server start (SocketName itself is how agents before per-start names
// called it). Dots in a resource name become '_', so the stem's end is
// unambiguous.
func IsSocketOf(resource, name string) bool {
	if name == SocketName(resource) {
		return true
	}
	gen, ok := strings.CutPrefix(name, socketStem(resource)+".")
	if !ok {
		return false
	}
	gen, ok = strings.CutSuffix(gen, ".sock")
	return ok && gen != "" && !strings.ContainsAny(gen, "./")
}
