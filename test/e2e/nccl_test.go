//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/ibkube/ibkube/nccl"
)

// ncclReport is the part of test/e2e/report's line these scenarios read:
// the environment and the NCCL settings resolved in NCCL's own order.
type ncclReport struct {
	UID  int               `json:"uid"`
	Env  map[string]string `json:"env"`
	NCCL ncclResolution    `json:"nccl"`
	// NCCLEnvHome is the resolution by NCCL >= 2.30.3's rule (HOME).
	NCCLEnvHome ncclResolution `json:"ncclEnvHome"`
}

// ncclResolution is the report's NCCL settings by one rule.
type ncclResolution struct {
	Settings map[string]string `json:"settings"`
	Home     string            `json:"home"`
	Files    []struct {
		Path string `json:"path"`
		Read bool   `json:"read"`
	} `json:"files"`
}

const (
	ncclNS = "e2e-nccl"
	// siteGDRLevel is the site's override of ndv5's NCCL_NET_GDR_LEVEL.
	siteGDRLevel = "PHB"
	// agentStateDir is the chart's agent.stateDir; the NRI plugin writes
	// each RDMA container's conf file under nccl-ranks/ there.
	agentStateDir = "/var/lib/ibkube"
)

// decodeNCCLReport reads the first JSON line of out.
func decodeNCCLReport(out []byte) (ncclReport, error) {
	var rep ncclReport
	for _, line := range bytes.Split(out, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		return rep, json.Unmarshal(line, &rep)
	}
	return rep, fmt.Errorf("no report line in %q", out)
}

// mainAndRankReports returns the report of a ncclNS pod's main process and
// of a second one, a rank, started in its main container with flag
// (-empty-env, -ssh-env: the environment the rank starts with), failing the
// scenario when either cannot be read.
func mainAndRankReports(ctx context.Context, t *testing.T, r *Result, pod, flag string) (mainRep, rank ncclReport) {
	t.Helper()
	mainRep, err := ncclReportOf(ctx, ncclNS, pod)
	if err != nil {
		fail(t, r, "%v", err)
	}
	out, err := h.kubectlRun(ctx, "exec", "-n", ncclNS, pod, "-c", "main", "--", "/usr/local/bin/report", flag)
	if err != nil {
		fail(t, r, "exec a rank with %s in %s: %v", flag, pod, err)
	}
	rank, err = decodeNCCLReport([]byte(out))
	if err != nil {
		fail(t, r, "the rank's report: %v", err)
	}
	return mainRep, rank
}

// ncclReportOf reads the main process's report from the container's log.
func ncclReportOf(ctx context.Context, ns, pod string) (ncclReport, error) {
	var rep ncclReport
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		raw, err := h.cs.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		rep, last = decodeNCCLReport(raw)
		return last == nil, nil
	})
	if err != nil {
		return rep, fmt.Errorf("report of %s/%s: %w (last: %v)", ns, pod, err, last)
	}
	return rep, nil
}

// setSiteProfiles sets the chart's webhook.config.profiles (the site's
// WebhookConfig) with helm upgrade and waits for the rollout.
func setSiteProfiles(ctx context.Context, profiles string) error {
	_, err := run(ctx, h.helm, "upgrade", release, filepath.Join(h.root, "charts/ibkube"), "--namespace", releaseNS,
		"--reuse-values", "--set-json", "webhook.config.profiles="+profiles, "--wait", "--timeout", "3m")
	return err
}

// waitAdmitted waits until several admissions in a row of a dry-run pod with
// profile ndv5 carry want in the profile's conf file: every webhook replica
// then serves the new config.
func waitAdmitted(ctx context.Context, want string) error {
	probe := reportPod("probe", map[string]string{prefix + "mode": "rdma-shared", prefix + "profile": nccl.NDv5})
	last, err := waitAdmission(ctx, ncclNS, probe, 2*time.Minute, func(p *corev1.Pod) (bool, string) {
		conf := p.Annotations[prefix+"nccl-conf"]
		return strings.Contains(conf, want), conf
	})
	if err != nil {
		return fmt.Errorf("admission never carried %q five times in a row: %w (last: %q)", want, err, last)
	}
	return nil
}

