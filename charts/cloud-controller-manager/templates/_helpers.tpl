{{/*
The bundled provider's --cloud-provider name.
*/}}
{{- define "ccm.cloudProvider" -}}
{{- if eq .Values.provider "fake-cloud" -}}fake
{{- else if eq .Values.provider "do-like-cloud" -}}digitalocean
{{- else -}}{{ fail (printf "provider %q is not a bundled provider: use fake-cloud or do-like-cloud" .Values.provider) }}
{{- end -}}
{{- end -}}

{{/*
The image reference.
*/}}
{{- define "ccm.image" -}}
{{- $repository := .Values.image.repository | default (printf "%s-controller-manager" .Values.provider) -}}
{{- with .Values.image.registry }}{{ . }}/{{ end }}{{ $repository }}
{{- if .Values.image.digest }}@{{ .Values.image.digest }}
{{- else }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
The name of the cloud-config ConfigMap.
*/}}
{{- define "ccm.cloudConfigName" -}}
{{- .Values.cloudConfig.existingConfigMap | default (printf "%s-config" .Values.provider) -}}
{{- end -}}

{{/*
The name of the API token Secret (do-like-cloud).
*/}}
{{- define "ccm.tokenSecretName" -}}
{{- .Values.apiToken.existingSecret | default "do-like-api-token" -}}
{{- end -}}

{{/*
The provider's default cloud.yaml.
*/}}
{{- define "ccm.defaultCloudConfig" -}}
{{- if eq .Values.provider "fake-cloud" -}}
nodesAreInstances: true
{{- else -}}
# Without apiUrl the provider talks to DigitalOcean's own API
# (https://api.digitalocean.com; never tried live from this project, see
# docs/do-like-cloud.md). Point it at a simulator to try it out:
# apiUrl: http://do-like-api-simulator.example:8080
tokenFile: /etc/do-like-token/token
region: nyc1
cacheTtlSeconds: 10
{{- end -}}
{{- end -}}

{{/*
Extra metadata labels (commonLabels), indented for a metadata block; empty by default.
*/}}
{{- define "ccm.metadataLabels" -}}
{{- with .Values.commonLabels }}
  labels:
    {{- toYaml . | nindent 4 }}
{{- end -}}
{{- end -}}

{{/*
The Pods' selector labels: fixed, as a Deployment's selector cannot change.
*/}}
{{- define "ccm.selectorLabels" -}}
app: cloud-controller-manager
{{- end -}}

{{/*
Whether a PodMonitor or ServiceMonitor is asked for.
*/}}
{{- define "ccm.monitored" -}}
{{- if or .Values.metrics.podMonitor.enabled .Values.metrics.serviceMonitor.enabled }}true{{ end -}}
{{- end -}}
