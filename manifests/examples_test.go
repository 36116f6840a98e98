package manifests_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/loadaware/loadaware-epp/envoy"
)

// Istio's Go types (istio.io/client-go) are a heavy module; these mirror the
// fields of networking.istio.io EnvoyFilter, DestinationRule and
// VirtualService that the examples use, so strict decoding still rejects
// anything misspelt. The Envoy values inside the EnvoyFilter are decoded
// with go-control-plane's own types.
type envoyFilter struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		WorkloadSelector struct {
			Labels map[string]string `json:"labels"`
		} `json:"workloadSelector"`
		ConfigPatches []struct {
			ApplyTo string `json:"applyTo"`
			Match   struct {
				Context  string `json:"context"`
				Listener *struct {
					FilterChain struct {
						Filter struct {
							Name      string `json:"name"`
							SubFilter struct {
								Name string `json:"name"`
							} `json:"subFilter"`
						} `json:"filter"`
					} `json:"filterChain"`
				} `json:"listener,omitempty"`
				RouteConfiguration *struct {
					Vhost struct {
						Route struct {
							Name string `json:"name"`
						} `json:"route"`
					} `json:"vhost"`
				} `json:"routeConfiguration,omitempty"`
			} `json:"match"`
			Patch struct {
				Operation string          `json:"operation"`
				Value     json.RawMessage `json:"value"`
			} `json:"patch"`
		} `json:"configPatches"`
	} `json:"spec"`
}

type destinationRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Host          string `json:"host"`
		TrafficPolicy struct {
			TLS struct {
				Mode               string `json:"mode"`
				InsecureSkipVerify bool   `json:"insecureSkipVerify"`
			} `json:"tls"`
		} `json:"trafficPolicy"`
	} `json:"spec"`
}

type virtualService struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Hosts    []string `json:"hosts"`
		Gateways []string `json:"gateways"`
		HTTP     []struct {
			Name  string `json:"name"`
			Route []struct {
				Destination struct {
					Host string `json:"host"`
					Port struct {
						Number int32 `json:"number"`
					} `json:"port"`
				} `json:"destination"`
			} `json:"route"`
		} `json:"http"`
	} `json:"spec"`
}

// loadExamples decodes every YAML file under examples/ strictly.
func loadExamples(t *testing.T, dir string) rendered {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("examples", dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples in examples/%s: %v", dir, err)
	}
	r := rendered{t: t}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r.objs = append(r.objs, decodeAll(t, string(data))...)
	}
	return r
}

func TestGIEExamples(t *testing.T) {
	r := loadExamples(t, "gie")
	pool := get[inferencePool](r, "InferencePool", "vllm")
	if err := pool.check(); err != nil {
		t.Fatalf("InferencePool: %v", err)
	}
	if ref := pool.Spec.EndpointPickerRef; ref == nil || ref.Name != "loadaware-epp" || ref.Port.Number != 9002 {
		t.Errorf("endpointPickerRef = %+v, want loadaware-epp:9002", ref)
	}
	route := get[gatewayv1.HTTPRoute](r, "HTTPRoute", "vllm")
	gw := get[gatewayv1.Gateway](r, "Gateway", "inference-gateway")
	if len(route.Spec.ParentRefs) != 1 || string(route.Spec.ParentRefs[0].Name) != gw.Name {
		t.Errorf("HTTPRoute parents %+v, want the Gateway %s", route.Spec.ParentRefs, gw.Name)
	}
	var backends []string
	for _, rule := range route.Spec.Rules {
		for _, b := range rule.BackendRefs {
			if b.Group == nil || *b.Group != "inference.networking.k8s.io" || b.Kind == nil || *b.Kind != "InferencePool" {
				t.Errorf("backendRef %+v is not an InferencePool", b)
			}
			backends = append(backends, string(b.Name))
		}
	}
	if !slices.Equal(backends, []string{pool.Name}) {
		t.Errorf("HTTPRoute backends = %v, want [%s]", backends, pool.Name)
	}
}

