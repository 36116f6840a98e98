package envoy

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestShippedConfigs(t *testing.T) {
	tests := []struct {
		file string
		want Picker
	}{
		{"gateway.yaml", Picker{Listener: "gateway", Cluster: "loadaware-epp", Address: "loadaware-epp:9002", TLS: true,
			Fallback: "engine_fallback", FallbackAddress: "vllm-engines:8000"}},
		{"sidecar.yaml", Picker{Listener: "gateway", Cluster: "loadaware-epp", Address: "127.0.0.1:9002", TLS: false,
			Fallback: "engine_fallback", FallbackAddress: "vllm-engines:8000"}},
		{"fallback.yaml", Picker{Listener: "gateway", Cluster: "loadaware-epp", Address: "loadaware-epp:9002", TLS: true}},
		{"replicas.yaml", Picker{Listener: "gateway", Cluster: "loadaware-epp", Address: "loadaware-epp-headless:9002", TLS: true,
			FailOpen: true, Fallback: "engine_fallback", FallbackAddress: "vllm-engines:8000"}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			data, err := Files.ReadFile(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Load(data)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			got, err := CheckPicker(b)
			if err != nil {
				t.Fatalf("CheckPicker: %v", err)
			}
			if got != tt.want {
				t.Fatalf("CheckPicker = %+v, want %+v", got, tt.want)
			}
			if err := CheckDecisionLog(b); err != nil {
				t.Fatalf("CheckDecisionLog: %v", err)
			}
		})
	}
}

// TestEveryFileIsShipped keeps Files, the table above and the folder in step.
func TestEveryFileIsShipped(t *testing.T) {
	onDisk, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := fs.Glob(Files, "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(onDisk, embedded) {
		t.Fatalf("YAML files on disk %v, embedded %v: add new configs to Files and TestShippedConfigs", onDisk, embedded)
	}
	for _, f := range onDisk {
		disk, _ := os.ReadFile(f)
		emb, _ := Files.ReadFile(f)
		if string(disk) != string(emb) {
			t.Errorf("%s differs from its embedded copy", f)
		}
	}
}

func TestLoadRejects(t *testing.T) {
	gateway, err := Files.ReadFile("gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := string(gateway)
	tests := []struct {
		name     string
		old, new string // replaced once in gateway.yaml
		want     string
	}{
		{"unknown field", "codec_type: AUTO", "codec_typo: AUTO", "codec_typo"},
		{"duplicate key", "codec_type: AUTO", "codec_type: AUTO\n                codec_type: AUTO", "already set"},
		{"unknown typed config", "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router\n                      suppress_envoy_headers",
			"type.googleapis.com/envoy.extensions.filters.http.nope.v3.Nope\n                      suppress_envoy_headers", "nope"},
		{"invalid value in a typed config", "connect_timeout: 5s\n      original_dst", "connect_timeout: -5s\n      original_dst", "ConnectTimeout"},
		{"invalid value inside a nested typed config", "string_match: { exact: /ready }", "string_match: { }", "MatchPattern"},
		{"bad enum", "request_body_mode: FULL_DUPLEX_STREAMED", "request_body_mode: FULL_DUPLEX", "FULL_DUPLEX"},
		{"not YAML", "admin:", "admin: [", "YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(src, tt.old) {
				t.Fatalf("gateway.yaml lacks %q", tt.old)
			}
			_, err := Load([]byte(strings.Replace(src, tt.old, tt.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Load error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestCheckPickerRejects(t *testing.T) {
	gateway, err := Files.ReadFile("gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := string(gateway)
	tests := []struct {
		name     string
		old, new string
		want     string
	}{
		{"buffered body mode", "request_body_mode: FULL_DUPLEX_STREAMED", "request_body_mode: BUFFERED", "processing_mode"},
		{"default message timeout", "message_timeout: 1000s", "message_timeout: 0.2s", "message_timeout"},
		{"no envoy.lb namespace", "receiving_namespaces: { untyped: [envoy.lb, loadaware.decision] }", "receiving_namespaces: { untyped: [other] }", "receiving_namespaces"},
		{"no subset hint forwarding", "forwarding_namespaces: { untyped: [envoy.lb.subset_hint] }", "forwarding_namespaces: { untyped: [] }", "forwarding_namespaces"},
		{"header name", "http_header_name: x-gateway-destination-endpoint", "http_header_name: x-destination", "original_dst_lb_config"},
		{"not original dst", "type: ORIGINAL_DST\n      lb_policy: CLUSTER_PROVIDED", "type: STATIC\n      lb_policy: ROUND_ROBIN", "ORIGINAL_DST"},
		{"route to a missing cluster", "cluster: original_destination_cluster", "cluster: missing", "undefined cluster"},
		{"ext_proc to a missing cluster", "envoy_grpc: { cluster_name: loadaware-epp }", "envoy_grpc: { cluster_name: epp }", "undefined cluster"},
		{"picker over HTTP/1", "http2_protocol_options: {}", "http_protocol_options: {}", "HTTP/2"},
		{"disabled ext_proc", "- name: envoy.filters.http.ext_proc", "- name: envoy.filters.http.ext_proc\n                    disabled: true", "disabled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(src, tt.old) {
				t.Fatalf("gateway.yaml lacks %q", tt.old)
			}
			b, err := Load([]byte(strings.Replace(src, tt.old, tt.new, 1)))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			_, err = CheckPicker(b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckPicker error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestCheckPickerNeedsExtProc(t *testing.T) {
	sidecar, err := Files.ReadFile("sidecar.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(sidecar)
	if err != nil {
		t.Fatal(err)
	}
	b.StaticResources.Listeners = b.StaticResources.Listeners[:1] // only the readiness listener
	if _, err := CheckPicker(b); err == nil || !strings.Contains(err.Error(), "no listener runs") {
		t.Fatalf("CheckPicker error = %v, want one saying no listener runs ext_proc", err)
	}
}

func TestCheckPickerRejectsAFallbackConfigThatCannotFallBack(t *testing.T) {
	data, err := Files.ReadFile("fallback.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := string(data)
	for _, tt := range []struct {
		name     string
		old, new string
		want     string
	}{
		{"no retry", "retry_on: connect-failure,refused-stream,reset", "retry_on: 5xx", "retry_policy"},
		{"no retries", "num_retries: 1", "num_retries: 0", "retry_policy"},
		{"reads another header", "- header: x-gateway-destination-endpoint\n                  - metadata:\n                      key: envoy.lb",
			"- header: x-other\n                  - metadata:\n                      key: other", "override_host must read"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(src, tt.old) {
				t.Fatalf("fallback.yaml lacks %q", tt.old)
			}
			b, err := Load([]byte(strings.Replace(src, tt.old, tt.new, 1)))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if _, err := CheckPicker(b); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckPicker error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
