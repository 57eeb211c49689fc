{{/*
Whether the provider is bundled with the chart (a preset: fake-cloud or do-like-cloud):
"true" or empty.
*/}}
{{- define "ccm.bundled" -}}
{{- if has .Values.provider (list "fake-cloud" "do-like-cloud") }}true{{ end -}}
{{- end -}}

{{/*
The --cloud-provider name: cloudProvider, else the bundled provider's (fake, digitalocean),
else the provider's own name.
*/}}
{{- define "ccm.cloudProvider" -}}
{{- if .Values.cloudProvider -}}{{ .Values.cloudProvider }}
{{- else if eq .Values.provider "fake-cloud" -}}fake
{{- else if eq .Values.provider "do-like-cloud" -}}digitalocean
{{- else -}}{{ .Values.provider }}
{{- end -}}
{{- end -}}

{{/*
The image reference. A bundled provider's: <registry>/<provider>-controller-manager:<appVersion>
by default, the registry ghcr.io/ccm-rs unless image.registry is set ("" leaves it out).
Another provider's: image.repository (under image.registry when set) with image.tag or
image.digest, both required (the chart's appVersion is the framework's version).
*/}}
{{- define "ccm.image" -}}
{{- $registry := .Values.image.registry | default "" -}}
{{- $repository := .Values.image.repository -}}
{{- $tag := ternary "" (toString .Values.image.tag) (kindIs "invalid" .Values.image.tag) -}}
{{- if include "ccm.bundled" . -}}
{{- $registry = ternary .Values.image.registry "ghcr.io/ccm-rs" (hasKey .Values.image "registry") -}}
{{- $repository = $repository | default (printf "%s-controller-manager" .Values.provider) -}}
{{- $tag = $tag | default .Chart.AppVersion -}}
{{- else -}}
{{- if not $repository -}}
{{- fail (printf "image.repository: provider %q is not bundled with the chart (fake-cloud, do-like-cloud), so it has no default image: name yours, e.g. image.repository=registry.example.com/%s/%s-cloud-controller-manager (or a path under image.registry)" .Values.provider .Values.provider .Values.provider) -}}
{{- end -}}
{{- if not (or $tag .Values.image.digest) -}}
{{- fail (printf "image.tag: provider %q is not bundled with the chart, so its image needs image.tag (e.g. 0.1.0) or image.digest: the chart's appVersion (%s) is the ccm-rs framework's version, not the provider's" .Values.provider .Chart.AppVersion) -}}
{{- end -}}
{{- end -}}
{{- with $registry }}{{ . }}/{{ end }}{{ $repository }}
{{- if .Values.image.digest }}@{{ .Values.image.digest }}
{{- else }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/*
Whether the Pod gets a cloud config ("true" or empty): always for a bundled provider (its
default cloud.yaml), for another only with cloudConfig.content or existingConfigMap.
*/}}
{{- define "ccm.hasCloudConfig" -}}
{{- if or (include "ccm.bundled" .) .Values.cloudConfig.content .Values.cloudConfig.existingConfigMap }}true{{ end -}}
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
A bundled provider's default cloud.yaml (another provider has none).
*/}}
{{- define "ccm.defaultCloudConfig" -}}
{{- if eq .Values.provider "fake-cloud" -}}
nodesAreInstances: true
{{- else if eq .Values.provider "do-like-cloud" -}}
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
