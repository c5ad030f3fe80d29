package mutate

// LabelPodSecurityEnforce is the Pod Security label the capability policy
// reads.
const LabelPodSecurityEnforce = "pod-security.kubernetes.io/enforce"
