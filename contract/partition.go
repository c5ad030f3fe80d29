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

// JobLabels are the pod labels that name the job a pod belongs to, as each
// controller sets them on its pods, in the order they are tried (the most
// specific controller first: a JobSet's pods also carry the Job label of
// their child Job, and a Kubeflow job's pods may be made by a JobSet).
//   - training.kubeflow.org/job-name: Kubeflow training-operator v1
//     (PyTorchJob, TFJob, MPIJob v1, XGBoostJob, PaddleJob, JAXJob),
//     pkg/apis/kubeflow.org/v1/common_types.go JobNameLabel.
//   - jobset.sigs.k8s.io/jobset-name: JobSet (and so Kubeflow Trainer v2
//     TrainJobs, which run as JobSets), api/jobset/v1alpha2 JobSetNameKey.
//   - leaderworkerset.sigs.k8s.io/name: LeaderWorkerSet, api/.../SetNameLabelKey;
//     one group of an LWS is one job (leaderworkerset.sigs.k8s.io/group-index
//     is added to the key when present).
//   - batch.kubernetes.io/job-name: Job (Kubernetes 1.27+), and so MPIJob v2
//     launchers (mpi-operator v2 creates a batch Job for the launcher and
//     labels workers training.kubeflow.org/job-name).
var JobLabels = []string{
	"training.kubeflow.org/job-name",
	"jobset.sigs.k8s.io/jobset-name",
	"leaderworkerset.sigs.k8s.io/name",
	"batch.kubernetes.io/job-name",
}

// LWSGroupIndexLabel is the LeaderWorkerSet group of a pod: each group is
// its own job for placement.
const LWSGroupIndexLabel = "leaderworkerset.sigs.k8s.io/group-index"
