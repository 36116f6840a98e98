package manifests_test

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/envoy"
	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/fleet/kube"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/lmcache"
)

// helmCmd is how the tests get helm: pinned, built by the Go toolchain.
var helmCmd = []string{"run", "helm.sh/helm/v3/cmd/helm@v3.22.0"}

const chart = "helm/loadaware-epp"

// helm runs helm and returns its standard output, or an error carrying its
// standard error.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("helm is built from source with go run; skipped in -short mode")
	}
	cmd := exec.CommandContext(t.Context(), "go", append(slices.Clone(helmCmd), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// object is one rendered or example document, decoded into its Go type.
type object struct {
	kind, name string
	value      any
}

var docSep = regexp.MustCompile(`(?m)^---\s*$`)

// decodeAll splits a multi-document YAML stream and decodes every document
// strictly (unknown or duplicate fields fail) into its Kubernetes type.
func decodeAll(t *testing.T, stream string) []object {
	t.Helper()
	var out []object
	for doc := range slices.Values(docSep.Split(stream, -1)) {
		var head struct {
			APIVersion string            `json:"apiVersion"`
			Kind       string            `json:"kind"`
			Metadata   metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("document is not YAML: %v\n%s", err, doc)
		}
		if head.Kind == "" {
			if strings.TrimSpace(stripComments(doc)) != "" {
				t.Fatalf("document without a kind:\n%s", doc)
			}
			continue
		}
		newObj, ok := kinds[head.APIVersion+" "+head.Kind]
		if !ok {
			t.Fatalf("unexpected object %s %s/%s: add its type to kinds", head.APIVersion, head.Kind, head.Metadata.Name)
		}
		v := newObj()
		if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
			t.Fatalf("%s %s does not decode strictly: %v\n%s", head.Kind, head.Metadata.Name, err, doc)
		}
		out = append(out, object{kind: head.Kind, name: head.Metadata.Name, value: v})
	}
	return out
}

func stripComments(doc string) string {
	var b strings.Builder
	for line := range strings.Lines(doc) {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// kinds maps "apiVersion kind" to a constructor of its Go type.
var kinds = map[string]func() any{
	"v1 ServiceAccount":                            func() any { return &corev1.ServiceAccount{} },
	"v1 Service":                                   func() any { return &corev1.Service{} },
	"v1 ConfigMap":                                 func() any { return &corev1.ConfigMap{} },
	"apps/v1 Deployment":                           func() any { return &appsv1.Deployment{} },
	"policy/v1 PodDisruptionBudget":                func() any { return &policyv1.PodDisruptionBudget{} },
	"rbac.authorization.k8s.io/v1 Role":            func() any { return &rbacv1.Role{} },
	"rbac.authorization.k8s.io/v1 RoleBinding":     func() any { return &rbacv1.RoleBinding{} },
	"monitoring.coreos.com/v1 ServiceMonitor":      func() any { return &monitoringv1.ServiceMonitor{} },
	"inference.networking.k8s.io/v1 InferencePool": func() any { return &inferencePool{} },
	"gateway.networking.k8s.io/v1 Gateway":         func() any { return &gatewayv1.Gateway{} },
	"gateway.networking.k8s.io/v1 HTTPRoute":       func() any { return &gatewayv1.HTTPRoute{} },
	"networking.istio.io/v1alpha3 EnvoyFilter":     func() any { return &envoyFilter{} },
	"networking.istio.io/v1 DestinationRule":       func() any { return &destinationRule{} },
	"networking.istio.io/v1 VirtualService":        func() any { return &virtualService{} },
}

// inferencePool mirrors GIE's InferencePool v1 (inference.networking.k8s.io),
// whose Go module is not on the module proxy. Status is left out: manifests
// never set it.
type inferencePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		TargetPorts []struct {
			Number int32 `json:"number"`
		} `json:"targetPorts"`
		AppProtocol       string `json:"appProtocol,omitempty"`
		EndpointPickerRef *struct {
			Group *string `json:"group,omitempty"`
			Kind  string  `json:"kind,omitempty"`
			Name  string  `json:"name"`
			Port  *struct {
				Number int32 `json:"number"`
			} `json:"port,omitempty"`
			FailureMode string `json:"failureMode,omitempty"`
		} `json:"endpointPickerRef,omitempty"`
	} `json:"spec"`
}

// check applies the v1 CRD's validation rules.
func (p *inferencePool) check() error {
	s := p.Spec
	if n := len(s.Selector.MatchLabels); n < 1 || n > 64 {
		return fmt.Errorf("spec.selector.matchLabels has %d entries, want 1 to 64", n)
	}
	if _, err := labels.ValidatedSelectorFromSet(s.Selector.MatchLabels); err != nil {
		return err
	}
	if n := len(s.TargetPorts); n < 1 || n > 8 {
		return fmt.Errorf("spec.targetPorts has %d entries, want 1 to 8", n)
	}
	if !slices.Contains([]string{"", "http", "kubernetes.io/h2c"}, s.AppProtocol) {
		return fmt.Errorf("spec.appProtocol %q", s.AppProtocol)
	}
	if r := s.EndpointPickerRef; r != nil {
		if r.Name == "" || (r.Kind != "" && r.Kind != "Service") || r.Port == nil {
			return fmt.Errorf("spec.endpointPickerRef needs a Service name and port: %+v", r)
		}
		if !slices.Contains([]string{"", "FailOpen", "FailClose"}, r.FailureMode) {
			return fmt.Errorf("spec.endpointPickerRef.failureMode %q", r.FailureMode)
		}
	}
	return nil
}

// rendered is a chart render, indexed by kind and name.
type rendered struct {
	t    *testing.T
	objs []object
}

func (r rendered) index() []string {
	var out []string
	for _, o := range r.objs {
		out = append(out, o.kind+"/"+o.name)
	}
	slices.Sort(out)
	return out
}

func get[T any](r rendered, kind, name string) *T {
	r.t.Helper()
	for _, o := range r.objs {
		if o.kind == kind && o.name == name {
			return o.value.(*T)
		}
	}
	r.t.Fatalf("no %s/%s rendered; have %v", kind, name, r.index())
	return nil
}

func render(t *testing.T, release string, args ...string) rendered {
	t.Helper()
	out, err := helm(t, append([]string{"template", release, chart, "--namespace", "llm"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return rendered{t: t, objs: decodeAll(t, out)}
}

// args returns the picker's flags as name -> value.
func pickerArgs(t *testing.T, d *appsv1.Deployment) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		name, value, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if _, dup := out[name]; dup {
			t.Fatalf("picker flag --%s given twice", name)
		}
		out[name] = value
	}
	return out
}

// discovery parses the picker's discovery flags with fleet/kube's own flag set.
func discovery(t *testing.T, args map[string]string) kube.Config {
	t.Helper()
	var c kube.Config
	fs := flag.NewFlagSet("picker", flag.ContinueOnError)
	c.RegisterFlags(fs)
	var kubeArgs []string
	for _, name := range slices.Sorted(maps.Keys(args)) {
		if fs.Lookup(name) != nil {
			kubeArgs = append(kubeArgs, "--"+name+"="+args[name])
		}
	}
	if err := fs.Parse(kubeArgs); err != nil {
		t.Fatalf("discovery flags %v: %v", kubeArgs, err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("discovery flags %v: %v", kubeArgs, err)
	}
	return c
}

const (
	release = "rel"
	picker  = "rel-loadaware-epp"
	svcHost = "rel-loadaware-epp.llm.svc.cluster.local"
)

var pickerKinds = []string{"Deployment/" + picker, "Service/" + picker, "ServiceAccount/" + picker}
var rbacKinds = []string{"Role/" + picker, "RoleBinding/" + picker}

func TestChartModes(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantObjs  []string
		wantMode  kube.Mode
		wantRules []rbacv1.PolicyRule
		check     func(t *testing.T, r rendered, args map[string]string)
	}{
		{
			name:     "inferencepool (default values)",
			wantObjs: append(append([]string{"InferencePool/" + picker}, pickerKinds...), rbacKinds...),
			wantMode: kube.ModePool,
			wantRules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"inference.networking.k8s.io"}, Resources: []string{"inferencepools"}, Verbs: []string{"get", "list", "watch"}},
			},
			check: func(t *testing.T, r rendered, args map[string]string) {
				pool := get[inferencePool](r, "InferencePool", picker)
				if err := pool.check(); err != nil {
					t.Fatalf("InferencePool: %v", err)
				}
				ref := pool.Spec.EndpointPickerRef
				if ref == nil || ref.Name != picker || ref.Port.Number != 9002 || ref.FailureMode != "FailOpen" {
					t.Errorf("endpointPickerRef = %+v, want the picker Service on 9002, FailOpen (GIE's default)", ref)
				}
				if args["pool-name"] != pool.Name || args["pool-namespace"] != "llm" {
					t.Errorf("picker watches %s/%s, the pool is llm/%s", args["pool-namespace"], args["pool-name"], pool.Name)
				}
				if got := pool.Spec.Selector.MatchLabels; !maps.Equal(got, map[string]string{"app": "vllm"}) {
					t.Errorf("pool selector = %v", got)
				}
			},
		},
		{
			name: "inferencepool with every option",
			args: []string{"--set", "serviceMonitor.enabled=true", "--set", "picker.certSecret=epp-tls",
				"--set", "picker.adminTokenSecret.name=epp-admin", "--set", "tokenizer.source=file",
				"--set", "tokenizer.file.volume.persistentVolumeClaim.claimName=models", "--set", "tokenizer.model=Qwen/Qwen2.5-3B-Instruct",
				"--set", "picker.maxBodyBytes=16777216", "--set", "picker.beta=0.5", "--set", "inferencePool.name=qwen",
				"--set", "engines.targetPorts={8000,8001}", "--set", "inferencePool.failureMode=FailClose"},
			wantObjs: append(append([]string{"InferencePool/qwen", "ServiceMonitor/" + picker}, pickerKinds...), rbacKinds...),
			wantMode: kube.ModePool,
			wantRules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"inference.networking.k8s.io"}, Resources: []string{"inferencepools"}, Verbs: []string{"get", "list", "watch"}},
			},
			check: func(t *testing.T, r rendered, args map[string]string) {
				for flag, want := range map[string]string{"cert-path": "/etc/loadaware-epp/tls", "tokenizer": "/tokenizer/tokenizer.json",
					"model": "Qwen/Qwen2.5-3B-Instruct", "max-body-bytes": "16777216", "beta": "0.5", "pool-name": "qwen"} {
					if args[flag] != want {
						t.Errorf("--%s = %q, want %q", flag, args[flag], want)
					}
				}
				if _, ok := args["tokenizer-from-engine"]; ok {
					t.Error("--tokenizer-from-engine given with tokenizer.source file")
				}
				pod := get[appsv1.Deployment](r, "Deployment", picker).Spec.Template.Spec
				mounts := map[string]string{}
				for _, m := range pod.Containers[0].VolumeMounts {
					mounts[m.Name] = m.MountPath
				}
				if mounts["tls"] != "/etc/loadaware-epp/tls" || mounts["tokenizer"] != "/tokenizer" {
					t.Errorf("volume mounts = %v", mounts)
				}
				vols := map[string]corev1.Volume{}
				for _, v := range pod.Volumes {
					vols[v.Name] = v
				}
				if vols["tls"].Secret == nil || vols["tls"].Secret.SecretName != "epp-tls" ||
					vols["tokenizer"].PersistentVolumeClaim == nil || vols["tokenizer"].PersistentVolumeClaim.ClaimName != "models" {
					t.Errorf("volumes = %+v", pod.Volumes)
				}
				var token *corev1.EnvVar
				for i, e := range pod.Containers[0].Env {
					if e.Name == "LOADAWARE_ADMIN_TOKEN" {
						token = &pod.Containers[0].Env[i]
					}
				}
				if token == nil || token.ValueFrom.SecretKeyRef.Name != "epp-admin" || token.ValueFrom.SecretKeyRef.Key != "token" {
					t.Errorf("admin token env = %+v", token)
				}
				pool := get[inferencePool](r, "InferencePool", "qwen")
				if err := pool.check(); err != nil {
					t.Fatal(err)
				}
				if len(pool.Spec.TargetPorts) != 2 || pool.Spec.EndpointPickerRef.FailureMode != "FailClose" {
					t.Errorf("pool spec = %+v", pool.Spec)
				}
				sm := get[monitoringv1.ServiceMonitor](r, "ServiceMonitor", picker)
				svc := get[corev1.Service](r, "Service", picker)
				if !labels.SelectorFromSet(sm.Spec.Selector.MatchLabels).Matches(labels.Set(svc.Labels)) {
					t.Errorf("ServiceMonitor selector %v does not select the Service (labels %v)", sm.Spec.Selector.MatchLabels, svc.Labels)
				}
				if len(sm.Spec.Endpoints) != 1 || !hasServicePort(svc, sm.Spec.Endpoints[0].Port) || sm.Spec.Endpoints[0].Path != "/metrics" {
					t.Errorf("ServiceMonitor endpoints = %+v", sm.Spec.Endpoints)
				}
			},
		},
		{
			name:      "envoy",
			args:      []string{"--set", "mode=envoy"},
			wantObjs:  append(append([]string{"ConfigMap/" + picker + "-envoy", "Deployment/" + picker + "-envoy", "Service/" + picker + "-envoy"}, pickerKinds...), rbacKinds...),
			wantMode:  kube.ModeSelector,
			wantRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
			check: func(t *testing.T, r rendered, args map[string]string) {
				cm := get[corev1.ConfigMap](r, "ConfigMap", picker+"-envoy")
				b, err := envoy.Load([]byte(cm.Data["envoy.yaml"]))
				if err != nil {
					t.Fatalf("rendered Envoy config: %v", err)
				}
				p, err := envoy.CheckPicker(b)
				if err != nil {
					t.Fatalf("rendered Envoy config: %v", err)
				}
				if p.Address != svcHost+":9002" || !p.TLS {
					t.Errorf("Envoy reaches the picker at %s (TLS %v), want %s:9002 over TLS", p.Address, p.TLS, svcHost)
				}
				if p.FailOpen {
					t.Error("Envoy fails open by default in mode envoy, which has no fallback engines")
				}
				if args["max-endpoints"] != "1" {
					t.Errorf("--max-endpoints=%s, but gateway.yaml's ORIGINAL_DST cluster reads one address", args["max-endpoints"])
				}
				if eps, ok := overrideHostEndpoints(b); ok {
					t.Errorf("envoy.endpointFallback is off by default, but an override_host cluster routes to %v", eps)
				}
				if args["secure-serving"] != "true" {
					t.Errorf("--secure-serving=%s, but Envoy speaks TLS", args["secure-serving"])
				}
				d := get[appsv1.Deployment](r, "Deployment", picker+"-envoy")
				pod := d.Spec.Template.Spec
				if len(pod.Volumes) != 1 || pod.Volumes[0].ConfigMap == nil || pod.Volumes[0].ConfigMap.Name != cm.Name {
					t.Errorf("Envoy volumes = %+v, want the ConfigMap %s", pod.Volumes, cm.Name)
				}
				if pod.Containers[0].VolumeMounts[0].MountPath != "/etc/envoy" || !slices.Contains(pod.Containers[0].Args, "/etc/envoy/envoy.yaml") {
					t.Errorf("Envoy does not read /etc/envoy/envoy.yaml: %+v", pod.Containers[0])
				}
				svc := get[corev1.Service](r, "Service", picker+"-envoy")
				if len(svc.Spec.Ports) != 1 || !hasContainerPort(pod.Containers[0], svc.Spec.Ports[0].TargetPort.StrVal, 8081) {
					t.Errorf("Envoy Service ports %+v do not reach the gateway listener 8081", svc.Spec.Ports)
				}
				if args["endpoint-selector"] != "app=vllm" || args["endpoint-target-ports"] != "8000" {
					t.Errorf("picker discovery flags = %v", args)
				}
			},
		},
		{
			name:      "envoy failing open",
			args:      []string{"--set", "mode=envoy", "--set", "envoy.failureMode=FailOpen", "--set", "envoy.fallback.host=vllm-engine-service", "--set", "envoy.fallback.port=80"},
			wantObjs:  append(append([]string{"ConfigMap/" + picker + "-envoy", "Deployment/" + picker + "-envoy", "Service/" + picker + "-envoy"}, pickerKinds...), rbacKinds...),
			wantMode:  kube.ModeSelector,
			wantRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
			check: func(t *testing.T, r rendered, args map[string]string) {
				b, err := envoy.Load([]byte(get[corev1.ConfigMap](r, "ConfigMap", picker+"-envoy").Data["envoy.yaml"]))
				if err != nil {
					t.Fatalf("rendered Envoy config: %v", err)
				}
				p, err := envoy.CheckPicker(b)
				if err != nil {
					t.Fatalf("rendered Envoy config: %v", err)
				}
				if !p.FailOpen || p.FallbackAddress != "vllm-engine-service:80" {
					t.Errorf("Envoy = %+v, want fail open to vllm-engine-service:80", p)
				}
				if err := envoy.CheckDecisionLog(b); err != nil {
					t.Errorf("rendered Envoy config: %v", err)
				}
			},
		},
		{
			name: "envoy with endpoint fallback",
			args: []string{"--set", "mode=envoy", "--set", "envoy.endpointFallback=true", "--set", "engines.targetPorts={8000,8001}"},
			wantObjs: append(append([]string{"ConfigMap/" + picker + "-envoy", "Deployment/" + picker + "-envoy", "Service/" + picker + "-envoy",
				"Service/" + picker + "-engines"}, pickerKinds...), rbacKinds...),
			wantMode:  kube.ModeSelector,
			wantRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
			check: func(t *testing.T, r rendered, args map[string]string) {
				b := checkFallbackConfig(t, r, args)
				const engines = picker + "-engines.llm.svc.cluster.local"
				if eps, _ := overrideHostEndpoints(b); !slices.Equal(eps, []string{engines + ":8000", engines + ":8001"}) {
					t.Errorf("override_host cluster endpoints = %v, want the headless engines Service on each target port", eps)
				}
				svc := get[corev1.Service](r, "Service", picker+"-engines")
				if svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.PublishNotReadyAddresses {
					t.Errorf("engines Service clusterIP %q, publishNotReadyAddresses %v: want headless, Ready pods only (one A record each)",
						svc.Spec.ClusterIP, svc.Spec.PublishNotReadyAddresses)
				}
				if !maps.Equal(svc.Spec.Selector, map[string]string{"app": "vllm"}) {
					t.Errorf("engines Service selector = %v, want engines.matchLabels", svc.Spec.Selector)
				}
				var ports []int32
				for _, p := range svc.Spec.Ports {
					if p.TargetPort.IntVal != p.Port {
						t.Errorf("engines Service port %d targets %v", p.Port, p.TargetPort)
					}
					ports = append(ports, p.Port)
				}
				if !slices.Equal(ports, []int32{8000, 8001}) {
					t.Errorf("engines Service ports = %v, want engines.targetPorts", ports)
				}
			},
		},
		{
			name: "envoy with endpoint fallback to static endpoints",
			args: []string{"--set", "mode=envoy", "--set", "envoy.endpointFallback=true", "--set", "engines.endpoints={10.0.0.1:8000,10.0.0.2:8001}"},
			wantObjs: append([]string{"ConfigMap/" + picker + "-envoy", "Deployment/" + picker + "-envoy", "Service/" + picker + "-envoy"},
				pickerKinds...),
			wantMode: kube.ModeOff,
			check: func(t *testing.T, r rendered, args map[string]string) {
				b := checkFallbackConfig(t, r, args)
				if eps, _ := overrideHostEndpoints(b); !slices.Equal(eps, []string{"10.0.0.1:8000", "10.0.0.2:8001"}) {
					t.Errorf("override_host cluster endpoints = %v, want engines.endpoints", eps)
				}
				if args["endpoints"] != "10.0.0.1:8000,10.0.0.2:8001" {
					t.Errorf("--endpoints=%s", args["endpoints"])
				}
			},
		},
		{
			name:      "endpoint fallback outside mode envoy",
			args:      []string{"--set", "mode=selector", "--set", "envoy.endpointFallback=true"},
			wantObjs:  append(slices.Clone(pickerKinds), rbacKinds...),
			wantMode:  kube.ModeSelector,
			wantRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
			check: func(t *testing.T, r rendered, args map[string]string) {
				if args["max-endpoints"] != "1" {
					t.Errorf("--max-endpoints=%s: envoy.endpointFallback applies to mode envoy only", args["max-endpoints"])
				}
			},
		},
		{
			name:      "selector",
			args:      []string{"--set", "mode=selector", "--set", "engines.matchLabels.tier=gpu"},
			wantObjs:  append(slices.Clone(pickerKinds), rbacKinds...),
			wantMode:  kube.ModeSelector,
			wantRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
			check: func(t *testing.T, r rendered, args map[string]string) {
				if args["endpoint-selector"] != "app=vllm,tier=gpu" {
					t.Errorf("--endpoint-selector=%s", args["endpoint-selector"])
				}
			},
		},
		{
			name:     "selector with static endpoints",
			args:     []string{"--set", "mode=selector", "--set", "engines.endpoints={10.0.0.1:8000,10.0.0.2:8000}"},
			wantObjs: slices.Clone(pickerKinds),
			wantMode: kube.ModeOff,
			check: func(t *testing.T, r rendered, args map[string]string) {
				if args["endpoints"] != "10.0.0.1:8000,10.0.0.2:8000" {
					t.Errorf("--endpoints=%s", args["endpoints"])
				}
				if *get[appsv1.Deployment](r, "Deployment", picker).Spec.Template.Spec.AutomountServiceAccountToken {
					t.Error("static endpoints need no API token, but the pod mounts one")
				}
			},
		},
		{
			name:      "vllm-stack toggle values",
			args:      []string{"-f", "vllm-stack/loadaware-epp-values.yaml"},
			wantObjs:  append(append([]string{"ConfigMap/" + picker + "-envoy", "Deployment/" + picker + "-envoy", "Service/" + picker + "-envoy"}, pickerKinds...), rbacKinds...),
			wantMode:  kube.ModeSelector,
			wantRules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}},
			check: func(t *testing.T, r rendered, args map[string]string) {
				if args["endpoint-selector"] != "helm-release-name=vllm,model=qwen" || args["model"] != "Qwen/Qwen2.5-3B-Instruct" {
					t.Errorf("picker flags = %v", args)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := render(t, release, tt.args...)
			want := slices.Sorted(slices.Values(tt.wantObjs))
			if got := r.index(); !slices.Equal(got, want) {
				t.Fatalf("rendered objects:\n got %v\nwant %v", got, want)
			}
			d := get[appsv1.Deployment](r, "Deployment", picker)
			args := pickerArgs(t, d)
			checkPicker(t, r, d, args)
			checkWorkloads(t, r)
			if got := discovery(t, args).Mode(); got != tt.wantMode {
				t.Errorf("discovery mode = %v, want %v", got, tt.wantMode)
			}
			if tt.wantRules != nil {
				role := get[rbacv1.Role](r, "Role", picker)
				if fmt.Sprint(role.Rules) != fmt.Sprint(tt.wantRules) {
					t.Errorf("Role rules = %+v, want %+v", role.Rules, tt.wantRules)
				}
				rb := get[rbacv1.RoleBinding](r, "RoleBinding", picker)
				if rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != d.Spec.Template.Spec.ServiceAccountName {
					t.Errorf("RoleBinding %+v does not bind Role %s to the picker's ServiceAccount", rb, role.Name)
				}
			}
			tt.check(t, r, args)
		})
	}
}

