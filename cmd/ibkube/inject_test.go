package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunInject(t *testing.T) {
	t.Parallel()
	pod := `apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: team
  annotations: {infiniband.azure.com/mode: "%s"}
spec:
  containers: [{name: a, resources: {limits: {nvidia.com/gpu: 4}}}]
`
	cases := []struct {
		name                  string
		args                  []string
		mode                  string
		wantErr, wantOut, err string
	}{
		{name: "opted in by default", args: []string{"-f", "-"}, mode: "rdma-exclusive",
			wantOut: `rdma/ib: "4"`},
		{name: "not opted in", args: []string{"-f", "-", "--namespace-labels", "team=a"}, mode: "rdma-exclusive",
			wantOut: "infiniband.azure.com/mode: \"rdma-exclusive\"}"},
		{name: "baseline warns", args: []string{"-f", "-", "--namespace-labels", "infiniband.azure.com/inject=enabled,pod-security.kubernetes.io/enforce=baseline"},
			mode: "rdma-shared", wantOut: "rdma/shared_ib", err: "Warning: document 1 (Pod p): IPC_LOCK not added"},
		{name: "namespace annotation with a comma", args: []string{"-f", "-", "--namespace-annotations", "infiniband.azure.com/profile=ndv4,infiniband.azure.com/hcas=2"},
			mode: "rdma-exclusive,ipoib", wantOut: "profile=ndv4"},
		{name: "refusal", args: []string{"-f", "-"}, mode: "rdma-shared,rdma-exclusive",
			wantErr: `inject: denied, nothing written: document 1 (Pod p): annotation infiniband.azure.com/mode: invalid value "rdma-shared,rdma-exclusive": rdma-shared and rdma-exclusive exclude each other`},
		{name: "no file", args: nil, wantErr: "inject: -f FILE or -f - is required"},
		{name: "bad kv", args: []string{"-f", "-", "--namespace-labels", "=x"}, wantErr: `inject: --namespace-labels: invalid entry "=x"`},
		{name: "bad config path", args: []string{"-f", "-", "--config", "/nonexistent.yaml"}, wantErr: "inject: open /nonexistent.yaml"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			in := strings.NewReader(strings.Replace(pod, "%s", tc.mode, 1))
			err := runInject(context.Background(), tc.args, stdio{in: in, out: &out, err: &errb})
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want prefix %q", err, tc.wantErr)
				}
				if out.Len() != 0 {
					t.Errorf("stdout holds %d bytes after an error, want nothing:\n%s", out.Len(), out.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("err = %v (stderr %s)", err, errb.String())
			}
			if !strings.Contains(out.String(), tc.wantOut) {
				t.Errorf("stdout lacks %q:\n%s", tc.wantOut, out.String())
			}
			if !strings.Contains(errb.String(), tc.err) {
				t.Errorf("stderr lacks %q:\n%s", tc.err, errb.String())
			}
		})
	}
}
