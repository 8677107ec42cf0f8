{{/* Labels on every object the chart renders. */}}
{{- define "hearth.labels" -}}
app.kubernetes.io/part-of: hearth
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "hearth.image" -}}
{{ .repository }}:{{ .tag }}
{{- end -}}
