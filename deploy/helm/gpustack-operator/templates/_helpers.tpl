{{/*
The labels Helm's own tooling reads, added to every object of the chart; every other label is
the kustomize overlay's (hack/helm_chart.py). app.kubernetes.io/managed-by: Helm is what Helm
checks before it adopts an object.
*/}}
{{- define "gpustack-operator.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The worker's image: repository, then @digest or :tag (default: v<appVersion>). */}}
{{- define "gpustack-operator.image" -}}
{{- with .Values.image -}}
{{- if .digest -}}
{{ .repository }}@{{ .digest }}
{{- else -}}
{{ .repository }}:{{ .tag | default (printf "v%s" $.Chart.AppVersion) }}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
The worker's command line: global flags, `worker`, then one flag per value set (docs/deploy.md,
"Values"). An empty string or false leaves the worker's own default.
*/}}
{{- define "gpustack-operator.args" -}}
{{- $args := list -}}
{{- with .Values.logLevel }}{{ $args = append $args (printf "--log-level=%s" .) }}{{ end -}}
{{- with .Values.logFormat }}{{ $args = append $args (printf "--log-format=%s" .) }}{{ end -}}
{{- $args = append $args "worker" -}}
{{- range $name, $value := .Values.chain -}}
{{- $flag := kebabcase $name -}}
{{- if kindIs "slice" $value -}}
{{- range $value }}{{ $args = append $args (printf "--%s=%s" $flag (toString .)) }}{{ end -}}
{{- else if kindIs "bool" $value -}}
{{- if $value }}{{ $args = append $args (printf "--%s" $flag) }}{{ end -}}
{{- else if ne (toString $value) "" -}}
{{- $args = append $args (printf "--%s=%s" $flag (toString $value)) -}}
{{- end -}}
{{- end -}}
{{- with .Values.leaderElection -}}
{{- if not .enabled }}{{ $args = append $args "--no-leader-elect" }}{{ end -}}
{{- with .leaseDuration }}{{ $args = append $args (printf "--leader-election-lease-duration=%s" .) }}{{ end -}}
{{- with .renewDeadline }}{{ $args = append $args (printf "--leader-election-renew-deadline=%s" .) }}{{ end -}}
{{- with .retryPeriod }}{{ $args = append $args (printf "--leader-election-retry-period=%s" .) }}{{ end -}}
{{- end -}}
{{- range .Values.extraArgs }}{{ $args = append $args . }}{{ end -}}
{{- toJson $args -}}
{{- end }}

{{/* The chart creates the system namespace, so Helm's release record must live elsewhere. */}}
{{- define "gpustack-operator.checkNamespace" -}}
{{- if eq .Release.Namespace "gpustack-system" -}}
{{- fail "install the release in another namespace (e.g. --namespace default): the chart creates gpustack-system itself, with the Pod Security labels the device managers need, and Helm keeps its release record in the release namespace, which must exist first" -}}
{{- end -}}
{{- end }}

{{/*
"true" when the CRD named .name may be part of this release: the cluster has none, or has one
this project installed (the worker's rule, installed_by_us in
gpustack_operator/domain/bootstrap/prerequisites.py: our chart's helm.sh/chart label, or our
managed-by label without a Helm release annotation, as make deploy creates it). Another NFD's CRD
is then never rendered, so Helm never changes, adopts or deletes it. Without a cluster (helm
template) lookup finds nothing and every CRD is rendered.
*/}}
{{- define "gpustack-operator.nfdCrdIsOurs" -}}
{{- $live := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" .name -}}
{{- if not $live -}}
true
{{- else -}}
{{- $labels := $live.metadata.labels | default dict -}}
{{- $annotations := $live.metadata.annotations | default dict -}}
{{- if hasPrefix "gpustack-operator-" (get $labels "helm.sh/chart" | toString) -}}
true
{{- else if and (eq (get $labels "app.kubernetes.io/managed-by" | toString) "gpustack-operator") (not (hasKey $annotations "meta.helm.sh/release-name")) -}}
true
{{- end -}}
{{- end -}}
{{- end }}
