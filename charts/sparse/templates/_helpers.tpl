{{/* Chart name (nameOverride), truncated for label values. */}}
{{- define "sparse.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Prefix of every object name: fullnameOverride, else the release name (with the chart name
unless the release name already contains it). 50 characters leave room for the component suffix.
*/}}
{{- define "sparse.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
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

{{/*
Image reference: include "sparse.image" (list . .Values.extender.image).
global.imageRegistry replaces the registry part of the repository (the first path element
when it names a host: contains "." or ":" or is "localhost"), or is prepended when there is none.
The tag defaults to the chart's appVersion.
*/}}
{{- define "sparse.image" -}}
{{- $ctx := index . 0 -}}{{- $img := index . 1 -}}
{{- $repo := $img.repository -}}
{{- $registry := ((($ctx.Values.global | default dict).imageRegistry) | default "") | trimSuffix "/" -}}
{{- if $registry -}}
{{- $parts := splitList "/" $repo -}}
{{- $first := first $parts -}}
{{- if and (gt (len $parts) 1) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) -}}
{{- $repo = join "/" (rest $parts) -}}
{{- end -}}
{{- $repo = printf "%s/%s" $registry $repo -}}
{{- end -}}
{{- $tag := default $ctx.Chart.AppVersion $img.tag -}}
{{- if and (hasKey $img "digest") $img.digest -}}
{{- printf "%s@%s" $repo $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $repo $tag -}}
{{- end -}}
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
{{- define "sparse.redisHeadless" -}}{{ include "sparse.fullname" . }}-redis-headless{{- end -}}
{{- define "sparse.redisStatefulSet" -}}
{{- include "sparse.fullname" . }}-redis{{ if .Values.redis.sentinel.enabled }}-ha{{ end }}
{{- end -}}
{{- define "sparse.sentinelService" -}}{{ include "sparse.fullname" . }}-redis-sentinel{{- end -}}
{{- define "sparse.extenderTLSSecret" -}}
{{- default (printf "%s-extender-tls" (include "sparse.fullname" .)) .Values.extender.tls.existingSecret -}}
{{- end -}}

{{/* ServiceAccount name of a component: include "sparse.serviceAccountName" (list . "agent") */}}
{{- define "sparse.serviceAccountName" -}}
{{- $ctx := index . 0 -}}{{- $component := index . 1 -}}
{{- $sa := (index $ctx.Values $component).serviceAccount | default dict -}}
{{- if $sa.name -}}
{{- $sa.name -}}
{{- else if (hasKey $sa "create" | ternary $sa.create true) -}}
{{- printf "%s-%s" (include "sparse.fullname" $ctx) $component -}}
{{- else -}}
default
{{- end -}}
{{- end -}}

{{- define "sparse.extenderScheme" -}}{{ ternary "https" "http" .Values.extender.tls.enabled }}{{- end -}}

{{- define "sparse.extenderURL" -}}
{{- printf "%s://%s.%s.svc:%d%s" (include "sparse.extenderScheme" .) (include "sparse.extenderService" .) .Release.Namespace (int .Values.extender.port) .Values.extender.prefix -}}
{{- end -}}

{{/* Bundled Redis: password from a Secret (generated or existing)? */}}
{{- define "sparse.redisAuth" -}}
{{- if or .Values.redis.enabled .Values.redis.auth.existingSecret -}}{{ .Values.redis.auth.enabled }}{{- end -}}
{{- end -}}
{{- define "sparse.redisSecretName" -}}
{{- default (printf "%s-redis-auth" (include "sparse.fullname" .)) .Values.redis.auth.existingSecret -}}
{{- end -}}

{{/*
Store URL of the extender replicas (--store). No password in it: our pods read
SPARSE_REDIS_PASSWORD. With Sentinel: sentinel://<sentinel service>:26379/<master name>.
*/}}
{{- define "sparse.redisURL" -}}
{{- if not .Values.redis.enabled -}}
{{- required "redis.externalUrl is required when redis.enabled=false" .Values.redis.externalUrl -}}
{{- else if .Values.redis.sentinel.enabled -}}
{{- printf "sentinel://%s.%s.svc:26379/%s" (include "sparse.sentinelService" .) .Release.Namespace .Values.redis.sentinel.masterName -}}
{{- else -}}
{{- printf "redis://%s.%s.svc:6379/0" (include "sparse.redisService" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* env SPARSE_REDIS_PASSWORD from the Redis Secret (when Redis has a password). */}}
{{- define "sparse.redisPasswordEnv" -}}
{{- if eq (include "sparse.redisAuth" .) "true" }}
- name: SPARSE_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "sparse.redisSecretName" . }}
      key: {{ .Values.redis.auth.existingSecretKey }}
{{- end }}
{{- end -}}

{{/* Pod-level security context (podSecurityContext; numeric non-root user of docker/). */}}
{{- define "sparse.podSecurityContext" -}}
{{- toYaml .Values.podSecurityContext -}}
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

{{/*
Pod template metadata: include "sparse.podMetadata" (list . "extender" $v $extraAnnotations)
Selector labels + podLabels (global, then the component's); podAnnotations likewise, plus the
template's own (checksums).
*/}}
{{- define "sparse.podMetadata" -}}
{{- $ctx := index . 0 -}}{{- $component := index . 1 -}}{{- $v := index . 2 -}}
{{- $extra := index . 3 | default dict -}}
{{- $labels := merge (dict) ($v.podLabels | default dict) ($ctx.Values.podLabels | default dict) -}}
{{- $annotations := merge (dict) $extra ($v.podAnnotations | default dict) ($ctx.Values.podAnnotations | default dict) -}}
labels:
  {{- include "sparse.selector" (list $ctx $component) | nindent 2 }}
  {{- range $k, $val := $labels }}
  {{- if not (hasPrefix "app.kubernetes.io/" $k) }}
  {{ $k }}: {{ $val | quote }}
  {{- end }}
  {{- end }}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
