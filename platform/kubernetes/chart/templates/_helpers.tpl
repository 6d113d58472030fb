{{/* The release's name, prefixed with "tidal-" unless it already says tidal: release `tidal` -> `tidal`. */}}
{{- define "tidal.fullname" -}}
{{- if contains "tidal" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "tidal-%s" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tidal.serviceAccountName" -}}{{ include "tidal.fullname" . }}{{- end -}}
{{- define "tidal.configName" -}}{{ include "tidal.fullname" . }}-config{{- end -}}
{{- define "tidal.secretName" -}}{{ include "tidal.fullname" . }}-secrets{{- end -}}

{{- define "tidal.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Labels every object carries. */}}
{{- define "tidal.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: tidal
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: tidal
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* A component's selector (dict "root" . "component" "web"): never changes after an install, a Deployment's
selector being immutable. */}}
{{- define "tidal.selectorLabels" -}}
app.kubernetes.io/name: tidal
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tidal.componentLabels" -}}
{{ include "tidal.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* A secret's reference (dict "root" . "value" <the value given> "ref" <its secretRef> "key" <its key in ours>
["optional" true]): the chart's Secret where a value was given, else the secretRef. */}}
{{- define "tidal.secretKeyRef" -}}
{{- $ref := ternary (dict "name" (include "tidal.secretName" .root) "key" .key) .ref (not (empty .value)) -}}
{name: {{ $ref.name }}, key: {{ $ref.key }}{{ if .optional }}, optional: true{{ end }}}
{{- end -}}

{{- define "tidal.env" -}}
envFrom:
  - configMapRef: {name: {{ include "tidal.configName" . }}}
env:
  - name: DATABASE_URL
    valueFrom: {secretKeyRef: {{ include "tidal.secretKeyRef" (dict "root" . "value" .Values.database.url "ref" .Values.database.secretRef "key" "database-url") }}}
  - name: REDIS_URL
    valueFrom: {secretKeyRef: {{ include "tidal.secretKeyRef" (dict "root" . "value" .Values.redis.url "ref" .Values.redis.secretRef "key" "redis-url") }}}
  - name: DJANGO_SECRET_KEY
    valueFrom: {secretKeyRef: {{ include "tidal.secretKeyRef" (dict "root" . "value" .Values.django.secretKey.value "ref" .Values.django.secretKey.secretRef "key" "django-secret-key") }}}
{{- end -}}

{{/* What every pod shares: the identity, the image's non-root user, where it may run. */}}
{{- define "tidal.podSpec" -}}
serviceAccountName: {{ include "tidal.serviceAccountName" . }}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001  # the image's USER
  runAsGroup: 10001
  seccompProfile: {type: RuntimeDefault}
{{- with .Values.imagePullSecrets }}
imagePullSecrets: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* The pod template's metadata: a change of the ConfigMap or of the chart's Secret rolls the pods, which read
them only at start. */}}
{{- define "tidal.podMetadata" -}}
labels:
  {{- include "tidal.componentLabels" . | nindent 2 }}
annotations:
  checksum/config: {{ include (print .root.Template.BasePath "/configmap.yaml") .root | sha256sum }}
  checksum/secrets: {{ include (print .root.Template.BasePath "/secret.yaml") .root | sha256sum }}
  {{- with .root.Values.podAnnotations }}
  {{- toYaml . | nindent 2 }}
  {{- end }}
{{- end -}}

{{- define "tidal.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: ["ALL"]}
{{- end -}}

{{/* Console replays (values: replays), in web and worker: their reports and uploads, and the traces they read. */}}
{{- define "tidal.replaysMounts" -}}
- {name: replays, mountPath: /app/.run/replays}
{{- if .Values.replays.tracesClaim }}
- {name: traces, mountPath: /app/traces, readOnly: true}
{{- end }}
{{- end -}}

{{- define "tidal.replaysVolumes" -}}
- name: replays
{{- if .Values.replays.existingClaim }}
  persistentVolumeClaim: {claimName: {{ .Values.replays.existingClaim }}}
{{- else }}
  emptyDir: {sizeLimit: 2Gi}
{{- end }}
{{- with .Values.replays.tracesClaim }}
- name: traces
  persistentVolumeClaim: {claimName: {{ . }}, readOnly: true}
{{- end }}
{{- end -}}
