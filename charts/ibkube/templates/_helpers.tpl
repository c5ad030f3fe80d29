{{/* Names. */}}
{{- define "ibkube.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "ibkube.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "ibkube.webhook.name" -}}{{ include "ibkube.fullname" . | trunc 55 | trimSuffix "-" }}-webhook{{- end -}}
{{- define "ibkube.webhook.configName" -}}{{ include "ibkube.fullname" . }}{{- end -}}
{{- define "ibkube.webhook.secretName" -}}{{ include "ibkube.webhook.name" . }}-tls{{- end -}}
{{- define "ibkube.agent.name" -}}{{ include "ibkube.fullname" . | trunc 52 | trimSuffix "-" }}-node-agent{{- end -}}

{{/* Labels. */}}
{{- define "ibkube.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "ibkube.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: ibkube
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "ibkube.webhook.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ibkube.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: webhook
{{- end -}}

{{- define "ibkube.agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "ibkube.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: node-agent
{{- end -}}

{{- define "ibkube.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/*
ibkube.webhook.selfCerts is "true" when the webhook manages its own certificates.
*/}}
{{- define "ibkube.webhook.selfCerts" -}}
{{- if and (not .Values.certManager.enabled) (eq .Values.webhook.certs.mode "self") -}}true{{- end -}}
{{- end -}}

{{/*
ibkube.stripNulls drops null values, and maps and lists left empty, from a
map, recursively, so config fields left null fall back to the binary's
defaults.
*/}}
{{- define "ibkube.stripNulls" -}}
{{- $out := dict -}}
{{- range $k, $v := . -}}
{{- if kindIs "map" $v -}}
{{- $m := include "ibkube.stripNulls" $v | fromYaml -}}
{{- if $m }}{{ $_ := set $out $k $m }}{{ end -}}
{{- else if kindIs "slice" $v -}}
{{- if $v }}{{ $_ := set $out $k $v }}{{ end -}}
{{- else if not (kindIs "invalid" $v) -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* ibkube.gpuResource: the resource that marks a GPU container. */}}
{{- define "ibkube.gpuResource" -}}
{{- default "nvidia.com/gpu" .Values.webhook.config.gpuResource -}}
{{- end -}}

{{/* ibkube.webhook.config: the WebhookConfig fields the chart writes. */}}
{{- define "ibkube.webhook.config" -}}
{{- $cfg := include "ibkube.stripNulls" .Values.webhook.config | fromYaml -}}
{{- $res := include "ibkube.stripNulls" .Values.rdmaResources | fromYaml -}}
{{- if $res }}{{ $_ := set $cfg "resources" $res }}{{ end -}}
{{- $ipoib := default dict $cfg.ipoib -}}
{{- if not $ipoib.name }}{{ $_ := set $ipoib "name" .Values.networks.ipoib.name }}{{ end -}}
{{- $_ := set $cfg "ipoib" $ipoib -}}
{{- $nri := .Values.agent.nri -}}
{{- if and (not $cfg.memlock) .Values.agent.enabled $nri.enabled $nri.memlockMax }}
{{- /* Pods ask for what the agent grants, so no injected pod is clamped. */ -}}
{{- $_ := set $cfg "memlock" $nri.memlockMax -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}

{{/*
ibkube.goMemLimit: 90% of a container's resources.limits.memory as a
GOMEMLIMIT value in MiB ("230MiB"), or nothing when there is no limit or it
is not written in Ki, Mi, Gi, Ti or plain bytes.
*/}}
{{- define "ibkube.goMemLimit" -}}
{{- $l := toString (dig "limits" "memory" "" .) -}}
{{- $mib := 0 -}}
{{- if regexMatch "^[0-9]+Gi$" $l }}{{ $mib = mul (trimSuffix "Gi" $l | atoi) 1024 }}
{{- else if regexMatch "^[0-9]+Mi$" $l }}{{ $mib = trimSuffix "Mi" $l | atoi }}
{{- else if regexMatch "^[0-9]+Ti$" $l }}{{ $mib = mul (trimSuffix "Ti" $l | atoi) 1048576 }}
{{- else if regexMatch "^[0-9]+Ki$" $l }}{{ $mib = div (trimSuffix "Ki" $l | atoi) 1024 }}
{{- else if regexMatch "^[0-9]+$" $l }}{{ $mib = div (atoi $l) 1048576 }}
{{- end -}}
{{- if gt $mib 0 }}{{ div (mul $mib 9) 10 }}MiB{{ end -}}
{{- end -}}

{{/* ibkube.agent.config: the AgentConfig fields the chart writes. */}}
{{- define "ibkube.agent.config" -}}
{{- $cfg := include "ibkube.stripNulls" .Values.agent.config | fromYaml -}}
{{- $r := .Values.rdmaResources -}}
{{- if and (kindIs "invalid" .Values.agent.config.pools) (or $r.shared $r.exclusive) -}}
{{- $sel := dict "vendors" (list "15b3") "linkLayers" (list "InfiniBand") -}}
{{- $pools := list
      (dict "resourceName" (default "rdma/shared_ib" $r.shared) "mode" "shared" "selector" $sel)
      (dict "resourceName" (default "rdma/ib" $r.exclusive) "mode" "exclusive" "selector" $sel) -}}
{{- $_ := set $cfg "pools" $pools -}}
{{- end -}}
{{- if $cfg }}{{ toYaml $cfg }}{{ end -}}
{{- end -}}

{{/*
ibkube.apiEnabled: tri-state switch. null = when the cluster serves the API
group/version given, true = always, false = never. Call with
(list .Capabilities <value> "group/version").
*/}}
{{- define "ibkube.apiEnabled" -}}
{{- $caps := index . 0 -}}{{- $v := index . 1 -}}{{- $gv := index . 2 -}}
{{- if kindIs "invalid" $v -}}
{{- if $caps.APIVersions.Has $gv -}}true{{- end -}}
{{- else if $v -}}true{{- end -}}
{{- end -}}

{{/*
ibkube.ipv4 turns "a.b.c.d" into an integer.
*/}}
{{- define "ibkube.ipv4" -}}
{{- $o := splitList "." . -}}
{{- add (mul (atoi (index $o 0)) 16777216) (mul (atoi (index $o 1)) 65536) (mul (atoi (index $o 2)) 256) (atoi (index $o 3)) -}}
{{- end -}}

{{/*
ibkube.cidr4 returns "start end" of an IPv4 CIDR, failing on host bits.
*/}}
{{- define "ibkube.cidr4" -}}
{{- $parts := splitList "/" . -}}
{{- $ip := include "ibkube.ipv4" (index $parts 0) | int64 -}}
{{- $size := 1 | int64 -}}
{{- range until (sub 32 (atoi (index $parts 1)) | int) }}{{ $size = mul $size 2 }}{{ end -}}
{{- if ne (mod $ip $size) 0 -}}
{{- fail (printf "networks.ipoib.ipam: %q has host bits set: want the network address of the range" .) -}}
{{- end -}}
{{- printf "%d %d" $ip (sub (add $ip $size) 1) -}}
{{- end -}}

{{/* ibkube.checkCIDR fails on an IPv4 CIDR with host bits set. */}}
{{- define "ibkube.checkCIDR" -}}
{{- if regexMatch "^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+/[0-9]+$" . }}{{ $_ := include "ibkube.cidr4" . }}{{ end -}}
{{- end -}}

{{/*
ibkube.checkRange fails when the IPAM range overlaps an address range a pod
network must not use (the same list as cni/nad.Reserved). IPv4 only; IPv6
ranges are left to ibkube-cni's own check.
*/}}
{{- define "ibkube.checkRange" -}}
{{- if regexMatch "^[0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+/[0-9]+$" . -}}
{{- $r := splitList " " (include "ibkube.cidr4" .) -}}
{{- $reserved := list
    (list "172.16.0.0/16" "Azure reserves it for the RDMA network of InfiniBand VM sizes")
    (list "169.254.0.0/16" "link-local (Azure IMDS 169.254.169.254)")
    (list "168.63.129.16/32" "Azure platform address (DNS, DHCP, health probes)")
    (list "127.0.0.0/8" "loopback")
    (list "224.0.0.0/4" "multicast") -}}
{{- range $reserved -}}
{{- $x := splitList " " (include "ibkube.cidr4" (index . 0)) -}}
{{- if and (le (index $r 0 | int64) (index $x 1 | int64)) (le (index $x 0 | int64) (index $r 1 | int64)) -}}
{{- fail (printf "networks.ipoib.ipam.range %s overlaps %s: %s; choose a range unused by the cluster's pod, service and VNet ranges" $ (index . 0) (index . 1)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/*
DRA (docs/dra.md). The driver name and the node label are the agent's
(contract/dra.go); the DeviceClass names follow from the pool's resource name
the same way (ibkube-<resource name with / _ . as ->).
*/}}
{{- define "ibkube.dra.driver" -}}rdma.infiniband.azure.com{{- end -}}
{{- define "ibkube.dra.nodeLabel" -}}infiniband.azure.com/allocation{{- end -}}
{{- define "ibkube.agent.draName" -}}{{ include "ibkube.fullname" . | trunc 48 | trimSuffix "-" }}-node-agent-dra{{- end -}}
{{- define "ibkube.dra.className" -}}ibkube-{{ . | lower | replace "/" "-" | replace "_" "-" | replace "." "-" }}{{- end -}}

{{/*
ibkube.dra.enabled is "true" when the DRA agent and DeviceClasses are
rendered. Asked for (node.allocation dra or node.dra.enabled true), the render
fails on a cluster that cannot run them: resource.k8s.io/v1 must be served and
Kubernetes must be at least 1.36, where the features the agent relies on are
on by default (DRAExtendedResource, DRAConsumableCapacity, DRADeviceTaints and
ResourceHealthStatus: beta and on in 1.36; the first and third GA in 1.37).
Not asked for (null), they are rendered only where the cluster can run them.
*/}}
{{- define "ibkube.dra.enabled" -}}
{{- $dra := .Values.node.dra -}}
{{- $asked := or (eq .Values.node.allocation "dra") (eq (toString $dra.enabled) "true") -}}
{{- $served := .Capabilities.APIVersions.Has "resource.k8s.io/v1" -}}
{{- $recent := semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version -}}
{{- if and (eq .Values.node.allocation "dra") (eq (toString $dra.enabled) "false") -}}
{{- fail "node.allocation is dra but node.dra.enabled is false: set node.dra.enabled to null or true, or node.allocation to deviceplugin" -}}
{{- end -}}
{{- if and $asked (not $served) -}}
{{- fail (printf "node.allocation dra (or node.dra.enabled true) needs the API resource.k8s.io/v1, which this cluster (Kubernetes %s) does not serve; accepted: Kubernetes >= 1.36 with resource.k8s.io/v1, or node.allocation deviceplugin" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if and $asked (not $recent) -}}
{{- fail (printf "node.allocation dra (or node.dra.enabled true) needs Kubernetes >= 1.36 (DRAExtendedResource, DRAConsumableCapacity, DRADeviceTaints and ResourceHealthStatus on by default), this cluster is %s; accepted: node.allocation deviceplugin on older clusters" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- if or $asked (and (kindIs "invalid" $dra.enabled) $served $recent) -}}true{{- end -}}
{{- end -}}

{{/*
ibkube.agent.pools: the pools the agent serves, as YAML (a list under
"pools"): agent.config.pools, else the agent's defaults named after
rdmaResources. The DeviceClasses follow them.
*/}}
{{- define "ibkube.agent.pools" -}}
{{- $pools := .Values.agent.config.pools -}}
{{- if kindIs "invalid" $pools -}}
{{- $r := .Values.rdmaResources -}}
{{- $pools = list
      (dict "resourceName" (default "rdma/shared_ib" $r.shared) "mode" "shared")
      (dict "resourceName" (default "rdma/ib" $r.exclusive) "mode" "exclusive") -}}
{{- end -}}
{{- toYaml (dict "pools" $pools) -}}
{{- end -}}

{{/*
ibkube.agent.affinity: agent.affinity with a node-label requirement added to
every required node selector term (terms are ORed, a term's expressions
ANDed), so the two agents' DaemonSets split the nodes by the allocation
label whatever else the user's affinity asks. Call with (list $ctx $expr).
*/}}
{{- define "ibkube.agent.affinity" -}}
{{- $ctx := index . 0 -}}{{- $expr := index . 1 -}}
{{- $aff := deepCopy (default dict $ctx.Values.agent.affinity) -}}
{{- $na := default dict $aff.nodeAffinity -}}
{{- $req := default dict $na.requiredDuringSchedulingIgnoredDuringExecution -}}
{{- $terms := default (list dict) $req.nodeSelectorTerms -}}
{{- $out := list -}}
{{- range $terms -}}
{{- $t := deepCopy . -}}
{{- $_ := set $t "matchExpressions" (append (default list $t.matchExpressions) $expr) -}}
{{- $out = append $out $t -}}
{{- end -}}
{{- $_ := set $req "nodeSelectorTerms" $out -}}
{{- $_ := set $na "requiredDuringSchedulingIgnoredDuringExecution" $req -}}
{{- $_ := set $aff "nodeAffinity" $na -}}
{{- toYaml $aff -}}
{{- end -}}
