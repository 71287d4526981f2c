{{/*
Names and labels shared by every template of the chart.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "tessera.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name: "<release>-<chart>", or the release name alone when it already contains the
chart name; cut to 63 characters, the limit of a DNS label.
*/}}
{{- define "tessera.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* "<chart>-<version>", for the helm.sh/chart label. */}}
{{- define "tessera.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The labels of every resource of the release. */}}
{{- define "tessera.labels" -}}
helm.sh/chart: {{ include "tessera.chart" . }}
{{ include "tessera.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: tessera
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The labels that select the operator pod; they must never change between upgrades. */}}
{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tessera.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The operator's ServiceAccount name. */}}
{{- define "tessera.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tessera.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image, its tag defaulting to the chart's appVersion. */}}
{{- define "tessera.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The operator's permissions, shared by the ClusterRole and the per-namespace Roles: its own
resources, the children it creates for each job, Events, and its peering object (cluster-wide
or per namespace, as the operator watches). Nothing else: no Secrets (pods read their
credentials themselves).
*/}}
{{- define "tessera.operatorRules" -}}
# EmbeddingJobs: watched, patched (finalizers, kopf's annotations), deleted after their TTL.
- apiGroups: ["tessera.dev"]
  resources: ["embeddingjobs"]
  verbs: ["get", "list", "watch", "patch", "delete"]
# Their status, written by the operator only.
- apiGroups: ["tessera.dev"]
  resources: ["embeddingjobs/status"]
  verbs: ["get", "patch", "update"]
# The children of each job: lock server, partition server and trainer pods, their Services and
# the job's config.
- apiGroups: [""]
  resources: ["pods", "services", "configmaps"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# The first trainer's log, where the operator reads training progress for the status.
- apiGroups: [""]
  resources: ["pods/log"]
  verbs: ["get"]
# The NetworkPolicy that admits only a job's own pods to its servers.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Events about each job, for `kubectl describe`.
- apiGroups: ["", "events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
# The peering object, where the replicas keep each other informed of who is alive.
- apiGroups: ["kopf.dev"]
  resources: [{{ ternary "kopfpeerings" "clusterkopfpeerings" (not (empty .Values.rbac.namespaces)) | quote }}]
  verbs: ["get", "list", "watch", "patch"]
{{- end }}
