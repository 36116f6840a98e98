package gateway

import (
	"net/http"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
)

func TestHeaderMutationFollowsEnvoy(t *testing.T) {
	set := func(k, v string, a corev3.HeaderValueOption_HeaderAppendAction) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}, AppendAction: a}
	}
	tests := []struct {
		name     string
		mut      *extprocv3.HeaderMutation
		want     http.Header
		wantPath string
		wantAuth string
		wantErr  bool
	}{
		{"overwrite replaces an existing value",
			&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-a", "new", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}},
			http.Header{"X-A": {"new"}, "X-B": {"b"}}, "/p", "h", false},
		{"the default action overwrites, as Envoy's ext_proc does",
			&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-a", "new", corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD)}},
			http.Header{"X-A": {"new"}, "X-B": {"b"}}, "/p", "h", false},
		{"add-if-absent leaves an existing header",
			&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-a", "new", corev3.HeaderValueOption_ADD_IF_ABSENT), set("x-c", "c", corev3.HeaderValueOption_ADD_IF_ABSENT)}},
			http.Header{"X-A": {"old"}, "X-B": {"b"}, "X-C": {"c"}}, "/p", "h", false},
		{"overwrite-if-exists adds nothing new",
			&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-c", "c", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS)}},
			http.Header{"X-A": {"old"}, "X-B": {"b"}}, "/p", "h", false},
		{"removals apply before sets and skip pseudo-headers",
			&extprocv3.HeaderMutation{RemoveHeaders: []string{"x-b", ":path"}, SetHeaders: []*corev3.HeaderValueOption{set("x-b", "again", corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD)}},
			http.Header{"X-A": {"old"}, "X-B": {"again"}}, "/p", "h", false},
		{":path and :authority may be rewritten",
			&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set(":path", "/v2", 0), set(":authority", "e", 0)}},
			http.Header{"X-A": {"old"}, "X-B": {"b"}}, "/v2", "e", false},
		{"value and raw_value together are rejected",
			&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-a", Value: "v", RawValue: []byte("r")}}}},
			nil, "", "", true},
		{"a value with a line break is rejected",
			&extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{set("x-a", "v\r\nx-evil: 1", 0)}},
			nil, "", "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := message{path: "/p", authority: "h", header: http.Header{"X-A": {"old"}, "X-B": {"b"}}}
			err := m.apply(tc.mut)
			if (err != nil) != tc.wantErr {
				t.Fatalf("apply error = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.want, m.header); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			if m.path != tc.wantPath || m.authority != tc.wantAuth {
				t.Errorf("path %q authority %q, want %q %q", m.path, m.authority, tc.wantPath, tc.wantAuth)
			}
		})
	}
}

func TestDestinationsSplitsTheFallbackList(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"10.0.0.1:8000", []string{"10.0.0.1:8000"}},
		{"10.0.0.1:8000,10.0.0.2:8000", []string{"10.0.0.1:8000", "10.0.0.2:8000"}},
		{" [::1]:8000 , ,10.0.0.2:8000", []string{"[::1]:8000", "10.0.0.2:8000"}},
		{"", nil},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, destinations(tc.in)); diff != "" {
			t.Errorf("destinations(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}