// checkFallbackConfig checks a render with envoy.endpointFallback: the Envoy
// config is envoy/fallback.yaml, reaches the picker, fails closed, logs the
// decision and routes through override_host, and the picker answers two
// endpoints. It returns the bootstrap.
func checkFallbackConfig(t *testing.T, r rendered, args map[string]string) *bootstrapv3.Bootstrap {
	t.Helper()
	b, err := envoy.Load([]byte(get[corev1.ConfigMap](r, "ConfigMap", picker+"-envoy").Data["envoy.yaml"]))
	if err != nil {
		t.Fatalf("rendered Envoy config: %v", err)
	}
	p, err := envoy.CheckPicker(b)
	if err != nil {
		t.Fatalf("rendered Envoy config: %v", err)
	}
	if p.Address != svcHost+":9002" || !p.TLS || p.FailOpen || p.Fallback != "" {
		t.Errorf("Envoy = %+v, want the picker at %s:9002 over TLS, failing closed, no fallback route", p, svcHost)
	}
	if err := envoy.CheckDecisionLog(b); err != nil {
		t.Errorf("rendered Envoy config: %v", err)
	}
	if _, ok := overrideHostEndpoints(b); !ok {
		t.Error("no override_host cluster: the fallback list is not walked")
	}
	if args["max-endpoints"] != "2" {
		t.Errorf("--max-endpoints=%s, want 2 (the first endpoint and one to retry on)", args["max-endpoints"])
	}
	return b
}

