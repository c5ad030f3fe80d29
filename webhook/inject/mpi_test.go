package inject

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMPIForwardWarnings(t *testing.T) {
	t.Parallel()
	job := func(launcher string) map[string]any {
		obj, err := decode([]byte(`apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata: {name: j}
spec:
  mpiReplicaSpecs:
    Launcher:
      template:
        spec:
          containers:
` + launcher))
		if err != nil {
			t.Fatal(err)
		}
		return obj
	}
	tests := []struct {
		name     string
		launcher string
		want     []string
	}{
		{"no forwarding", `          - {name: l, command: [mpirun, -np, "16", -x, NCCL_DEBUG, ./a.out]}` + "\n", nil},
		{"-x NCCL_CONF_FILE in command", `          - {name: l, command: [mpirun, -x, NCCL_CONF_FILE, ./a.out]}` + "\n", []string{
			"the MPI launcher forwards NCCL_CONF_FILE to the ranks (mpirun -x or OMPI_MCA_mca_base_env_list): NCCL then skips ~/.nccl.conf, where the node agent gives ranks started over SSH their worker's HCAs and topology file; drop it, ranks started over SSH read their worker's NCCL settings without forwarding (docs/node-agent.md, MPI ranks)",
		}},
		{"inside a shell string, with a value", `          - {name: l, command: [sh, -c, "mpirun -x NCCL_IB_HCA=mlx5_0 ./a.out"]}` + "\n", []string{
			"the MPI launcher forwards NCCL_IB_HCA to the ranks (mpirun -x or OMPI_MCA_mca_base_env_list): every rank gets the launcher's HCA list instead of its own worker's; drop it, ranks started over SSH read their worker's NCCL settings without forwarding (docs/node-agent.md, MPI ranks)",
		}},
		{"OMPI_MCA_mca_base_env_list", `          - {name: l, env: [{name: OMPI_MCA_mca_base_env_list, value: "NCCL_DEBUG;NCCL_TOPO_FILE"}]}` + "\n", []string{
			"the MPI launcher forwards NCCL_TOPO_FILE to the ranks (mpirun -x or OMPI_MCA_mca_base_env_list): every rank gets the launcher's topology file instead of its own worker's; drop it, ranks started over SSH read their worker's NCCL settings without forwarding (docs/node-agent.md, MPI ranks)",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if d := cmp.Diff(tc.want, mpiForwardWarnings(job(tc.launcher))); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
