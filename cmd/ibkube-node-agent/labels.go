package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ibkube/ibkube/contract"
	"github.com/ibkube/ibkube/node/counters"
)

// fieldManager names the agent in the Node's managedFields.
const fieldManager = "ibkube-node-agent"

// PatchNodeLabels implements agent.NodeLabelPatcher with a JSON merge
// patch of the labels alone (null removes one), so nothing else of the Node
// is sent and no resourceVersion conflict can arise.
func (c *api) PatchNodeLabels(ctx context.Context, node string, set map[string]*string) error {
	return patchNodeLabels(ctx, c.cs, node, set)
}

func patchNodeLabels(ctx context.Context, cs kubernetes.Interface, node string, set map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": set}})
	if err != nil {
		return err
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("label node %s: %w", node, err)
	}
	return nil
}

// removePartitionLabels takes the partition label off every Node that has
// it: what the chart's pre-delete hook runs, under an identity of its own
// that exists only while the release is uninstalled.
func removePartitionLabels(ctx context.Context, cs kubernetes.Interface, log logr.Logger) error {
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: contract.LabelPartition})
	if err != nil {
		return fmt.Errorf("list nodes labelled %s: %w", contract.LabelPartition, err)
	}
	var errs []error
	for _, n := range nodes.Items {
		if err := patchNodeLabels(ctx, cs, n.Name, map[string]*string{contract.LabelPartition: nil}); err != nil {
			errs = append(errs, err)
			continue
		}
		log.Info("partition label removed", "node", n.Name)
	}
	return errors.Join(errs...)
}

// PodLabels implements counters.Jobs.
func (c *api) PodLabels(ctx context.Context, namespace, name string) (map[string]string, error) {
	p, err := c.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get pod %s/%s: %w", namespace, name, err)
	}
	return p.Labels, nil
}

// RunningPods implements counters.Jobs: the job's pods the API server
// reports Running, selected on the server.
func (c *api) RunningPods(ctx context.Context, namespace string, selector map[string]string) ([]counters.JobPod, error) {
	list, err := c.cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(selector).String(),
		FieldSelector: "status.phase=Running",
	})
	if err != nil {
		return nil, fmt.Errorf("list pods of %v in %s: %w", selector, namespace, err)
	}
	out := make([]counters.JobPod, 0, len(list.Items))
	for _, p := range list.Items {
		out = append(out, counters.JobPod{Name: p.Name, Node: p.Spec.NodeName, RDMA: counters.RDMAPod(p.Annotations)})
	}
	return out, nil
}

// NodePartition implements counters.Jobs.
func (c *api) NodePartition(ctx context.Context, node string) (string, error) {
	l, err := c.NodeLabels(ctx, node)
	if err != nil {
		return "", err
	}
	return l[contract.LabelPartition], nil
}
