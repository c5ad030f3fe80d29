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
