// Package nri is the node agent's NRI plugin: registered on the container
// runtime's NRI socket, it applies what package memlock decides for each
// container that holds ibkube's RDMA char devices (its RLIMIT_MEMLOCK and a
// read-only ~/.nccl.conf for processes started without the container's
// environment), reconnects when the runtime restarts, and reports its state
// and decisions as metrics.
package nri