// 7a: tunings have one owner. With the site's WebhookConfig overriding
// ndv5's NCCL_NET_GDR_LEVEL, a pod with profile ndv5 on the ND H100 v5 node
// resolves the override (the node agent no longer puts ndv5's value in the
// Allocate environment, which would outrank the conf file); a pod choosing
// generic-ib resolves none of ndv5's tunings, and both get the node facts.
func testNCCLOneOwner(ctx context.Context, t *testing.T, r *Result) {
	optedIn(ctx, t, ncclNS, true)

	override := fmt.Sprintf(`[{"name":%q,"nccl":{"NCCL_NET_GDR_LEVEL":%q}}]`, nccl.NDv5, siteGDRLevel)
	start := time.Now()
	if err := setSiteProfiles(ctx, override); err != nil {
		fail(t, r, "set the site's ndv5 override: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if err := setSiteProfiles(ctx, "[]"); err != nil {
			t.Errorf("restore webhook.config.profiles: %v", err)
		}
	})
	if err := waitAdmitted(ctx, "NCCL_NET_GDR_LEVEL="+siteGDRLevel); err != nil {
		fail(t, r, "%v", err)
	}
	r.Figures["site_override_rollout_seconds"] = time.Since(start).Seconds()

	pods := map[string]string{"ndv5": nccl.NDv5, "generic": nccl.GenericIB}
	for name, profile := range pods {
		p := reportPod(name, map[string]string{prefix + "mode": "rdma-shared", prefix + "profile": profile})
		if _, err := h.cs.CoreV1().Pods(ncclNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			fail(t, r, "create %s: %v", name, err)
		}
	}
	defer deletePods(t, ncclNS, "ndv5", "generic")
	reps := map[string]ncclReport{}
	for name := range pods {
		if _, err := h.waitRunning(ctx, ncclNS, name, podStartTimeout); err != nil {
			fail(t, r, "%v", err)
		}
		rep, err := ncclReportOf(ctx, ncclNS, name)
		if err != nil {
			fail(t, r, "%v", err)
		}
		reps[name] = rep
	}

	nd := reps["ndv5"]
	check(t, r, nd.NCCL.Settings["NCCL_NET_GDR_LEVEL"] == siteGDRLevel, "ndv5 pod resolves NCCL_NET_GDR_LEVEL=%q, the site set %s", nd.NCCL.Settings["NCCL_NET_GDR_LEVEL"], siteGDRLevel)
	_, inEnv := nd.Env["NCCL_NET_GDR_LEVEL"]
	check(t, r, !inEnv, "ndv5 pod has NCCL_NET_GDR_LEVEL=%q in its environment: a tuning outranking the profile's conf file", nd.Env["NCCL_NET_GDR_LEVEL"])

	ndv5, _ := nccl.ProfileForSKU("Standard_ND96isr_H100_v5")
	var generic nccl.Profile
	for _, p := range nccl.Builtin() {
		if p.Name == nccl.GenericIB {
			generic = p
		}
	}
	gen := reps["generic"]
	for _, v := range append(append([]nccl.Var{}, ndv5.NCCL...), ndv5.Env...) {
		if _, shared := nccl.Lookup(append(append([]nccl.Var{}, generic.NCCL...), generic.Env...), v.Name); shared {
			continue
		}
		got, resolved := gen.NCCL.Settings[v.Name]
		check(t, r, !resolved, "generic-ib pod resolves ndv5's %s=%q", v.Name, got)
		got, inEnv := gen.Env[v.Name]
		check(t, r, !inEnv, "generic-ib pod has ndv5's %s=%q in its environment", v.Name, got)
	}

	// Node facts reach both: the HCAs, and the topology file when the
	// agent found the node's profile.
	for name, rep := range reps {
		hca := rep.NCCL.Settings["NCCL_IB_HCA"]
		check(t, r, strings.HasPrefix(hca, "=mlx5_"), "%s pod: NCCL_IB_HCA=%q, want the node's HCAs", name, hca)
		check(t, r, rep.NCCL.Settings["NCCL_TOPO_FILE"] == nd.NCCL.Settings["NCCL_TOPO_FILE"], "%s pod: NCCL_TOPO_FILE=%q, the ndv5 pod has %q on the same node",
			name, rep.NCCL.Settings["NCCL_TOPO_FILE"], nd.NCCL.Settings["NCCL_TOPO_FILE"])
	}
	r.Notes = append(r.Notes, fmt.Sprintf("ndv5 pod: NCCL_NET_GDR_LEVEL=%s, NCCL_TOPO_FILE=%q; generic-ib pod: %d NCCL settings", nd.NCCL.Settings["NCCL_NET_GDR_LEVEL"],
		nd.NCCL.Settings["NCCL_TOPO_FILE"], len(gen.NCCL.Settings)))
}