Placement of a component's pods: include "sparse.placement" (list . "extender" $v $spreadDefault)
nodeSelector, tolerations, affinity (default: spread over nodes when $spreadDefault),
topologySpreadConstraints (labelSelector filled in when missing), priorityClassName.
*/}}
{{- define "sparse.placement" -}}
{{- $ctx := index . 0 -}}{{- $component := index . 1 -}}{{- $v := index . 2 -}}
{{- $spread := index . 3 -}}
{{- with $v.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.affinity }}
affinity:
  {{- toYaml $v.affinity | nindent 2 }}
{{- else if $spread }}
affinity:
  {{- include "sparse.spread" (list $ctx $component) | nindent 2 }}
{{- end }}
{{- with $v.topologySpreadConstraints }}
topologySpreadConstraints:
  {{- range . }}
  {{- $c := . }}
  {{- if not (hasKey $c "labelSelector") }}
  {{- $c = merge (dict "labelSelector" (dict "matchLabels" (include "sparse.selector" (list $ctx $component) | fromYaml))) $c }}
  {{- end }}
  - {{- toYaml $c | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/*
The extender's generated CA and serving certificate as YAML {ca, crt, key} (base64 PEM),
computed once per render (cached in .Values, so the Secret, the pod checksum and the scheduler's
caData agree) and reused from the existing Secret on upgrade (lookup).
*/}}
{{- define "sparse.extenderCertPair" -}}
{{- $cache := .Values._sparseGenerated | default dict -}}
{{- if not (hasKey $cache "extenderTLS") -}}
{{- $v := .Values.extender.tls -}}
{{- $fullname := include "sparse.fullname" . -}}
{{- $svc := include "sparse.extenderService" . -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "sparse.extenderTLSSecret" .) -}}
{{- if and $existing (index ($existing.data | default dict) "ca.crt") -}}
{{- $_ := set $cache "extenderTLS" (dict "ca" (index $existing.data "ca.crt") "crt" (index $existing.data "tls.crt") "key" (index $existing.data "tls.key")) -}}
{{- else -}}
{{- $dns := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc .Release.Namespace) -}}
{{- /* ECDSA P-256: as strong as RSA-3072, and generated at once (RSA takes ~1 s). */}}
{{- $ca := genCAWithKey (printf "%s-extender-ca" $fullname) (int $v.validityDays) (genPrivateKey "ecdsa") -}}
{{- $cert := genSignedCertWithKey (printf "%s.%s.svc" $svc .Release.Namespace) $v.ipSANs $dns (int $v.validityDays) $ca (genPrivateKey "ecdsa") -}}
{{- $_ := set $cache "extenderTLS" (dict "ca" ($ca.Cert | b64enc) "crt" ($cert.Cert | b64enc) "key" ($cert.Key | b64enc)) -}}
{{- end -}}
{{- $_ := set .Values "_sparseGenerated" $cache -}}
{{- end -}}
{{- toYaml (get $cache "extenderTLS") -}}
{{- end -}}

{{/* The generated (or existing) Redis password, once per render; base64. */}}
{{- define "sparse.redisPassword" -}}
{{- $cache := .Values._sparseGenerated | default dict -}}
{{- if not (hasKey $cache "redisPassword") -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace (include "sparse.redisSecretName" .) -}}
{{- $key := .Values.redis.auth.existingSecretKey -}}
{{- if and $existing (index ($existing.data | default dict) $key) -}}
{{- $_ := set $cache "redisPassword" (index $existing.data $key) -}}
{{- else -}}
{{- $_ := set $cache "redisPassword" (randAlphaNum 32 | b64enc) -}}
{{- end -}}
{{- $_ := set .Values "_sparseGenerated" $cache -}}
{{- end -}}
{{- get $cache "redisPassword" -}}
{{- end -}}

{{/*
The predictor's redis:// URL. Its client takes plain URLs only, so the password goes into the
URL through the kubelet's $(VAR) expansion of SPARSE_REDIS_PASSWORD (never into the pod spec).
With Sentinel it writes to the first Redis pod: predictions are a cache with a TTL, and after a
failover a write to a replica fails visibly (sparse_predictor_errors_total) until that pod is
primary again or the worker follows sentinel:// itself.
*/}}
{{- define "sparse.predictorRedisURL" -}}
{{- $auth := ternary ":$(SPARSE_REDIS_PASSWORD)@" "" (eq (include "sparse.redisAuth" .) "true") -}}
{{- if not .Values.redis.enabled -}}
{{- $url := required "redis.externalUrl is required when redis.enabled=false" .Values.redis.externalUrl -}}
{{- if and $auth (hasPrefix "redis://" $url) (not (contains "@" $url)) -}}
{{- printf "redis://%s%s" $auth (trimPrefix "redis://" $url) -}}
{{- else -}}
{{- $url -}}
{{- end -}}
{{- else if .Values.redis.sentinel.enabled -}}
{{- printf "redis://%s%s-0.%s.%s.svc:6379/0" $auth (include "sparse.redisStatefulSet" .) (include "sparse.redisHeadless" .) .Release.Namespace -}}
{{- else -}}
{{- printf "redis://%s%s.%s.svc:6379/0" $auth (include "sparse.redisService" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}
