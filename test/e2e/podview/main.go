// Command podview prints the parts of a pod ibkube may change — annotations,
// and per container env, resources, security context and volume mounts, plus
// the pod's volumes — leaving out what the API server adds on its own (service
// account token volume, defaults, status). make demo runs it on the pod as
// written and on the pod as admitted, and shows the two side by side.
//
//	podview FILE   (YAML or JSON Pod; - for stdin)
package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "podview:", err)
		os.Exit(1)
	}
}

type container struct {
	Name            string                      `json:"name"`
	Env             []corev1.EnvVar             `json:"env,omitempty"`
	Resources       corev1.ResourceRequirements `json:"resources,omitempty"`
	SecurityContext *corev1.SecurityContext     `json:"securityContext,omitempty"`
	VolumeMounts    []corev1.VolumeMount        `json:"volumeMounts,omitempty"`
}

type view struct {
	Annotations map[string]string `json:"annotations,omitempty"`
	Containers  []container       `json:"containers"`
	Volumes     []corev1.Volume   `json:"volumes,omitempty"`
}

func run(args []string, stdin io.Reader, stdout io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: podview FILE|-")
	}
	var data []byte
	var err error
	if args[0] == "-" {
		data, err = io.ReadAll(stdin)
	} else {
		data, err = os.ReadFile(args[0])
	}
	if err != nil {
		return err
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return fmt.Errorf("decode pod: %w", err)
	}
	v := view{Annotations: map[string]string{}}
	for k, val := range pod.Annotations {
		if k != "kubectl.kubernetes.io/last-applied-configuration" {
			v.Annotations[k] = val
		}
	}
	for _, c := range pod.Spec.Containers {
		var mounts []corev1.VolumeMount
		for _, m := range c.VolumeMounts {
			if !strings.HasPrefix(m.Name, "kube-api-access-") {
				mounts = append(mounts, m)
			}
		}
		v.Containers = append(v.Containers, container{Name: c.Name, Env: c.Env, Resources: c.Resources, SecurityContext: c.SecurityContext, VolumeMounts: mounts})
	}
	for _, vol := range pod.Spec.Volumes {
		if !strings.HasPrefix(vol.Name, "kube-api-access-") {
			v.Volumes = append(v.Volumes, vol)
		}
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}
