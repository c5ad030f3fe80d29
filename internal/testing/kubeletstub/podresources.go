package kubeletstub

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResources serves the kubelet's real PodResources v1 gRPC API on a unix
// socket, answering List with what the test set.
type PodResources struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	srv *grpc.Server

	mu    sync.Mutex
	pods  []*podresourcesv1.PodResources
	lists int
	// listed is closed and replaced at every List answered.
	listed chan struct{}
}

// StartPodResources serves the API on socket until tb ends (or Stop),
// answering List with the pods given (Set changes them), and fails tb if
// it cannot.
func StartPodResources(tb testing.TB, socket string, pods ...*podresourcesv1.PodResources) *PodResources {
	tb.Helper()
	lis, err := net.Listen("unix", socket)
	if err != nil {
		tb.Fatalf("PodResources stub: listen on %s: %v", socket, err)
	}
	s := &PodResources{srv: grpc.NewServer(), pods: pods, listed: make(chan struct{})}
	podresourcesv1.RegisterPodResourcesListerServer(s.srv, s)
	go func() { _ = s.srv.Serve(lis) }()
	tb.Cleanup(s.Stop)
	return s
}

// Set replaces what List answers.
func (s *PodResources) Set(pods ...*podresourcesv1.PodResources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
}

// Lists is how many List calls were answered.
func (s *PodResources) Lists() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}

// WaitLists returns once n List calls were answered in all, or with an
// error after timeout.
func (s *PodResources) WaitLists(n int, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		s.mu.Lock()
		got, listed := s.lists, s.listed
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-listed:
		case <-deadline:
			return fmt.Errorf("%d List calls answered within %s, want %d", got, timeout, n)
		}
	}
}

// Stop stops serving.
func (s *PodResources) Stop() { s.srv.Stop() }

// List implements the API.
func (s *PodResources) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	close(s.listed)
	s.listed = make(chan struct{})
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, p := range s.pods {
		resp.PodResources = append(resp.PodResources, proto.Clone(p).(*podresourcesv1.PodResources))
	}
	return resp, nil
}

// Container is a PodResources container holding device plugin devices,
// resource name to device IDs.
func Container(name string, devices map[string][]string) *podresourcesv1.ContainerResources {
	c := &podresourcesv1.ContainerResources{Name: name}
	for res, ids := range devices {
		c.Devices = append(c.Devices, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: ids})
	}
	return c
}

// Pod is a PodResources pod.
func Pod(namespace, name string, containers ...*podresourcesv1.ContainerResources) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: namespace, Name: name, Containers: containers}
}