func TestIstioExamples(t *testing.T) {
	r := loadExamples(t, "istio")
	ef := get[envoyFilter](r, "EnvoyFilter", "loadaware-epp")
	dr := get[destinationRule](r, "DestinationRule", "loadaware-epp")
	vs := get[virtualService](r, "VirtualService", "vllm")

	var (
		extProc      *extprocv3.ExternalProcessor
		cluster      *clusterv3.Cluster
		routeCluster string
		routeName    string
	)
	for _, p := range ef.Spec.ConfigPatches {
		switch p.ApplyTo {
		case "HTTP_FILTER":
			var f hcmv3.HttpFilter
			if err := envoy.Decode(p.Patch.Value, &f); err != nil {
				t.Fatalf("HTTP_FILTER patch: %v", err)
			}
			if p.Patch.Operation != "INSERT_BEFORE" || p.Match.Listener == nil || p.Match.Listener.FilterChain.Filter.SubFilter.Name != "envoy.filters.http.router" {
				t.Errorf("ext_proc is not inserted before the router: %+v", p)
			}
			extProc = &extprocv3.ExternalProcessor{}
			if err := f.GetTypedConfig().UnmarshalTo(extProc); err != nil {
				t.Fatalf("HTTP_FILTER patch is not ext_proc: %v", err)
			}
		case "CLUSTER":
			cluster = &clusterv3.Cluster{}
			if err := envoy.Decode(p.Patch.Value, cluster); err != nil {
				t.Fatalf("CLUSTER patch: %v", err)
			}
		case "HTTP_ROUTE":
			var v struct {
				Route json.RawMessage `json:"route"`
			}
			if err := yaml.UnmarshalStrict(p.Patch.Value, &v); err != nil {
				t.Fatalf("HTTP_ROUTE patch: %v", err)
			}
			var ra routev3.RouteAction
			if err := envoy.Decode(v.Route, &ra); err != nil {
				t.Fatalf("HTTP_ROUTE patch: %v", err)
			}
			routeCluster = ra.GetCluster()
			if p.Match.RouteConfiguration != nil {
				routeName = p.Match.RouteConfiguration.Vhost.Route.Name
			}
		default:
			t.Errorf("unexpected patch %s", p.ApplyTo)
		}
	}
	if extProc == nil || cluster == nil || routeCluster == "" {
		t.Fatalf("EnvoyFilter lacks a patch: ext_proc %v, cluster %v, route %q", extProc != nil, cluster != nil, routeCluster)
	}
	if err := envoy.CheckExtProc(extProc); err != nil {
		t.Error(err)
	}
	if want := "outbound|9002||" + dr.Spec.Host; extProc.GetGrpcService().GetEnvoyGrpc().GetClusterName() != want {
		t.Errorf("ext_proc calls %q, want Istio's cluster %q for the DestinationRule's host", extProc.GetGrpcService().GetEnvoyGrpc().GetClusterName(), want)
	}
	if cluster.GetType() != clusterv3.Cluster_ORIGINAL_DST || cluster.GetOriginalDstLbConfig().GetHttpHeaderName() != envoy.DestinationHeader ||
		!cluster.GetOriginalDstLbConfig().GetUseHttpHeader() {
		t.Errorf("added cluster is not ORIGINAL_DST by %s: %v", envoy.DestinationHeader, cluster)
	}
	if routeCluster != cluster.GetName() {
		t.Errorf("route goes to %q, the added cluster is %q", routeCluster, cluster.GetName())
	}
	if len(vs.Spec.HTTP) != 1 || vs.Spec.HTTP[0].Name != routeName {
		t.Errorf("EnvoyFilter patches route %q, the VirtualService names %+v", routeName, vs.Spec.HTTP)
	}
	if dr.Spec.TrafficPolicy.TLS.Mode != "SIMPLE" {
		t.Errorf("DestinationRule TLS mode %q: the picker serves TLS", dr.Spec.TrafficPolicy.TLS.Mode)
	}
}