// 7b: MPI ranks. In a worker running as root, a process started with an
// empty environment (as sshd starts orted and the ranks, here `report
// -empty-env`, an execve with no environment) resolves the same NCCL
// settings as the container's main process: the node facts and the user's
// env through the node agent's ~/.nccl.conf, the profile below them, and the
// image's own /etc/nccl.conf still below both.
func testNCCLMPIRanks(ctx context.Context, t *testing.T, r *Result) {
	if _, err := h.cs.CoreV1().Namespaces().Get(ctx, ncclNS, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		optedIn(ctx, t, ncclNS, true)
	}
	// What the image ships in /etc/nccl.conf (mounted here: the test image
	// has none).
	imageConf := "NCCL_SOCKET_NTHREADS=4\nNCCL_IB_HCA=image-loses\nNCCL_DEBUG=WARN\n"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "image-nccl-conf"}, Data: map[string]string{"nccl.conf": imageConf}}
	_ = h.cs.CoreV1().ConfigMaps(ncclNS).Delete(ctx, cm.Name, metav1.DeleteOptions{})
	if _, err := h.cs.CoreV1().ConfigMaps(ncclNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		fail(t, r, "%v", err)
	}
	w := reportPod("worker", map[string]string{prefix + "mode": "rdma-exclusive", prefix + "hcas": "2", prefix + "profile": nccl.NDv5})
	w.Spec.SecurityContext.RunAsNonRoot = ptr.To(false)
	w.Spec.SecurityContext.RunAsUser = ptr.To[int64](0)
	w.Spec.SecurityContext.RunAsGroup = ptr.To[int64](0)
	c := &w.Spec.Containers[0]
	c.Env = []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}}
	c.VolumeMounts = []corev1.VolumeMount{{Name: "image-conf", MountPath: "/etc/nccl.conf", SubPath: "nccl.conf", ReadOnly: true}}
	w.Spec.Volumes = []corev1.Volume{{Name: "image-conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}}
	if _, err := h.cs.CoreV1().Pods(ncclNS).Create(ctx, w, metav1.CreateOptions{}); err != nil {
		fail(t, r, "create worker: %v", err)
	}
	pod, err := h.waitRunning(ctx, ncclNS, "worker", podStartTimeout)
	if err != nil {
		fail(t, r, "%v", err)
	}
	mainRep, rank := mainAndRankReports(ctx, t, r, "worker", "-empty-env")

	check(t, r, mainRep.UID == 0 && rank.UID == 0, "uids %d and %d, want 0 (root worker)", mainRep.UID, rank.UID)
	check(t, r, len(rank.Env) == 0, "the process started with an empty environment has %v", rank.Env)
	check(t, r, len(rank.NCCL.Files) > 0 && rank.NCCL.Files[0].Path == "/root/.nccl.conf" && rank.NCCL.Files[0].Read,
		"the empty-environment process did not read /root/.nccl.conf: %+v", rank.NCCL.Files)
	if d := cmp.Diff(mainRep.NCCL.Settings, rank.NCCL.Settings); d != "" {
		check(t, r, false, "NCCL settings of the main process (-) and of a process with an empty environment (+) differ:\n%s", d)
	}
	for name, want := range map[string]string{
		"NCCL_DEBUG":           "INFO", // the user's env over the image's file
		"NCCL_SOCKET_NTHREADS": "4",    // the image's /etc/nccl.conf, not shadowed
	} {
		check(t, r, rank.NCCL.Settings[name] == want, "empty-environment process resolves %s=%q, want %q", name, rank.NCCL.Settings[name], want)
	}
	check(t, r, rank.NCCL.Settings["NCCL_IB_HCA"] == mainRep.Env["NCCL_IB_HCA"] && strings.HasPrefix(mainRep.Env["NCCL_IB_HCA"], "=mlx5_"),
		"empty-environment process resolves NCCL_IB_HCA=%q, the worker was allocated %q", rank.NCCL.Settings["NCCL_IB_HCA"], mainRep.Env["NCCL_IB_HCA"])
	r.Notes = append(r.Notes, fmt.Sprintf("%d NCCL settings resolved alike by the main process and an empty-environment process", len(rank.NCCL.Settings)))

	// The file goes with the container.
	var id string
	for _, cs := range pod.Status.ContainerStatuses {
		_, id, _ = strings.Cut(cs.ContainerID, "://")
	}
	file := filepath.Join(agentStateDir, "nccl-ranks", id+".nccl.conf")
	if _, err := os.Stat(file); err != nil {
		check(t, r, false, "the worker's conf file on the host: %v", err)
	}
	deletePods(t, ncclNS, "worker")
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(file)
		return os.IsNotExist(err), nil
	})
	check(t, r, err == nil, "%s still there after the worker was deleted", file)
}

