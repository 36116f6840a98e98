{{/* The release's full name, at most 63 characters. */}}
{{- define "loadaware-epp.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "loadaware-epp.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selector labels of the picker pods. */}}
{{- define "loadaware-epp.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: picker
{{- end -}}

{{/* Selector labels of the Envoy gateway pods. */}}
{{- define "loadaware-epp.envoySelectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: envoy-gateway
{{- end -}}

{{- define "loadaware-epp.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "loadaware-epp.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "loadaware-epp.poolName" -}}
{{- default (include "loadaware-epp.fullname" .) .Values.inferencePool.name -}}
{{- end -}}

{{/* The picker Service's in-cluster DNS name. */}}
{{- define "loadaware-epp.serviceHost" -}}
{{- if gt (int .Values.replicaCount) 1 -}}
{{- /* Several replicas: the headless Service, so Envoy resolves every pod and spreads its streams. */ -}}
{{- printf "%s-headless.%s.svc.cluster.local" (include "loadaware-epp.fullname" .) .Release.Namespace -}}
{{- else -}}
{{- printf "%s.%s.svc.cluster.local" (include "loadaware-epp.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* The NATS URL the replicas share state over ("" for one replica without nats.url). */}}
{{- define "loadaware-epp.natsURL" -}}
{{- if .Values.nats.url -}}
{{- .Values.nats.url -}}
{{- else if .Values.nats.deploy -}}
{{- printf "nats://%s-nats.%s.svc.cluster.local:4222" (include "loadaware-epp.fullname" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{/* Whether the chart renders envoy/fallback.yaml (mode envoy, envoy.endpointFallback). */}}
{{- define "loadaware-epp.endpointFallback" -}}
{{- if and (eq .Values.mode "envoy") .Values.envoy.endpointFallback -}}true{{- end -}}
{{- end -}}

{{/* The headless engines Service's in-cluster DNS name (envoy.endpointFallback). */}}
{{- define "loadaware-epp.enginesHost" -}}
{{- printf "%s-engines.%s.svc.cluster.local" (include "loadaware-epp.fullname" .) .Release.Namespace -}}
{{- end -}}

{{/* The picker's --max-endpoints: 2 with the fallback config, picker.maxEndpoints otherwise. */}}
{{- define "loadaware-epp.maxEndpoints" -}}
{{- if eq (include "loadaware-epp.endpointFallback" .) "true" -}}2{{- else -}}{{ int .Values.picker.maxEndpoints }}{{- end -}}
{{- end -}}

{{/* Whether the picker watches the Kubernetes API (and so needs RBAC). */}}
{{- define "loadaware-epp.discovers" -}}
{{- if or (eq .Values.mode "inferencepool") (not .Values.engines.endpoints) -}}true{{- end -}}
{{- end -}}

{{/* engines.matchLabels as a label selector string: "a=1,b=2" (sorted by key). */}}
{{- define "loadaware-epp.selector" -}}
{{- $parts := list -}}
{{- range $k, $v := .Values.engines.matchLabels -}}
{{- $parts = append $parts (printf "%s=%s" $k $v) -}}
{{- end -}}
{{- join "," $parts -}}
{{- end -}}

{{/* Fails the render on values that cannot work, saying what to change. */}}
{{- define "loadaware-epp.validate" -}}
{{- if not (has .Values.mode (list "inferencepool" "envoy" "selector")) -}}
{{- fail (printf "mode %q is not one of inferencepool, envoy, selector" .Values.mode) -}}
{{- end -}}
{{- if hasKey .Values "replicas" -}}
{{- fail (printf "replicas is not a value of this chart: the picker's replica count is replicaCount (--set replicaCount=%v)" .Values.replicas) -}}
{{- end -}}
{{- if and .Values.stateFile.enabled (eq .Values.cacheSource "vllm-events") -}}
{{- fail "stateFile.enabled saves the LMCache index, and cacheSource vllm-events runs no LMCache controller: use cacheSource lmcache or both, or rely on the engines' replay port (kvEvents.replayPort)" -}}
{{- end -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.nats.url) (not .Values.nats.deploy) -}}
{{- fail (printf "replicaCount %d needs shared state: set nats.url (an existing NATS server) or nats.deploy true; without it each replica would see a part of the cache events and of the load (docs/replicas.md)" (int .Values.replicaCount)) -}}
{{- end -}}
{{- if and (eq .Values.mode "inferencepool") .Values.engines.endpoints -}}
{{- fail "engines.endpoints cannot be used with mode inferencepool: the pool's selector finds the engines" -}}
{{- end -}}
{{- if and (not .Values.engines.endpoints) (not .Values.engines.matchLabels) -}}
{{- fail "engines.matchLabels is empty: give the engine pods' labels (or engines.endpoints in modes envoy/selector)" -}}
{{- end -}}
{{- $n := len (default (list) .Values.engines.targetPorts) -}}
{{- if and (not .Values.engines.endpoints) (or (lt $n 1) (gt $n 8)) -}}
{{- fail (printf "engines.targetPorts has %d entries: give 1 to 8 engine ports" $n) -}}
{{- end -}}
{{- if and (eq .Values.mode "envoy") (not .Values.picker.secureServing) -}}
{{- fail "mode envoy reaches the picker over TLS (envoy/gateway.yaml): keep picker.secureServing true" -}}
{{- end -}}
{{- if and (eq .Values.mode "envoy") (eq .Values.envoy.failureMode "FailOpen") (not .Values.envoy.fallback.host) -}}
{{- fail "envoy.failureMode FailOpen needs envoy.fallback.host: a Service in front of every engine, where Envoy sends requests while the picker is down" -}}
{{- end -}}
{{- if eq (include "loadaware-epp.endpointFallback" .) "true" -}}
{{- if eq .Values.envoy.failureMode "FailOpen" -}}
{{- fail "envoy.endpointFallback true cannot be combined with envoy.failureMode FailOpen: envoy/fallback.yaml fails closed (it has no route for requests the picker did not route and does not remove a client's x-gateway-destination-endpoint, so clients could choose engines while the picker is down). Keep envoy.failureMode FailClose, or set envoy.endpointFallback false" -}}
{{- end -}}
{{- if gt (int .Values.picker.maxEndpoints) 2 -}}
{{- fail (printf "picker.maxEndpoints %d with envoy.endpointFallback: Envoy retries once, so the picker answers 2 endpoints; leave picker.maxEndpoints at 1 (the chart passes --max-endpoints=2)" (int .Values.picker.maxEndpoints)) -}}
{{- end -}}
{{- range .Values.engines.endpoints -}}
{{- if hasPrefix "[" . -}}
{{- fail (printf "engines.endpoints %s: envoy.endpointFallback lists the engines in an IPv4 (V4_ONLY) cluster; give IPv4 addresses or set envoy.endpointFallback false" .) -}}
{{- end -}}
{{- end -}}
{{- else if and (eq .Values.mode "envoy") (ne (int .Values.picker.maxEndpoints) 1) -}}
{{- fail (printf "picker.maxEndpoints %d in mode envoy: envoy/gateway.yaml's ORIGINAL_DST cluster reads one address per answer; keep picker.maxEndpoints 1, or set envoy.endpointFallback true (the picker then answers 2 and Envoy retries on the second)" (int .Values.picker.maxEndpoints)) -}}
{{- end -}}
{{- if not (has .Values.tokenizer.source (list "engine" "file")) -}}
{{- fail (printf "tokenizer.source %q is not engine or file" .Values.tokenizer.source) -}}
{{- end -}}
{{- if and (eq .Values.tokenizer.source "file") (not .Values.tokenizer.file.volume) -}}
{{- fail "tokenizer.source file needs tokenizer.file.volume: the volume that holds tokenizer.json" -}}
{{- end -}}
{{- $body := int64 (default 16777216 .Values.picker.maxBodyBytes) -}}
{{- $buffered := int64 (default 268435456 .Values.picker.maxBufferedBytes) -}}
{{- if lt $buffered $body -}}
{{- fail (printf "picker.maxBufferedBytes %d is smaller than the largest body, picker.maxBodyBytes %d (0: 16 MiB): the picker would refuse to start. Raise picker.maxBufferedBytes (with the memory: docs/deploy/helm.md \"Memory\") or lower picker.maxBodyBytes" $buffered $body) -}}
{{- end -}}
{{- if .Values.picker.heapPretouch -}}
{{- $res := default dict .Values.picker.resources -}}
{{- $limit := (default dict $res.limits).memory -}}
{{- $request := (default dict $res.requests).memory -}}
{{- if not $limit -}}
{{- fail "picker.heapPretouch needs picker.resources.limits.memory: the picker pre-touches its heap up to 90% of the container's memory limit, and without one it would not pre-touch. Set a limit (the default is 1Gi) or set picker.heapPretouch false" -}}
{{- end -}}
{{- if and $request (ne (toString $request) (toString $limit)) -}}
{{- fail (printf "picker.resources.requests.memory %v differs from limits.memory %v with picker.heapPretouch: a pre-touched picker holds about its limit from the start, so the chart requests the whole limit. Leave requests.memory unset (the chart sets it to the limit), set it equal, or set picker.heapPretouch false" $request $limit) -}}
{{- end -}}
{{- range .Values.picker.extraEnv -}}
{{- if has .name (list "GOGC" "GOMEMLIMIT") -}}
{{- fail (printf "picker.extraEnv sets %s with picker.heapPretouch: the picker then leaves the collector to it and does not pre-touch. Drop %s, or set picker.heapPretouch false" .name .name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if not .Values.lmcache.hashSeed -}}
{{- fail "lmcache.hashSeed is empty: set it to the engines' PYTHONHASHSEED (the vLLM Production Stack uses \"123\")" -}}
{{- end -}}
{{- end -}}

{{/*
The picker container's resources: picker.resources, with requests.memory set to
limits.memory under picker.heapPretouch (a pre-touched heap holds about the limit from the
start; validate has checked that the limit is there). YAML, for fromYaml.
*/}}
{{- define "loadaware-epp.pickerResources" -}}
{{- $res := deepCopy (default dict .Values.picker.resources) -}}
{{- if .Values.picker.heapPretouch -}}
{{- $requests := default dict $res.requests -}}
{{- $_ := set $requests "memory" $res.limits.memory -}}
{{- $_ := set $res "requests" $requests -}}
{{- end -}}
{{- toYaml $res -}}
{{- end -}}
