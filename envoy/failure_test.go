package envoy

import (
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/extproc"
)

// failOpen is gateway.yaml with failure_mode_allow true, then each replacement applied.
func failOpen(t *testing.T, replace ...string) string {
	t.Helper()
	data, err := Files.ReadFile("gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := string(data)
	replace = append([]string{"failure_mode_allow: false", "failure_mode_allow: true"}, replace...)
	for i := 0; i < len(replace); i += 2 {
		if !strings.Contains(src, replace[i]) {
			t.Fatalf("gateway.yaml lacks %q", replace[i])
		}
		src = strings.Replace(src, replace[i], replace[i+1], 1)
	}
	return src
}

func TestFailOpen(t *testing.T) {
	b, err := Load([]byte(failOpen(t)))
	if err != nil {
		t.Fatal(err)
	}
	p, err := CheckPicker(b)
	if err != nil {
		t.Fatalf("CheckPicker: %v", err)
	}
	if !p.FailOpen || p.Fallback != "engine_fallback" || p.FallbackAddress != "vllm-engines:8000" {
		t.Fatalf("CheckPicker = %+v, want fail open to engine_fallback at vllm-engines:8000", p)
	}
}

func TestFailOpenRejects(t *testing.T) {
	const headerRoute = `- match:
                            prefix: /
                            headers:
                              - { name: x-gateway-destination-endpoint, present_match: true }`
	tests := []struct {
		name    string
		replace []string
		want    string
	}{
		{"no fallback route", []string{"cluster: engine_fallback\n", "cluster: original_destination_cluster\n"}, "loops back"},
		{"picker route without the header", []string{headerRoute, "- match: { prefix: / }"}, "loops back"},
		{"client header kept", []string{"- remove: x-gateway-destination-endpoint", "- remove: x-other"}, "clients could choose"},
		{"fallback before the picker's route", []string{headerRoute, "- match: { prefix: / }\n                          route: { cluster: engine_fallback }\n                        " + headerRoute}, "comes after the fallback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Load([]byte(failOpen(t, tt.replace...)))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if _, err := CheckPicker(b); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckPicker error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestDecisionNamesMatchThePicker keeps this package's copies of extproc's names equal.
func TestDecisionNamesMatchThePicker(t *testing.T) {
	if ScoresKey != extproc.ScoresKey || DecisionNamespace != extproc.DecisionNamespace || DestinationHeader != extproc.DestinationHeader {
		t.Fatalf("envoy names %s %s %s, extproc %s %s %s", ScoresKey, DecisionNamespace, DestinationHeader,
			extproc.ScoresKey, extproc.DecisionNamespace, extproc.DestinationHeader)
	}
}

func TestCheckDecisionLogRejects(t *testing.T) {
	data, err := Files.ReadFile("gateway.yaml")
	if err != nil {
		t.Fatal(err)
	}
	src := string(data)
	tests := []struct {
		name, old, new, want string
	}{
		{"scores not logged", `scores: "%DYNAMIC_METADATA(envoy.lb:x-gateway-destination-endpoint-scores)%"`, `scores: "-"`, "x-gateway-destination-endpoint-scores"},
		{"reason not logged", `reason: "%DYNAMIC_METADATA(loadaware.decision:reason)%"`, `reason: "%DYNAMIC_METADATA(loadaware.decision:why)%"`, "loadaware.decision:reason"},
		{"namespace not received", "untyped: [envoy.lb, loadaware.decision]", "untyped: [envoy.lb]", "receiving_namespaces lacks loadaware.decision"},
		{"unknown operator", `"%DURATION%"`, `"%DURATON%"`, "unknown command operator"},
		{"metadata without a key", `"%DYNAMIC_METADATA(loadaware.decision:ranked)%"`, `"%DYNAMIC_METADATA(loadaware.decision)%"`, "NAMESPACE:KEY"},
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
			if err := CheckDecisionLog(b); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("CheckDecisionLog error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}
