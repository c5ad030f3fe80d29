package contract

// Where the webhook puts the NCCL conf file (the text of AnnotationNCCLConf)
// in selected containers, and where the node agent's per-rank conf expects
// it.
const (
	NCCLConfVolume   = "ibkube-nccl-conf"
	NCCLConfDir      = "/etc/ibkube/nccl"
	NCCLConfFileName = "nccl.conf"
	NCCLConfFile     = NCCLConfDir + "/" + NCCLConfFileName
	// EnvNCCLConfFile is the variable NCCL reads its conf file path from
	// (NVIDIA/nccl src/misc/param.cc initEnvFunc).
	EnvNCCLConfFile = "NCCL_CONF_FILE"
)
