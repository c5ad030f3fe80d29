package contract

// LabelPartition is the Node label the node agent writes with the node's
// InfiniBand tenant partition key as its ports' tables print it ("0x800b"),
// or, on RoCE nodes, the value of a cloud placement label the agent config
// names. Pods of one job share it (the job affinity's topology key); Kueue's
// topology-aware scheduling and PodGroup topology constraints can use it as
// a level. docs/partitions.md.
const LabelPartition = Prefix + "partition"

// PartitionKeyPattern is the form of the partition label on an InfiniBand
// node: a partition key of full membership (the top bit set; a limited
// member cannot talk to other limited members) as the kernel's sysfs prints
// a pkeys entry, "0x%04x" (drivers/infiniband/core/sysfs.c): "0x8000" to
// "0xffff". On a RoCE node the label is PartitionRoCE or the value of the
// Node's own label named by the agent's partitionLabelFrom. The node-label
// admission policy accepts only these from the agent
// (charts/ibkube/templates/agent-node-label-policy.yaml).
const PartitionKeyPattern = `^0x[89a-f][0-9a-f]{3}$`

// PartitionRoCE is the partition label of a node whose RDMA ports are all
// RoCE when no cloud placement label is configured: one Ethernet fabric,
// about which the node knows nothing more.
const PartitionRoCE = "roce"

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

// Pod labels holding the UID of the controller object a pod's job label
// names, as each controller sets them on its pods. A tenant can copy a job
// label onto any pod of the namespace by writing a name it sees; a UID is
// chosen by the API server when the job is created:
//   - JobUIDLabelBatch, JobUIDLabelBatchLegacy: Job, both written by the Job
//     controller's strategy since 1.27 (k8s.io/api/batch/v1 ControllerUidLabel,
//     LegacyControllerUidLabel: "the job controller uses unprefixed labels for
//     job-name and controller-uid").
//   - JobUIDLabelJobSet: JobSet, on its child Jobs and their pods
//     (kubernetes-sigs/jobset api/jobset/v1alpha2 JobSetUIDKey). A JobSet's
//     pods also carry their child Job's controller-uid, which differs per
//     child Job, so only the label paired with the job label the selector
//     takes is used.
//
// LeaderWorkerSet and the Kubeflow training-operator v1 and mpi-operator v2
// label their pods with no UID: LWS's group-key is a SHA-1 of the namespace
// and leader pod name (kubernetes-sigs/lws genGroupUniqueKey), which anyone
// can compute, and kubeflow/common's labels are the job name, replica type,
// index and role.
const (
	JobUIDLabelBatch       = "batch.kubernetes.io/controller-uid"
	JobUIDLabelBatchLegacy = "controller-uid"
	JobUIDLabelJobSet      = "jobset.sigs.k8s.io/jobset-uid"
)

// JobUIDLabels are, for each job label, the UID labels its controller sets
// beside it, in the order the affinity lists them.
var JobUIDLabels = map[string][]string{
	JobLabelJobSet: {JobUIDLabelJobSet},
	JobLabelBatch:  {JobUIDLabelBatch, JobUIDLabelBatchLegacy},
}

// JobUIDKeys are the UID labels of the job JobSelector names that the pod
// carries: the keys of the job affinity's matchLabelKeys, which the API
// server turns into "key In (the pod's value)" when it stores the pod. Nil
// for a pod of no job and for a job whose controller sets no UID label.
func JobUIDKeys(labels map[string]string) []string {
	for _, k := range JobLabels {
		if _, ok := labels[k]; !ok {
			continue
		}
		var keys []string
		for _, u := range JobUIDLabels[k] {
			if _, ok := labels[u]; ok {
				keys = append(keys, u)
			}
		}
		return keys
	}
	return nil
}

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
