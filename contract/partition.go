package contract

// LabelPartition is the Node label the node agent writes with the node's
// InfiniBand tenant partition key as its ports' tables print it ("0x800b"),
// or, on RoCE nodes, the value of a cloud placement label the agent config
// names. Pods of one job share it (the job affinity's topology key); Kueue's
// topology-aware scheduling and PodGroup topology constraints can use it as
// a level. docs/partitions.md.
const LabelPartition = Prefix + "partition"

// AnnotationPlacement on a pod says how its job is placed across partitions:
// PlacementPartition (the default) has the webhook require the job's pods on
// one partition, PlacementAny opts the pod out.
const (
	AnnotationPlacement = Prefix + "placement"
	PlacementPartition  = "partition"
	PlacementAny        = "any"
)

// Pod labels that name the job a pod belongs to, as each controller sets
// them on its pods:
//   - JobLabelKubeflow: Kubeflow training-operator v1 (PyTorchJob, TFJob,
//     XGBoostJob, PaddleJob, JAXJob) and mpi-operator v2 (MPIJob launcher and
//     workers): kubeflow/common pkg/apis/common/v1 JobNameLabel, kept by
//     kubeflow/training-operator and kubeflow/mpi-operator.
//   - JobLabelJobSet: JobSet, and so Kubeflow Trainer v2 TrainJobs, which run
//     as JobSets (kubernetes-sigs/jobset api/jobset/v1alpha2 JobSetNameKey).
//   - JobLabelLWS: LeaderWorkerSet (kubernetes-sigs/lws
//     api/leaderworkerset/v1 SetNameLabelKey); each group of leader and
//     workers is one job, told apart by LWSGroupIndexLabel
//     (GroupIndexLabelKey).
//   - JobLabelBatch: Job (Kubernetes 1.27+, k8s.io/api/batch/v1
//     JobNameLabel).
const (
	JobLabelKubeflow   = "training.kubeflow.org/job-name"
	JobLabelJobSet     = "jobset.sigs.k8s.io/jobset-name"
	JobLabelLWS        = "leaderworkerset.sigs.k8s.io/name"
	JobLabelBatch      = "batch.kubernetes.io/job-name"
	LWSGroupIndexLabel = "leaderworkerset.sigs.k8s.io/group-index"
)

// JobLabels are the job labels in the order they are tried: the most
// specific controller first, since a JobSet's pods also carry their child
// Job's label and a Kubeflow job's pods may come from a Job.
var JobLabels = []string{JobLabelKubeflow, JobLabelJobSet, JobLabelLWS, JobLabelBatch}

// DRAAttrPartition is the device attribute holding the tenant partition key
// its InfiniBand port is a full member of ("0x800b"), absent when the
// port's table names none; a claim selects it with
// `device.attributes["rdma.infiniband.azure.com"].partition == "0x800b"`.
const DRAAttrPartition = "partition"

// JobSelector is the label selector of the job a pod belongs to, from its
// labels: the first of JobLabels it carries, with a LeaderWorkerSet's group
// index; nil for a pod of no job. The webhook's affinity and the node
// agent's split-job check both name a job by it.
func JobSelector(labels map[string]string) map[string]string {
	for _, k := range JobLabels {
		v, ok := labels[k]
		if !ok {
			continue
		}
		sel := map[string]string{k: v}
		if g, ok := labels[LWSGroupIndexLabel]; ok && k == JobLabelLWS {
			sel[LWSGroupIndexLabel] = g
		}
		return sel
	}
	return nil
}