// TestVLLMStackToggle checks the vllm-stack values against the picker that
// the chart renders from loadaware-epp-values.yaml (release loadaware-epp in
// namespace llm, as the guide installs it).
func TestVLLMStackToggle(t *testing.T) {
	data, err := os.ReadFile("vllm-stack/values-loadaware.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		ServingEngineSpec struct {
			ModelSpec []map[string]any `json:"modelSpec"`
		} `json:"servingEngineSpec"`
	}
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.ServingEngineSpec.ModelSpec) == 0 {
		t.Fatal("no servingEngineSpec.modelSpec")
	}

	r := render(t, "loadaware-epp", "-f", "vllm-stack/loadaware-epp-values.yaml")
	const svc = "loadaware-epp"
	service := get[corev1.Service](r, "Service", svc)
	ports := map[string]int32{}
	for _, p := range service.Spec.Ports {
		ports[p.Name] = p.Port
	}
	args := pickerArgs(t, get[appsv1.Deployment](r, "Deployment", svc))
	host := svc + ".llm.svc.cluster.local"

	for _, ms := range v.ServingEngineSpec.ModelSpec {
		name, _ := ms["name"].(string)
		lc, _ := ms["lmcacheConfig"].(map[string]any)
		if lc["enabled"] != true || lc["enableController"] != true {
			t.Errorf("modelSpec %s: lmcacheConfig must enable LMCache and its controller: %v", name, lc)
		}
		for _, k := range []string{"controllerPort", "controllerReplyPort"} {
			if _, ok := lc[k]; ok {
				t.Errorf("modelSpec %s: lmcacheConfig.%s would point the engines back at the Python router", name, k)
			}
		}
		env := map[string]string{}
		list, _ := ms["env"].([]any)
		for _, e := range list {
			m, _ := e.(map[string]any)
			env[m["name"].(string)], _ = m["value"].(string)
		}
		for k, want := range map[string]string{
			"LMCACHE_CONTROLLER_PULL_URL":  host + ":" + strconv.Itoa(int(ports["lmcache-pull"])),
			"LMCACHE_CONTROLLER_REPLY_URL": host + ":" + strconv.Itoa(int(ports["lmcache-reply"])),
			"PYTHONHASHSEED":               args["lmcache-hash-seed"],
		} {
			if env[k] != want || want == "" {
				t.Errorf("modelSpec %s: %s=%q, want %q (from the rendered picker)", name, k, env[k], want)
			}
		}
		// The vllm-stack 0.1.11 chart labels engine pods model=<name>,
		// helm-release-name=<release>; the guide's release is "vllm".
		want := "helm-release-name=vllm,model=" + name
		if args["endpoint-selector"] != want {
			t.Errorf("picker selects %q, the engines of modelSpec %s are labelled %q", args["endpoint-selector"], name, want)
		}
	}
}

// TestDockerfile checks the image recipe without a Docker engine: pinned
// base images, cgo with libzmq, a non-root user, the picker as entrypoint
// and the five ports.
func TestDockerfile(t *testing.T) {
	f, err := os.Open("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		args     = map[string]string{}
		froms    []string
		user     string
		expose   []string
		entry    string
		build    string
		installs []string
	)
	lines := bufio.NewScanner(f)
	var cont strings.Builder
	for lines.Scan() {
		line := strings.TrimSpace(lines.Text())
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cont.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cont.WriteString(line)
		ins := cont.String()
		cont.Reset()
		word, rest, _ := strings.Cut(ins, " ")
		switch strings.ToUpper(word) {
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		case "FROM":
			img, _, _ := strings.Cut(rest, " ")
			froms = append(froms, os.Expand(img, func(k string) string { return args[k] }))
			user = ""
		case "USER":
			user = rest
		case "EXPOSE":
			expose = strings.Fields(rest)
		case "ENTRYPOINT":
			entry = rest
		case "RUN":
			if strings.Contains(rest, "go build") {
				build = rest
			}
			if strings.Contains(rest, "apt-get install") {
				installs = append(installs, rest)
			}
		}
	}
	if err := lines.Err(); err != nil {
		t.Fatal(err)
	}
	pinned := regexp.MustCompile(`^[a-z0-9./-]+:[0-9]+\.[0-9]+[^:]*$`)
	if len(froms) != 2 {
		t.Fatalf("stages = %v, want a build and a runtime stage", froms)
	}
	for _, img := range froms {
		if !pinned.MatchString(strings.TrimSuffix(img, " AS build")) {
			t.Errorf("base image %q is not pinned to a version", img)
		}
	}
	if !strings.HasPrefix(froms[0], "golang:1.26.") || !strings.Contains(froms[0], "bookworm") || !strings.HasPrefix(froms[1], "debian:12") {
		t.Errorf("images %v: want golang 1.26 on Debian 12 and a Debian 12 runtime (same libzmq)", froms)
	}
	if !regexp.MustCompile(`^[1-9][0-9]*:[1-9][0-9]*$`).MatchString(user) {
		t.Errorf("runtime USER %q is not a numeric non-root uid:gid", user)
	}
	if !slices.Equal(slices.Sorted(slices.Values(expose)), []string{"9000", "9001", "9002", "9003", "9090"}) {
		t.Errorf("EXPOSE %v", expose)
	}
	if entry != `["/usr/local/bin/loadaware-epp"]` {
		t.Errorf("ENTRYPOINT %s", entry)
	}
	if !strings.Contains(build, "CGO_ENABLED=1") || !strings.Contains(build, "./cmd/loadaware-epp") || !strings.Contains(build, "-o /out/loadaware-epp") {
		t.Errorf("build step %q", build)
	}
	if _, err := os.Stat("../cmd/loadaware-epp"); err != nil {
		t.Errorf("the image builds ./cmd/loadaware-epp: %v", err)
	}
	if len(installs) != 2 || !strings.Contains(installs[0], "libzmq3-dev") || !strings.Contains(installs[1], "libzmq5") {
		t.Errorf("apt installs %v: want libzmq3-dev to build and libzmq5 to run", installs)
	}
}
