{{/*
Shared names and labels. Every object carries the standard app.kubernetes.io labels so that
`kubectl get all -l app.kubernetes.io/instance=<release>` finds everything the chart made.
*/}}

{{- define "nodetopo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nodetopo.fullname" -}}
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

{{/* Names of the two components' objects (Deployment/DaemonSet, ServiceAccount, Service, ClusterRole). */}}
{{- define "nodetopo.operatorName" -}}
{{- printf "%s-operator" (include "nodetopo.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nodetopo.agentName" -}}
{{- printf "%s-agent" (include "nodetopo.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "nodetopo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "nodetopo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: nodetopo
{{- end -}}

{{/* Selector labels: stable across upgrades (never include the version). */}}
{{- define "nodetopo.operatorSelectorLabels" -}}
app.kubernetes.io/name: {{ include "nodetopo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}

{{- define "nodetopo.agentSelectorLabels" -}}
app.kubernetes.io/name: {{ include "nodetopo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: agent
{{- end -}}

{{/* image: repository:tag (tag defaults to appVersion), or repository@digest when a digest is set. */}}
{{- define "nodetopo.image" -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository (default .appVersion .image.tag) -}}
{{- end -}}
{{- end -}}

{{/*
Container securityContext shared by both components: nothing beyond what the binaries need.
No capabilities at all (the agent reads world-readable sysfs files and its own hostPath
directories as their owner), a read-only root filesystem and no privilege escalation.
*/}}
{{- define "nodetopo.containerSecurityContext" -}}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The ServiceAccount username of the agent, as the API server sees it in requests. */}}
{{- define "nodetopo.agentUsername" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "nodetopo.agentName" .) -}}
{{- end -}}

{{/*
Whether the agent reads the kubelet's PodResources API: with nrt.enabled or
agent.readPodResources, unless agent.podResourcesSocket is empty. Renders "true" or nothing.
*/}}
{{- define "nodetopo.podResources" -}}
{{- if and .Values.agent.podResourcesSocket (or .Values.nrt.enabled .Values.agent.readPodResources) -}}
true
{{- end -}}
{{- end -}}

{{/*
Whether the agent reads the kubelet's configuration files for the topology manager
configuration its NodeResourceTopology publishes: with nrt.enabled, when
agent.readKubeletConfig mounts them read-only, or when actuation mounts them anyway.
Renders "true" or nothing.
*/}}
{{- define "nodetopo.readKubeletConfig" -}}
{{- if and .Values.agent.readKubeletConfig (not .Values.nrt.enabled) -}}
{{- fail "agent.readKubeletConfig needs nrt.enabled: the files are read only for the NodeResourceTopology's topology manager policy and scope" -}}
{{- end -}}
{{- if and .Values.nrt.enabled (or .Values.agent.readKubeletConfig .Values.agent.actuation.enabled) -}}
true
{{- end -}}
{{- end -}}

{{/*
Whether the agent reads the running kubelet's command line in the host's /proc (mounted
read-only at /host/proc): for actuation's check before each apply, and for the flags that
override the files the NodeResourceTopology's topology manager configuration is read from.
agent.actuation.checkKubeletProcess false turns both off. Renders "true" or nothing.
*/}}
{{- define "nodetopo.hostProc" -}}
{{- if and .Values.agent.actuation.checkKubeletProcess (or .Values.agent.actuation.enabled (include "nodetopo.readKubeletConfig" .)) -}}
true
{{- end -}}
{{- end -}}

{{/* The uid the agent container runs as: 0 to reach the PodResources socket or for actuation, else agent.runAsUser. */}}
{{- define "nodetopo.agentUid" -}}
{{- if or (include "nodetopo.podResources" .) .Values.agent.actuation.enabled -}}
0
{{- else -}}
{{- .Values.agent.runAsUser -}}
{{- end -}}
{{- end -}}

{{/*
KUBERNETES_SERVICE_HOST/PORT from apiServer (empty: the kubelet's own injection stands).
*/}}
{{- define "nodetopo.apiServerEnv" -}}
{{- with .Values.apiServer }}
{{- if and .port (not .host) }}
{{- fail "apiServer.port needs apiServer.host" }}
{{- end }}
{{- if .host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ .host | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ .port | default "443" | quote }}
{{- end }}
{{- end }}
{{- end }}
