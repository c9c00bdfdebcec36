{{/* Chart name, truncated for label values. */}}
{{- define "sparse.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Prefix of every object name: the release name (with "sparse" unless it already has it). */}}
{{- define "sparse.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sparse.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "sparse.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sparse
{{- end -}}

{{/* Selector labels of one component: include "sparse.selector" (list . "extender") */}}
{{- define "sparse.selector" -}}
{{- $ctx := index . 0 -}}
app.kubernetes.io/name: {{ include "sparse.name" $ctx }}
app.kubernetes.io/instance: {{ $ctx.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* image reference: include "sparse.image" (list . .Values.extender.image) */}}
{{- define "sparse.image" -}}
{{- $ctx := index . 0 -}}{{- $img := index . 1 -}}
{{- printf "%s:%s" $img.repository (default $ctx.Chart.AppVersion $img.tag) -}}
{{- end -}}

{{/* kube-scheduler tag: explicit, else the cluster's vMAJOR.MINOR.PATCH (no vendor suffix). */}}
{{- define "sparse.schedulerTag" -}}
{{- if .Values.scheduler.image.tag -}}
{{- .Values.scheduler.image.tag -}}
{{- else -}}
{{- $v := semver .Capabilities.KubeVersion.Version -}}
{{- printf "v%d.%d.%d" $v.Major $v.Minor $v.Patch -}}
{{- end -}}
{{- end -}}

{{- define "sparse.extenderService" -}}{{ include "sparse.fullname" . }}-extender{{- end -}}
{{- define "sparse.webhookService" -}}{{ include "sparse.fullname" . }}-webhook{{- end -}}
{{- define "sparse.redisService" -}}{{ include "sparse.fullname" . }}-redis{{- end -}}

{{- define "sparse.extenderURL" -}}
{{- printf "http://%s.%s.svc:%d%s" (include "sparse.extenderService" .) .Release.Namespace (int .Values.extender.port) .Values.extender.prefix -}}
{{- end -}}

{{/* redis:// URL shared by the extender replicas and the predictor. */}}
{{- define "sparse.redisURL" -}}
{{- if .Values.redis.enabled -}}
{{- printf "redis://%s.%s.svc:6379/0" (include "sparse.redisService" .) .Release.Namespace -}}
{{- else -}}
{{- required "redis.externalUrl is required when redis.enabled=false" .Values.redis.externalUrl -}}
{{- end -}}
{{- end -}}

{{/* Pod-level security context for our own images (numeric non-root user of docker/). */}}
{{- define "sparse.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "sparse.pullSecrets" -}}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/* Preferred anti-affinity spreading one component's replicas over nodes. */}}
{{- define "sparse.spread" -}}
{{- $ctx := index . 0 -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "sparse.selector" . | nindent 12 }}
{{- end -}}
