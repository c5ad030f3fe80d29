package agent

import (
	"context"
	"time"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/hca/inventory"
)

// NodeLabelPatcher sets labels on one Node: a nil value removes the label.
// The agent only ever names its own Node; the chart's admission policy
// holds it to that (docs/partitions.md, "Least authority").
type NodeLabelPatcher interface {
	PatchNodeLabels(ctx context.Context, node string, labels map[string]*string) error
}

// PartitionRoCE is contract.PartitionRoCE, the label of a RoCE node
// without a configured cloud placement label.
const PartitionRoCE = contract.PartitionRoCE

// partitionLabel is the value the node's partition label should have, ""
// for none: the InfiniBand tenant key the ports share; on a node without
// InfiniBand ports but with RDMA devices, the value of the configured cloud
// label (from, read from own) or PartitionRoCE. A node whose InfiniBand
// ports name no certain partition gets none, so no job is placed there.
func partitionLabel(node inventory.Node, from string, own map[string]string) string {
	p := inventory.NodePartition(node)
	switch {
	case p.Known():
		return p.Label()
	case p.State != inventory.PartitionNoInfiniBand || len(node.HCAs) == 0:
		return ""
	case from != "":
		return own[from]
	default:
		return PartitionRoCE
	}
}

// labelTimeout bounds one label patch: the scan loop waits on it.
const labelTimeout = 5 * time.Second

// syncPartitionLabel makes the Node's partition label say what the last
// scan found. It patches only when the value differs from what it last
// wrote (and once at start, to correct a value left by an earlier run); a
// failed patch is retried on the next scan.
func (a *Agent) syncPartitionLabel(ctx context.Context, node inventory.Node) {
	if a.cfg.Labels == nil || a.cfg.NodeName == "" {
		return
	}
	var own map[string]string
	from := a.cfg.Agent.PartitionLabelFrom
	if from != "" && inventory.NodePartition(node).State == inventory.PartitionNoInfiniBand && a.cfg.Nodes != nil {
		lctx, cancel := context.WithTimeout(ctx, labelTimeout)
		l, err := a.cfg.Nodes.NodeLabels(lctx, a.cfg.NodeName)
		cancel()
		if err != nil {
			a.log.Error(err, "cannot read the Node's labels for partitionLabelFrom; the partition label stays as it is", "label", from)
			return
		}
		own = l
	}
	want := partitionLabel(node, from, own)
	if a.labelled && a.partitionLabel == want {
		return
	}
	var v *string
	if want != "" {
		v = &want
	}
	lctx, cancel := context.WithTimeout(ctx, labelTimeout)
	err := a.cfg.Labels.PatchNodeLabels(lctx, a.cfg.NodeName, map[string]*string{contract.LabelPartition: v})
	cancel()
	if err != nil {
		a.log.Error(err, "cannot label the Node with its partition; retrying on the next scan", "label", contract.LabelPartition, "value", want)
		return
	}
	if !a.labelled || a.partitionLabel != want {
		a.log.Info("partition label set", "label", contract.LabelPartition, "value", want, "state", inventory.NodePartition(node).State)
	}
	a.labelled, a.partitionLabel = true, want
	a.metrics.setPartition(want)
}
