package mutate

// Pod Security label the capability policy reads.
const LabelPodSecurityEnforce = "pod-security.kubernetes.io/enforce"
