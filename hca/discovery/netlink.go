package discovery

import (
	"fmt"

	"github.com/vishvananda/netlink"
)

// Netlink is what discovery needs from netlink: the RDMA device list
// (NETLINK_RDMA, RDMA_NLDEV_CMD_GET) and rtnetlink link events. Tests pass a
// fake; the agent passes SystemNetlink{} when it reads the host's own /sys.
type Netlink interface {
	RdmaLinkList() ([]*netlink.RdmaLink, error)
	LinkSubscribe(ch chan<- netlink.LinkUpdate, done <-chan struct{}) error
}

// SystemNetlink talks to the kernel in the calling process's network
// namespace through github.com/vishvananda/netlink.
type SystemNetlink struct{}

// RdmaLinkList lists RDMA devices (RDMA_NLDEV_CMD_GET with NLM_F_DUMP).
func (SystemNetlink) RdmaLinkList() ([]*netlink.RdmaLink, error) {
	links, err := netlink.RdmaLinkList()
	if err != nil {
		return nil, fmt.Errorf("RDMA netlink device list: %w", err)
	}
	return links, nil
}

// LinkSubscribe subscribes to RTNLGRP_LINK until done is closed.
func (SystemNetlink) LinkSubscribe(ch chan<- netlink.LinkUpdate, done <-chan struct{}) error {
	if err := netlink.LinkSubscribe(ch, done); err != nil {
		return fmt.Errorf("rtnetlink link subscription: %w", err)
	}
	return nil
}

// netlinkGUID converts vishvananda's RdmaLinkAttrs.NodeGuid to the sysfs
// spelling. The kernel sends the GUID as a host-order u64
// (nla_put_u64_64bit(..., be64_to_cpu(node_guid))) and vishvananda prints it
// with binary.LittleEndian as a MAC-style string, so its bytes come out
// reversed: "7f:ff:33:fd:ff:5d:15:00" is GUID 0015:5dff:fd33:ff7f.
func netlinkGUID(s string) (string, error) {
	v, _, err := ParseGUID(s)
	if err != nil {
		return "", err
	}
	var r uint64
	for i := 0; i < 8; i++ {
		r = r<<8 | (v>>(8*i))&0xff
	}
	return FormatGUID(r), nil
}
