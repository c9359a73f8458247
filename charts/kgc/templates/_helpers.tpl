{{/*
The chart's name, for app.kubernetes.io/name.
*/}}
{{- define "kgc.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The objects' name: fullnameOverride, else the release name when it contains
the chart's name (`helm install kgc` names everything kgc, as deploy/ does),
else <release>-<chart>. Other names append a suffix to it, so it is cut to
leave room for the longest ("-namespace-lifecycle").
*/}}
{{- define "kgc.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 43 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 43 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 43 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
helm.sh/chart: name-version.
*/}}
{{- define "kgc.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Every object's labels.
*/}}
{{- define "kgc.labels" -}}
helm.sh/chart: {{ include "kgc.chart" . }}
{{ include "kgc.selectorLabels" . }}
app.kubernetes.io/version: {{ (.Values.image.tag | default .Chart.AppVersion) | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
What selects the release's pods: the Deployment's, the Service's, the
PodDisruptionBudget's, the anti-affinity's and the NetworkPolicy's selector.
*/}}
{{- define "kgc.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kgc.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The image: repository:tag, or repository[:tag]@digest.
*/}}
{{- define "kgc.image" -}}
{{- $i := .Values.image }}
{{- if $i.digest }}
{{- if $i.tag }}{{ printf "%s:%s@%s" $i.repository $i.tag $i.digest }}{{ else }}{{ printf "%s@%s" $i.repository $i.digest }}{{ end }}
{{- else }}
{{- printf "%s:%s" $i.repository ($i.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
The Lease kgc leads with, as kgc run names it: --leader-elect-resource-name,
given only when it is not kgc's default "kgc"; with --dry-run and the
default name, kgc appends "-shadow".
*/}}
{{- define "kgc.leaseName" -}}
{{- $name := .Values.leaderElection.resourceName }}
{{- if and .Values.shadow.enabled (eq $name "kgc") }}{{ $name }}-shadow{{ else }}{{ $name }}{{ end }}
{{- end }}

{{/*
One kgc run flag, as a YAML list item, when its value differs from kgc run's
default: (dict "name" "kube-api-qps" "value" 40 "default" 20). An integer
value must come through int64 (values are read as float64, and a large
float prints in exponent form).
*/}}
{{- define "kgc.flag" -}}
{{- if ne (toString .value) (toString .default) }}
- {{ printf "--%s=%v" .name .value | quote }}
{{- end }}
{{- end }}

{{/*
kgc run's arguments. The first four are the base's, always given; every
other flag only when its value is not kgc run's default (values.yaml's), so
that kgc run's own defaults and completion apply: with --dry-run, kgc turns
the breaker and the restore hold off unless they were given.
*/}}
{{- define "kgc.args" -}}
{{- $v := .Values }}
- run
- --leader-elect{{ if not $v.leaderElection.enabled }}=false{{ end }}
- --leader-elect-resource-namespace={{ .Release.Namespace }}
- --secure-port={{ int64 $v.serving.securePort }}
{{- include "kgc.flag" (dict "name" "leader-elect-lease-duration" "value" $v.leaderElection.leaseDuration "default" "15s") }}
{{- include "kgc.flag" (dict "name" "leader-elect-renew-deadline" "value" $v.leaderElection.renewDeadline "default" "10s") }}
{{- include "kgc.flag" (dict "name" "leader-elect-retry-period" "value" $v.leaderElection.retryPeriod "default" "2s") }}
{{- include "kgc.flag" (dict "name" "leader-elect-resource-name" "value" $v.leaderElection.resourceName "default" "kgc") }}
{{- include "kgc.flag" (dict "name" "kube-api-qps" "value" $v.kubeAPI.qps "default" 20) }}
{{- include "kgc.flag" (dict "name" "kube-api-burst" "value" (int64 $v.kubeAPI.burst) "default" 30) }}
{{- include "kgc.flag" (dict "name" "kube-api-content-type" "value" $v.kubeAPI.contentType "default" "") }}
{{- include "kgc.flag" (dict "name" "concurrent-gc-syncs" "value" (int64 $v.workers.concurrentGCSyncs) "default" 20) }}
{{- include "kgc.flag" (dict "name" "max-writes-inflight" "value" (int64 $v.workers.maxWritesInflight) "default" 0) }}
{{- include "kgc.flag" (dict "name" "deletion-breaker" "value" $v.breaker.enabled "default" true) }}
{{- include "kgc.flag" (dict "name" "breaker-window" "value" $v.breaker.window "default" "10m") }}
{{- include "kgc.flag" (dict "name" "breaker-unobserved-owners" "value" (int64 $v.breaker.unobservedOwners) "default" 200) }}
{{- include "kgc.flag" (dict "name" "breaker-vanished-minimum" "value" (int64 $v.breaker.vanishedMinimum) "default" 10) }}
{{- include "kgc.flag" (dict "name" "breaker-rollback" "value" $v.breaker.rollback "default" true) }}
{{- include "kgc.flag" (dict "name" "breaker-dangling-fraction" "value" $v.breaker.danglingFraction "default" 0) }}
{{- include "kgc.flag" (dict "name" "breaker-dangling-minimum" "value" (int64 $v.breaker.danglingMinimum) "default" 1000) }}
{{- include "kgc.flag" (dict "name" "hold-restored-references" "value" $v.breaker.holdRestoredReferences "default" true) }}
{{- include "kgc.flag" (dict "name" "orphan-journal" "value" $v.orphanJournal.enabled "default" true) }}
{{- include "kgc.flag" (dict "name" "orphan-journal-ttl" "value" $v.orphanJournal.ttl "default" "10m") }}
{{- include "kgc.flag" (dict "name" "namespace-lifecycle" "value" $v.namespaceLifecycle.enabled "default" false) }}
{{- include "kgc.flag" (dict "name" "dry-run" "value" $v.shadow.enabled "default" false) }}
{{- include "kgc.flag" (dict "name" "shadow-window" "value" $v.shadow.window "default" "3m") }}
{{- include "kgc.flag" (dict "name" "profiling" "value" $v.serving.profiling "default" false) }}
{{- if $v.serving.tlsSecretName }}
- --tls-cert-file=/etc/kgc/tls/tls.crt
- --tls-private-key-file=/etc/kgc/tls/tls.key
{{- end }}
{{- include "kgc.flag" (dict "name" "logging-format" "value" $v.logging.format "default" "text") }}
{{- include "kgc.flag" (dict "name" "v" "value" (int64 $v.logging.verbosity) "default" 0) }}
{{- range $v.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
Refuses values kgc run would refuse at start, at install time instead.
*/}}
{{- define "kgc.validate" -}}
{{- if and .Values.shadow.enabled .Values.namespaceLifecycle.enabled }}
{{- fail "shadow.enabled and namespaceLifecycle.enabled exclude each other: shadow mode makes no write, and the namespace lifecycle is nothing but writes" }}
{{- end }}
{{- end }}
