// Package envoy ships the project's Envoy configurations and the checks
// that keep them loadable.
//
// Files holds gateway.yaml (a standalone gateway that reaches the picker by
// DNS over TLS) and sidecar.yaml (Envoy in the picker's pod, plaintext on
// loopback); README.md beside them explains both. Load decodes a bootstrap as
// strictly as Envoy does and runs the protoc-gen-validate rules on it and on
// every typed config inside it (Decode does the same for any Envoy message);
// CheckPicker verifies the wiring the picker depends on. The package does no
// I/O beyond its embedded files.
package envoy

import (
	"embed"
	"errors"
	"fmt"
	"slices"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	overridehostv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/override_host/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"

	// Typed configs the shipped files use, registered for Any resolution.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/health_check/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// Files holds the shipped configurations: gateway.yaml, sidecar.yaml and fallback.yaml.
//
//go:embed gateway.yaml sidecar.yaml fallback.yaml replicas.yaml
var Files embed.FS

// DestinationHeader is the header the picker sets and ORIGINAL_DST reads.
const DestinationHeader = "x-gateway-destination-endpoint"

// Load decodes an Envoy bootstrap written in YAML or JSON. Unknown fields,
// duplicate keys and typed configs of unregistered types are errors, and the
// bootstrap and each typed config inside it must pass their validation rules.
func Load(data []byte) (*bootstrapv3.Bootstrap, error) {
	var b bootstrapv3.Bootstrap
	if err := Decode(data, &b); err != nil {
		return nil, err
	}
	return &b, nil
}

// Decode decodes one Envoy API message written in YAML or JSON (a bootstrap,
// a cluster, an HTTP filter, ...) into m with Load's strictness and checks.
func Decode(data []byte, m proto.Message) error {
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return fmt.Errorf("envoy: parse YAML: %w", err)
	}
	name := m.ProtoReflect().Descriptor().Name()
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, m); err != nil {
		return fmt.Errorf("envoy: decode %s: %w", name, err)
	}
	return validate(m, string(name))
}

// validate runs m's validation rules, then those of every Any inside m
// (which protoc-gen-validate does not descend into).
func validate(m proto.Message, where string) error {
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return fmt.Errorf("envoy: %s: %w", where, err)
		}
	}
	var walkErr error
	walk(m.ProtoReflect(), func(a *anypb.Any) bool {
		inner, err := a.UnmarshalNew()
		if err != nil {
			walkErr = fmt.Errorf("envoy: %s: typed config %s: %w", where, a.GetTypeUrl(), err)
			return false
		}
		if err := validate(inner, a.GetTypeUrl()); err != nil {
			walkErr = err
			return false
		}
		return true
	})
	return walkErr
}

// walk calls f for every Any reachable from m without crossing another Any;
// it stops when f returns false.
func walk(m protoreflect.Message, f func(*anypb.Any) bool) bool {
	if a, ok := m.Interface().(*anypb.Any); ok {
		return f(a)
	}
	cont := true
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && cont; i++ {
				cont = walk(l.Get(i).Message(), f)
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				cont = walk(mv.Message(), f)
				return cont
			})
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			cont = walk(v.Message(), f)
		}
		return cont
	})
	return cont
}

// Picker describes how a bootstrap reaches the picker, as CheckPicker found it.
type Picker struct {
	Listener string // the listener whose HTTP filters run ext_proc
	Cluster  string // the cluster ext_proc calls
	Address  string // the picker cluster's first endpoint, "host:port"
	TLS      bool   // whether the picker cluster has a transport socket

	FailOpen        bool   // failure_mode_allow: requests go on when the picker fails
	Fallback        string // the cluster of requests without the picker's header ("" if none)
	FallbackAddress string // its first endpoint, "host:port"
}

