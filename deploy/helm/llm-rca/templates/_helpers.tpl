{{/* Labels every object carries; `component` is api, worker or migrate. */}}
{{- define "llm-rca.labels" -}}
app.kubernetes.io/name: llm-rca
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/part-of: llm-serving-rca
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "llm-rca.selector" -}}
app.kubernetes.io/name: llm-rca
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "llm-rca.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* Pod-level security: non-root, numeric uid (runAsNonRoot cannot check a named user). */}}
{{- define "llm-rca.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: {{ .Values.runAsUser }}
  runAsGroup: {{ .Values.runAsUser }}
  fsGroup: {{ .Values.runAsUser }}
  seccompProfile: {type: RuntimeDefault}
automountServiceAccountToken: false
{{- end }}

{{- define "llm-rca.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities: {drop: [ALL]}
volumeMounts:
  - {name: data, mountPath: /data}
  - {name: tmp, mountPath: /tmp}
{{- end }}

{{- define "llm-rca.volumes" -}}
volumes:
  - {name: data, emptyDir: {}}
  - {name: tmp, emptyDir: {}}
{{- end }}

{{/* Secrets, each from the existing Secret by secretKeyRef. */}}
{{- define "llm-rca.secretEnv" -}}
{{- $secret := .Values.existingSecret -}}
{{- range $name, $key := dict "RCA_DATABASE_URL" "database-url" "RCA_BROKER_URL" "broker-url" "RCA_WEBHOOK_TOKEN" "webhook-token" "RCA_API_TOKENS" "api-tokens" }}
- name: {{ $name }}
  valueFrom: {secretKeyRef: {name: {{ $secret }}, key: {{ $key }}}}
{{- end }}
{{- range $name, $key := dict "RCA_LLM_API_KEY" "llm-api-key" "RCA_SLACK_WEBHOOK_URL" "slack-webhook-url" "RCA_SLACK_BOT_TOKEN" "slack-bot-token" "RCA_SLACK_SIGNING_SECRET" "slack-signing-secret" }}
- name: {{ $name }}
  valueFrom: {secretKeyRef: {name: {{ $secret }}, key: {{ $key }}, optional: true}}
{{- end }}
{{- end }}
