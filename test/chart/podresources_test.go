//go:build chart

package chart

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// The device-plugin agent reads the kubelet's PodResources API for its
// shared slots (they leave out HCAs held exclusively) whether or not the
// counters run; the DRA agent needs it only for the counters.
func TestPodResourcesMountedWhereRead(t *testing.T) {
	t.Parallel()
	for _, counters := range []string{"true", "false"} {
		objs, err := draRender(t, "1.37.2", "agent.counters.enabled="+counters)
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			ds   string
			want bool
		}{
			{dpAgent, true},
			{draAgent, counters == "true"},
		} {
			ds := typed[appsv1.DaemonSet](t, objs, "DaemonSet/"+tc.ds)
			spec := ds.Spec.Template.Spec
			arg := false
			for _, a := range spec.Containers[0].Args {
				arg = arg || strings.HasPrefix(a, "--pod-resources-socket=/var/lib/kubelet/pod-resources/")
			}
			mounted := false
			for _, m := range spec.Containers[0].VolumeMounts {
				mounted = mounted || m.Name == "pod-resources"
			}
			if arg != tc.want || mounted != tc.want {
				t.Errorf("counters %s, %s: --pod-resources-socket passed %v, socket dir mounted %v; want %v", counters, tc.ds, arg, mounted, tc.want)
			}
		}
	}
}

// The agent's least-authority policies exist exactly where the DRA agent
// does, and match its ServiceAccount.
func TestDRAAgentPoliciesFollowTheAgent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set  []string
		want bool
	}{
		{nil, true},
		{[]string{"node.dra.enabled=false"}, false},
		{[]string{"admission.mode=policy"}, true},
	} {
		objs, err := draRender(t, "1.37.2", tc.set...)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{draAgent + "-own-node-slices", draAgent + "-dry-run-deviceclasses"} {
			for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
				o, ok := objs[kind+"/"+name]
				if ok != tc.want {
					t.Errorf("%v: %s %s rendered %v, want %v", tc.set, kind, name, ok, tc.want)
					continue
				}
				if ok && kind == "ValidatingAdmissionPolicy" {
					raw, _ := o.MarshalJSON()
					if want := `system:serviceaccount:` + namespace + `:` + draAgent + `\"`; !strings.Contains(string(raw), want) {
						t.Errorf("%s does not match the DRA agent's ServiceAccount %s", name, want)
					}
				}
			}
		}
	}
}