// CheckPicker verifies that some listener runs ext_proc, as the picker's
// protocol requires, before its router, and that the routes of the requests it
// routes end at an ORIGINAL_DST cluster keyed by DestinationHeader (or at a
// cluster whose override_host policy reads it, with a retry on connect failures
// to reach the next endpoint of the list); with failure_mode_allow, that
// requests without that header have a fallback route and that clients cannot
// send the header themselves (see checkRoutes); that every referenced cluster
// exists; and that the picker cluster speaks HTTP/2.
func CheckPicker(b *bootstrapv3.Bootstrap) (Picker, error) {
	clusters := map[string]*clusterv3.Cluster{}
	for _, c := range b.GetStaticResources().GetClusters() {
		clusters[c.GetName()] = c
	}
	for _, l := range b.GetStaticResources().GetListeners() {
		hcm, err := connectionManager(l)
		if err != nil {
			return Picker{}, err
		}
		if hcm == nil {
			continue
		}
		for _, vh := range hcm.GetRouteConfig().GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				if name := r.GetRoute().GetCluster(); name != "" && clusters[name] == nil {
					return Picker{}, fmt.Errorf("envoy: listener %s routes to undefined cluster %q", l.GetName(), name)
				}
			}
		}
		ep, err := extProc(hcm)
		if err != nil {
			return Picker{}, fmt.Errorf("envoy: listener %s: %w", l.GetName(), err)
		}
		if ep == nil {
			continue
		}
		if err := CheckExtProc(ep); err != nil {
			return Picker{}, fmt.Errorf("envoy: listener %s: %w", l.GetName(), err)
		}
		rt, err := checkRoutes(hcm, clusters, ep.GetFailureModeAllow())
		if err != nil {
			return Picker{}, fmt.Errorf("envoy: listener %s: %w", l.GetName(), err)
		}
		name := ep.GetGrpcService().GetEnvoyGrpc().GetClusterName()
		pc := clusters[name]
		if pc == nil {
			return Picker{}, fmt.Errorf("envoy: ext_proc calls undefined cluster %q", name)
		}
		if err := checkHTTP2(pc); err != nil {
			return Picker{}, err
		}
		p := Picker{Listener: l.GetName(), Cluster: name, Address: clusterAddress(pc), TLS: pc.GetTransportSocket() != nil,
			FailOpen: ep.GetFailureModeAllow(), Fallback: rt.fallback}
		if rt.fallback != "" {
			p.FallbackAddress = clusterAddress(clusters[rt.fallback])
		}
		if p.Address == "" {
			return Picker{}, fmt.Errorf("envoy: picker cluster %q has no endpoint address", name)
		}
		return p, nil
	}
	return Picker{}, errors.New("envoy: no listener runs the envoy.filters.http.ext_proc filter")
}

func connectionManager(l *listenerv3.Listener) (*hcmv3.HttpConnectionManager, error) {
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			tc := f.GetTypedConfig()
			if tc == nil || tc.MessageName() != "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager" {
				continue
			}
			var hcm hcmv3.HttpConnectionManager
			if err := tc.UnmarshalTo(&hcm); err != nil {
				return nil, fmt.Errorf("envoy: listener %s: %w", l.GetName(), err)
			}
			return &hcm, nil
		}
	}
	return nil, nil
}

// extProc returns the ext_proc filter of hcm, checking that it runs before
// the router; nil if hcm has none.
func extProc(hcm *hcmv3.HttpConnectionManager) (*extprocv3.ExternalProcessor, error) {
	var ep *extprocv3.ExternalProcessor
	for _, f := range hcm.GetHttpFilters() {
		tc := f.GetTypedConfig()
		switch tc.MessageName() {
		case "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor":
			if f.GetDisabled() {
				return nil, errors.New("ext_proc filter is disabled: requests would bypass the picker")
			}
			ep = &extprocv3.ExternalProcessor{}
			if err := tc.UnmarshalTo(ep); err != nil {
				return nil, err
			}
		case "envoy.extensions.filters.http.router.v3.Router":
			return ep, nil
		}
	}
	if ep != nil {
		return nil, errors.New("ext_proc filter is not followed by the router filter")
	}
	return nil, nil
}