// overrideHostEndpoints returns the endpoints ("host:port") of the cluster
// that uses the override_host load balancing policy, and whether there is one.
func overrideHostEndpoints(b *bootstrapv3.Bootstrap) ([]string, bool) {
	for _, c := range b.GetStaticResources().GetClusters() {
		for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
			if p.GetTypedExtensionConfig().GetName() != "envoy.load_balancing_policies.override_host" {
				continue
			}
			var out []string
			for _, le := range c.GetLoadAssignment().GetEndpoints() {
				for _, lb := range le.GetLbEndpoints() {
					sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
					out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
				}
			}
			return out, true
		}
	}
	return nil, false
}

// checkPicker checks what every mode shares: the Service exposes the
// ext_proc, health, metrics and both LMCache ports of the picker container.
func checkPicker(t *testing.T, r rendered, d *appsv1.Deployment, args map[string]string) {
	t.Helper()
	svc := get[corev1.Service](r, "Service", picker)
	c := d.Spec.Template.Spec.Containers[0]
	want := map[int32]string{9002: "grpc-ext-proc", 9003: "grpc-health", 9090: "http-metrics", 9000: "lmcache-pull", 9001: "lmcache-reply"}
	got := map[int32]string{}
	for _, p := range svc.Spec.Ports {
		got[p.Port] = p.TargetPort.StrVal
		if !hasContainerPort(c, p.TargetPort.StrVal, p.Port) {
			t.Errorf("Service port %d targets %q, which the picker container does not expose on %d", p.Port, p.TargetPort.StrVal, p.Port)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("picker Service ports = %v, want %v", got, want)
	}
	for flag, want := range map[string]string{"grpc-port": "9002", "grpc-health-port": "9003", "metrics-port": "9090",
		"lmcache-pull-port": "9000", "lmcache-reply-port": "9001", "lmcache-hash-seed": "123"} {
		if args[flag] != want {
			t.Errorf("--%s = %q, want %q", flag, args[flag], want)
		}
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil || c.ReadinessProbe.GRPC.Port != 9003 {
		t.Errorf("readiness probe %+v is not gRPC health on 9003", c.ReadinessProbe)
	}
	if d.Spec.Template.Spec.ServiceAccountName != picker {
		t.Errorf("picker runs as %q", d.Spec.Template.Spec.ServiceAccountName)
	}
}

// checkWorkloads checks every Deployment: non-root, selectors that match
// their pods, and a Service in front of each.
func checkWorkloads(t *testing.T, r rendered) {
	t.Helper()
	for _, o := range r.objs {
		d, ok := o.value.(*appsv1.Deployment)
		if !ok {
			continue
		}
		sc := d.Spec.Template.Spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
			t.Errorf("Deployment %s may run as root: %+v", d.Name, sc)
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Deployment %s selector %v does not match its pods' labels %v", d.Name, d.Spec.Selector, d.Spec.Template.Labels)
		}
		served := false
		for _, o := range r.objs {
			if s, ok := o.value.(*corev1.Service); ok && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				served = true
			}
		}
		if !served {
			t.Errorf("no Service selects the pods of Deployment %s", d.Name)
		}
	}
}

