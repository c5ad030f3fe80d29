package agent

import (
	"context"
	"errors"
	"strings"
	"testing"
)

type nodeLabels map[string]map[string]string

func (n nodeLabels) NodeLabels(_ context.Context, name string) (map[string]string, error) {
	l, ok := n[name]
	if !ok {
		return nil, errors.New("get node " + name + ": not found")
	}
	return l, nil
}

func TestInstanceType(t *testing.T) {
	t.Parallel()
	nodes := nodeLabels{
		"nd-0": {InstanceTypeLabel: "Standard_ND96isr_H100_v5"},
		"bare": {"kubernetes.io/os": "linux"},
	}
	for _, tc := range []struct {
		node, want, wantErr string
	}{
		{node: "nd-0", want: "Standard_ND96isr_H100_v5"},
		{node: "bare"},
		{node: "", wantErr: "no node name"},
		{node: "gone", wantErr: "get node gone"},
	} {
		got, err := instanceType(context.Background(), nodes, tc.node)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("instanceType(%q): error %v, want one containing %q", tc.node, err, tc.wantErr)
		case tc.wantErr == "" && err != nil:
			t.Errorf("instanceType(%q): %v", tc.node, err)
		case got != tc.want:
			t.Errorf("instanceType(%q) = %q, want %q", tc.node, got, tc.want)
		}
	}
}