// 7c: MPI ranks of a non-root worker. The worker runs as uid 1000, which
// the image's /etc/passwd names mpiuser with home /home/mpiuser (as
// Kubeflow's mpi-operator base image does), and its spec has no HOME. A
// rank started as sshd starts one (`report -ssh-env`: nothing of the
// container's environment, HOME and USER from the passwd entry) resolves,
// by NCCL's rule up to 2.29 (getpwuid) and from 2.30.3 (HOME) alike, the
// same NCCL settings as the container's main process.
func testNCCLMPIRanksNonRoot(ctx context.Context, t *testing.T, r *Result) {
	if _, err := h.cs.CoreV1().Namespaces().Get(ctx, ncclNS, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		optedIn(ctx, t, ncclNS, true)
	}
	w := reportPod("mpiuser", map[string]string{prefix + "mode": "rdma-exclusive", prefix + "hcas": "2", prefix + "profile": nccl.NDv5})
	w.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "NCCL_DEBUG", Value: "INFO"}}
	if _, err := h.cs.CoreV1().Pods(ncclNS).Create(ctx, w, metav1.CreateOptions{}); err != nil {
		fail(t, r, "create worker: %v", err)
	}
	defer deletePods(t, ncclNS, "mpiuser")
	if _, err := h.waitRunning(ctx, ncclNS, "mpiuser", podStartTimeout); err != nil {
		fail(t, r, "%v", err)
	}
	mainRep, rank := mainAndRankReports(ctx, t, r, "mpiuser", "-ssh-env")
	const home = "/home/mpiuser"
	check(t, r, mainRep.UID == 1000 && rank.UID == 1000, "uids %d and %d, want 1000", mainRep.UID, rank.UID)
	check(t, r, rank.Env["HOME"] == home && rank.Env["NCCL_CONF_FILE"] == "" && rank.Env["NCCL_IB_HCA"] == "",
		"the rank's environment is not sshd's: %v", rank.Env)
	for _, res := range []struct {
		rule string
		got  ncclResolution
	}{{"NCCL <= 2.29 (getpwuid)", rank.NCCL}, {"NCCL >= 2.30.3 (HOME)", rank.NCCLEnvHome}} {
		check(t, r, len(res.got.Files) > 0 && res.got.Files[0].Path == home+"/.nccl.conf" && res.got.Files[0].Read,
			"%s: the rank did not read %s/.nccl.conf: %+v", res.rule, home, res.got.Files)
		if d := cmp.Diff(mainRep.NCCL.Settings, res.got.Settings); d != "" {
			check(t, r, false, "%s: NCCL settings of the main process (-) and of the ssh-started rank (+) differ:\n%s", res.rule, d)
		}
	}
	check(t, r, rank.NCCL.Settings["NCCL_DEBUG"] == "INFO" && strings.HasPrefix(rank.NCCL.Settings["NCCL_IB_HCA"], "=mlx5_"),
		"the rank resolves NCCL_DEBUG=%q NCCL_IB_HCA=%q", rank.NCCL.Settings["NCCL_DEBUG"], rank.NCCL.Settings["NCCL_IB_HCA"])
	r.Notes = append(r.Notes, fmt.Sprintf("uid 1000 without HOME in its spec: %d NCCL settings resolved alike by the main process and an ssh-started rank reading %s/.nccl.conf", len(rank.NCCL.Settings), home))
}

// deletePods deletes pods and waits until they are gone.
func deletePods(t *testing.T, ns string, names ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, n := range names {
		_ = h.cs.CoreV1().Pods(ns).Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	for _, n := range names {
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := h.cs.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
		if err != nil {
			t.Logf("pod %s/%s not gone: %v", ns, n, err)
		}
	}
}