// CheckExtProc reports how an ext_proc filter config differs from what the
// picker needs: the full-duplex processing mode with trailers, a message
// timeout of at least a minute, the envoy.lb metadata namespaces, and an
// envoy_grpc service.
func CheckExtProc(ep *extprocv3.ExternalProcessor) error {
	pm := ep.GetProcessingMode()
	want := &extprocv3.ProcessingMode{
		RequestHeaderMode:   extprocv3.ProcessingMode_SEND,
		ResponseHeaderMode:  extprocv3.ProcessingMode_SEND,
		RequestBodyMode:     extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		ResponseBodyMode:    extprocv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		RequestTrailerMode:  extprocv3.ProcessingMode_SEND,
		ResponseTrailerMode: extprocv3.ProcessingMode_SEND,
	}
	if !proto.Equal(pm, want) {
		return fmt.Errorf("ext_proc processing_mode is %v, want %v", pm, want)
	}
	if d := ep.GetMessageTimeout().AsDuration(); d.Seconds() < 60 {
		return fmt.Errorf("ext_proc message_timeout %v is too short: the picker answers headers only after the whole body (use 1000s)", d)
	}
	if !slices.Contains(ep.GetMetadataOptions().GetReceivingNamespaces().GetUntyped(), "envoy.lb") {
		return errors.New("ext_proc metadata_options.receiving_namespaces lacks envoy.lb")
	}
	if !slices.Contains(ep.GetMetadataOptions().GetForwardingNamespaces().GetUntyped(), "envoy.lb.subset_hint") {
		return errors.New("ext_proc metadata_options.forwarding_namespaces lacks envoy.lb.subset_hint")
	}
	if ep.GetGrpcService().GetEnvoyGrpc().GetClusterName() == "" {
		return errors.New("ext_proc grpc_service must use envoy_grpc with a cluster_name")
	}
	return nil
}

// checkDestination checks that route r sends requests where the picker says: an
// ORIGINAL_DST cluster reading DestinationHeader, or a cluster whose
// override_host load balancing policy reads it (header or envoy.lb metadata),
// with a retry on connect failures so a fallback list is walked.
func checkDestination(r *routev3.Route, c *clusterv3.Cluster) error {
	if c == nil {
		return errors.New("route has no cluster")
	}
	if oh := overrideHost(c); oh != nil {
		reads := false
		for _, src := range oh.GetOverrideHostSources() {
			md := src.GetMetadata()
			reads = reads || src.GetHeader() == DestinationHeader ||
				(md.GetKey() == "envoy.lb" && len(md.GetPath()) == 1 && md.GetPath()[0].GetKey() == DestinationHeader)
		}
		if !reads {
			return fmt.Errorf("cluster %s: override_host must read the %s header or envoy.lb metadata", c.GetName(), DestinationHeader)
		}
		rp := r.GetRoute().GetRetryPolicy()
		if rp.GetNumRetries().GetValue() < 1 || !slices.Contains(strings.Split(rp.GetRetryOn(), ","), "connect-failure") {
			return fmt.Errorf("cluster %s uses override_host: the route needs retry_policy {retry_on: connect-failure, num_retries >= 1} to reach the next endpoint", c.GetName())
		}
		return nil
	}
	return checkOriginalDst(c)
}

// overrideHost returns c's override_host policy, or nil.
func overrideHost(c *clusterv3.Cluster) *overridehostv3.OverrideHost {
	for _, p := range c.GetLoadBalancingPolicy().GetPolicies() {
		var oh overridehostv3.OverrideHost
		if a := p.GetTypedExtensionConfig().GetTypedConfig(); a != nil && a.MessageIs(&oh) && a.UnmarshalTo(&oh) == nil {
			return &oh
		}
	}
	return nil
}

func checkOriginalDst(c *clusterv3.Cluster) error {
	if c.GetType() != clusterv3.Cluster_ORIGINAL_DST || c.GetLbPolicy() != clusterv3.Cluster_CLUSTER_PROVIDED {
		return fmt.Errorf("cluster %s is not ORIGINAL_DST with lb_policy CLUSTER_PROVIDED", c.GetName())
	}
	o := c.GetOriginalDstLbConfig()
	if !o.GetUseHttpHeader() || o.GetHttpHeaderName() != DestinationHeader {
		return fmt.Errorf("cluster %s must set original_dst_lb_config {use_http_header: true, http_header_name: %s}", c.GetName(), DestinationHeader)
	}
	return nil
}

func checkHTTP2(c *clusterv3.Cluster) error {
	const key = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	a := c.GetTypedExtensionProtocolOptions()[key]
	var po upstreamhttpv3.HttpProtocolOptions
	if a == nil || a.UnmarshalTo(&po) != nil || po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		return fmt.Errorf("envoy: picker cluster %s must speak HTTP/2 (typed_extension_protocol_options %s explicit_http_config.http2_protocol_options)", c.GetName(), key)
	}
	return nil
}