func hasContainerPort(c corev1.Container, name string, port int32) bool {
	for _, p := range c.Ports {
		if p.Name == name && p.ContainerPort == port {
			return true
		}
	}
	return false
}

func hasServicePort(s *corev1.Service, name string) bool {
	for _, p := range s.Spec.Ports {
		if p.Name == name {
			return true
		}
	}
	return false
}

func TestChartRejects(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown mode", []string{"--set", "mode=gateway"}, "/mode"},
		{"misspelt key", []string{"--set", "engine.matchLabels.app=x"}, "additional properties 'engine' not allowed"},
		{"negative beta", []string{"--set", "picker.beta=-1"}, "/picker/beta"},
		{"static endpoints with a pool", []string{"--set", "engines.endpoints={10.0.0.1:8000}"}, "cannot be used with mode inferencepool"},
		{"no engine labels", []string{"--set", "engines.matchLabels=null"}, "engines.matchLabels is empty"},
		{"nine target ports", []string{"--set", "engines.targetPorts={1,2,3,4,5,6,7,8,9}"}, "/engines/targetPorts"},
		{"no target ports", []string{"--set", "engines.targetPorts=null"}, "engines.targetPorts has 0 entries"},
		{"envoy without TLS", []string{"--set", "mode=envoy", "--set", "picker.secureServing=false"}, "keep picker.secureServing true"},
		{"tokenizer file without a volume", []string{"--set", "tokenizer.source=file"}, "needs tokenizer.file.volume"},
		{"no hash seed", []string{"--set", "lmcache.hashSeed="}, "lmcache.hashSeed is empty"},
		{"envoy failing open nowhere", []string{"--set", "mode=envoy", "--set", "envoy.failureMode=FailOpen"}, "needs envoy.fallback.host"},
		{"unknown failure mode", []string{"--set", "inferencePool.failureMode=Open"}, "/inferencePool/failureMode"},
		{"endpoint fallback not a boolean", []string{"--set", "envoy.endpointFallback=yes"}, "/envoy/endpointFallback"},
		{"endpoint fallback failing open", []string{"--set", "mode=envoy", "--set", "envoy.endpointFallback=true",
			"--set", "envoy.failureMode=FailOpen", "--set", "envoy.fallback.host=vllm-engine-service"}, "cannot be combined with envoy.failureMode FailOpen"},
		{"endpoint fallback with three endpoints", []string{"--set", "mode=envoy", "--set", "envoy.endpointFallback=true",
			"--set", "picker.maxEndpoints=3"}, "picker.maxEndpoints 3 with envoy.endpointFallback"},
		{"endpoint fallback to IPv6", []string{"--set", "mode=envoy", "--set", "envoy.endpointFallback=true",
			"--set", "engines.endpoints={[fd00::1]:8000}"}, "IPv4 (V4_ONLY)"},
		{"a list without endpoint fallback", []string{"--set", "mode=envoy", "--set", "picker.maxEndpoints=2"}, "picker.maxEndpoints 2 in mode envoy"},
		{"pre-touch without a memory limit", []string{"--set", "picker.resources.limits=null"}, "picker.heapPretouch needs picker.resources.limits.memory"},
		{"pre-touch with a smaller request", []string{"--set", "picker.resources.requests.memory=512Mi"}, "requests.memory 512Mi differs from limits.memory 1Gi"},
		{"pre-touch with GOGC", []string{"--set", "picker.extraEnv[0].name=GOGC", "--set-string", "picker.extraEnv[0].value=200"}, "picker.extraEnv sets GOGC"},
		{"pre-touch not a boolean", []string{"--set-string", "picker.heapPretouch=yes"}, "/picker/heapPretouch"},
		{"negative buffered bytes", []string{"--set", "picker.maxBufferedBytes=-1"}, "/picker/maxBufferedBytes"},
		{"a body larger than the buffered budget", []string{"--set", "picker.maxBodyBytes=134217728"},
			"picker.maxBufferedBytes 67108864 is smaller than the largest body, picker.maxBodyBytes 134217728"},
		// The template's stand-ins for 0 are the binary's defaults.
		{"a buffered budget under the default body", []string{"--set", "picker.maxBufferedBytes=1048576"},
			fmt.Sprintf("picker.maxBodyBytes %d (0: 16 MiB)", extproc.DefaultMaxBodySize)},
		{"the default buffered budget under a body", []string{"--set", "picker.maxBufferedBytes=0",
			"--set", fmt.Sprintf("picker.maxBodyBytes=%d", extproc.DefaultMaxBufferedBytes+1)},
			fmt.Sprintf("picker.maxBufferedBytes %d is smaller", extproc.DefaultMaxBufferedBytes)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := helm(t, append([]string{"template", release, chart, "--namespace", "llm"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("helm template error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestChartLint(t *testing.T) {
	for _, args := range [][]string{nil, {"--set", "mode=envoy"}, {"--set", "mode=envoy", "--set", "envoy.endpointFallback=true"},
		{"--set", "mode=selector"}, {"-f", "vllm-stack/loadaware-epp-values.yaml"}} {
		t.Run(strings.Join(append([]string{"defaults"}, args...), " "), func(t *testing.T) {
			out, err := helm(t, append([]string{"lint", "--strict", chart}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, "0 chart(s) failed") || strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
				t.Fatalf("helm lint:\n%s", out)
			}
		})
	}
}

// The chart deploys envoy/gateway.yaml and envoy/fallback.yaml; its copies must not drift.
func TestChartEnvoyConfigIsShipped(t *testing.T) {
	for _, name := range []string{"gateway.yaml", "fallback.yaml"} {
		shipped, err := envoy.Files.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		copied, err := os.ReadFile(chart + "/files/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(shipped, copied) {
			t.Errorf("helm/loadaware-epp/files/%s differs from envoy/%s: cp envoy/%s manifests/helm/loadaware-epp/files/", name, name, name)
		}
	}
}

// TestChartFlagsExist builds the picker and checks that every flag the chart
// passes is one the binary defines, so the chart and the command cannot drift.
func TestChartFlagsExist(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the picker; skipped in -short mode")
	}
	bin := t.TempDir() + "/loadaware-epp"
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "../cmd/loadaware-epp")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	help, err := exec.CommandContext(t.Context(), bin, "serve", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("loadaware-epp serve -h: %v\n%s", err, help)
	}
	defined := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(string(help), -1) {
		defined[m[1]] = true
	}
	if len(defined) < 10 {
		t.Fatalf("could not read the flags from serve -h:\n%s", help)
	}
	for _, args := range [][]string{
		{"--set", "tokenizer.source=file", "--set", "tokenizer.file.volume.emptyDir.medium=Memory", "--set", "tokenizer.model=m",
			"--set", "picker.certSecret=s", "--set", "picker.maxBodyBytes=1"},
		{"--set", "mode=envoy"},
		{"--set", "mode=envoy", "--set", "envoy.endpointFallback=true"},
		{"--set", "mode=selector", "--set", "engines.endpoints={10.0.0.1:8000}"},
		{"--set", "cacheSource=both", "--set", "kvEvents.replayPort=5558", "--set", "kvEvents.topic=kv@"},
		{"--set", "cacheSource=vllm-events", "--set", "kvEvents.extraKeys=true", "--set", "baseModels={qwen}"},
	} {
		r := render(t, release, args...)
		for name := range pickerArgs(t, get[appsv1.Deployment](r, "Deployment", picker)) {
			if !defined[name] {
				t.Errorf("the chart passes --%s (values %v), which loadaware-epp serve does not define", name, args)
			}
		}
	}
}

// TestChartKVEventsValues: the KV events values reach the picker's flags as given, the
// defaults being the binary's, and the base models only when set.
func TestChartKVEventsValues(t *testing.T) {
	tests := []struct {
		args []string
		want map[string]string // flag -> value; "" absent
	}{
		{[]string{"--set", "cacheSource=vllm-events"}, map[string]string{"kv-events-medium-credit": "GPU=1,CPU=1,DISK=0.5,STORAGE=0.5",
			"kv-events-remote": "refuse", "kv-events-extra-keys": "false", "kv-events-replay-timeout": "2s", "kv-events-dp-size": "1", "base-models": ""}},
		{[]string{"--set", "cacheSource=both", "--set", "kvEvents.mediumCredit=GPU=1\\,STORAGE=0.25", "--set", "kvEvents.remote=credit",
			"--set", "kvEvents.extraKeys=true", "--set", "kvEvents.dpSize=4", "--set", "kvEvents.replayTimeout=5s", "--set", "baseModels={qwen,llama}"},
			map[string]string{"kv-events-medium-credit": "GPU=1,STORAGE=0.25", "kv-events-remote": "credit", "kv-events-extra-keys": "true",
				"kv-events-replay-timeout": "5s", "kv-events-dp-size": "4", "base-models": "qwen,llama"}},
		{[]string{"--set", "cacheSource=lmcache"}, map[string]string{"kv-events-remote": "", "kv-events-extra-keys": ""}},
	}
	for _, tc := range tests {
		args := pickerArgs(t, get[appsv1.Deployment](render(t, release, tc.args...), "Deployment", picker))
		for name, want := range tc.want {
			got, ok := args[name]
			if want == "" && ok {
				t.Errorf("values %v: --%s=%s given, want none", tc.args, name, got)
			}
			if want != "" && got != want {
				t.Errorf("values %v: --%s=%q, want %q", tc.args, name, got, want)
			}
		}
	}
}

// TestChartMemoryPlan: the picker's memory plan (decision 1186). By default the chart passes
// --heap-pretouch and --max-buffered-bytes and requests the whole memory limit, and the most the
// picker can be made to hold (heldBound) fits under the collector's limit, 90% of the
// container's, on a node of 16 CPUs.
func TestChartMemoryPlan(t *testing.T) {
	tests := []struct {
		name         string
		args         []string
		wantPretouch bool
		wantBuffered string // --max-buffered-bytes; "": not passed (the binary's default)
		wantRequest  string // requests.memory; "": none rendered
		wantLimit    string
		wantGodebug  string // the container's GODEBUG; "": none
		// wantEngines is how many engines' worst case the limit holds beside the rest at 16
		// CPUs (heldBound; pre-touched renders only): a pin, which a change of any term moves
		wantEngines int64
	}{
		{"defaults", nil, true, "67108864", "1Gi", "1Gi", "madvdontneed=0", 0},
		{"the operator's GODEBUG", []string{"--set", "picker.extraEnv[0].name=GODEBUG", "--set", "picker.extraEnv[0].value=gctrace=1"},
			true, "67108864", "1Gi", "1Gi", "gctrace=1", 0},
		{"a larger limit", []string{"--set", "picker.resources.limits.memory=2Gi", "--set", "picker.maxBufferedBytes=268435456"},
			true, "268435456", "2Gi", "2Gi", "madvdontneed=0", 1},
		{"the binary's budget in a larger limit", []string{"--set", "picker.resources.limits.memory=1536Mi", "--set", "picker.maxBufferedBytes=0"},
			true, "", "1536Mi", "1536Mi", "madvdontneed=0", 0},
		{"the request given equal to the limit", []string{"--set", "picker.resources.requests.memory=1Gi"}, true, "67108864", "1Gi", "1Gi", "madvdontneed=0", 0},
		{"vLLM KV events", []string{"--set", "cacheSource=vllm-events"}, true, "67108864", "1Gi", "1Gi", "madvdontneed=0", 2},
		{"vLLM KV events, 2 ranks an endpoint, 2Gi", []string{"--set", "cacheSource=vllm-events", "--set", "kvEvents.dpSize=2",
			"--set", "picker.resources.limits.memory=2Gi"}, true, "67108864", "2Gi", "2Gi", "madvdontneed=0", 7},
		{"both sources, 2Gi", []string{"--set", "cacheSource=both", "--set", "picker.resources.limits.memory=2Gi"},
			true, "67108864", "2Gi", "2Gi", "madvdontneed=0", 1},
		{"not pre-touched", []string{"--set", "picker.heapPretouch=false"}, false, "67108864", "", "1Gi", "", 0},
		{"not pre-touched, a smaller request", []string{"--set", "picker.heapPretouch=false", "--set", "picker.resources.requests.memory=512Mi",
			"--set", "picker.maxBufferedBytes=0"}, false, "", "512Mi", "1Gi", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := get[appsv1.Deployment](render(t, release, tt.args...), "Deployment", picker)
			args := pickerArgs(t, d)
			if _, ok := args["heap-pretouch"]; ok != tt.wantPretouch {
				t.Errorf("--heap-pretouch passed: %v, want %v (args %v)", ok, tt.wantPretouch, args)
			}
			if _, ok := args["memory-limit"]; ok {
				t.Errorf("--memory-limit=%s passed: the picker takes 90%% of the container's limit from its cgroup", args["memory-limit"])
			}
			if got, ok := args["max-buffered-bytes"]; got != tt.wantBuffered || ok != (tt.wantBuffered != "") {
				t.Errorf("--max-buffered-bytes=%q (passed: %v), want %q", got, ok, tt.wantBuffered)
			}
			res := d.Spec.Template.Spec.Containers[0].Resources
			if got := res.Limits.Memory().String(); got != tt.wantLimit {
				t.Errorf("limits.memory = %s, want %s", got, tt.wantLimit)
			}
			req, ok := res.Requests[corev1.ResourceMemory]
			if got := req.String(); ok != (tt.wantRequest != "") || (ok && got != tt.wantRequest) {
				t.Errorf("requests.memory = %s (rendered: %v), want %q", got, ok, tt.wantRequest)
			}
			if res.Requests.Cpu().String() != "500m" {
				t.Errorf("requests.cpu = %s, want the values' 500m kept", res.Requests.Cpu())
			}
			var godebug []string
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "GOGC" || e.Name == "GOMEMLIMIT" {
					t.Errorf("the picker gets %s, which turns its own collector plan off", e.Name)
				}
				if e.Name == "GODEBUG" {
					godebug = append(godebug, e.Value)
				}
			}
			if want := []string{tt.wantGodebug}; !slices.Equal(godebug, want) && !(tt.wantGodebug == "" && godebug == nil) {
				t.Errorf("GODEBUG %q, want %q once", godebug, tt.wantGodebug)
			}
			c := d.Spec.Template.Spec.Containers[0]
			if sp := c.StartupProbe; sp == nil || sp.HTTPGet == nil || sp.HTTPGet.Path != c.LivenessProbe.HTTPGet.Path ||
				sp.PeriodSeconds*sp.FailureThreshold < 60 {
				t.Errorf("startup probe %+v: want the liveness probe's /healthz for at least 60 s, so a pre-touching start is not killed", sp)
			}
			if !tt.wantPretouch {
				return
			}
			buffered := int64(extproc.DefaultMaxBufferedBytes)
			if tt.wantBuffered != "" {
				buffered, _ = strconv.ParseInt(tt.wantBuffered, 10, 64)
			}
			const cpus = 16
			source, dp := args["cache-source"], int64(1)
			if v, ok := args["kv-events-dp-size"]; ok {
				dp, _ = strconv.ParseInt(v, 10, 64)
			}
			live, limit := heldBound(buffered, cpus, source, 0, dp), res.Limits.Memory().Value()*9/10
			if live > limit {
				t.Errorf("the budgets' bound %d MiB (%d CPUs, no engine) is over the collector's limit %d MiB (90%% of %s): lower picker.maxBufferedBytes or raise the memory",
					live>>20, cpus, limit>>20, tt.wantLimit)
			}
			engines := int64(0)
			for heldBound(buffered, cpus, source, engines+1, dp) <= limit {
				engines++
			}
			if engines != tt.wantEngines {
				t.Errorf("the limit %d MiB holds the worst case of %d engines (cache source %s, %d ranks each; %d MiB each), want %d",
					limit>>20, engines, source, dp, (heldBound(buffered, cpus, source, 1, dp)-live)>>20, tt.wantEngines)
			}
		})
	}
}

// heldBound is the most the picker can be made to hold at buffered-bytes budget B, P CPUs
// and the binary's other defaults: docs/security.md's bound on what ext_proc clients can make
// it hold, live <= 2B + S(W + R) + (2P + 1)M + C(H + 64 KiB) (the stream cap plus its 64, the
// 256 KiB stream window W, the 64 KiB messages let through R, the message size M, the
// connection cap C and its 64 KiB header block H), plus the LMCache index at its key budget
// (159 bytes a key held by two instances, lmcache.DefaultMaxKeys) and 20 MiB of the rest (the
// soak's live heap before its hostile clients, the tokenizer's model among it: 18 MiB).
// Then, for each of engines (docs/security.md, decisions 1179, 1177 and 1178): with LMCache
// (cacheSource lmcache or both) lmcache.DefaultMaxPeerConns connections of its IP to each of
// the chart's two controller sockets (pull and reply), each holding at most
// lmcache.ConnectionBoundBytes: (lmcache.DefaultRcvHWM + 2) messages of at most
// lmcache.DefaultMaxFrameBytes in all and 64 frames (the queue, the message libzmq reads and
// the one the ZMTP front reads, whatever their frames) and the front's buffers; with vLLM KV events
// (vllm-events or both) dpSize streams at kvindex.DefaultMaxBlocks blocks of 69 bytes (the
// store order's most, decision 1199).
func heldBound(buffered, cpus int64, source string, engines, dpSize int64) int64 {
	const window, uncounted, header, keyBytes, rest, blockBytes = 256 << 10, 64 << 10, 64 << 10, 160, 20 << 20, 69
	streams := int64(extproc.DefaultMaxStreams + 64)
	extProc := 2*buffered + streams*(window+uncounted) + (2*cpus+1)*app.DefaultMaxMessageBytes + app.DefaultMaxGRPCConns*(header+64<<10)
	held := extProc + rest
	if source != "vllm-events" {
		held += lmcache.DefaultMaxKeys*keyBytes + engines*2*lmcache.DefaultMaxPeerConns*lmcache.ConnectionBoundBytes(lmcache.DefaultRcvHWM, lmcache.DefaultMaxFrameBytes)
	}
	if source != "lmcache" {
		held += engines * dpSize * kvindex.DefaultMaxBlocks * blockBytes
	}
	return held
}
