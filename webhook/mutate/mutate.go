package mutate

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/ibkube/ibkube/webhook/config"
)

// Mutate mutates pod in place and returns the patch for it.
func Mutate(pod *corev1.Pod, ns Namespace, cfg *config.Config) (Result, error) {
	return Result{}, nil
}
