package kube

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestRegisterFlags(t *testing.T) {
	tests := []struct {
		name     string
		env      string
		args     []string
		want     Config
		wantMode Mode
	}{
		{"defaults without NAMESPACE", "", nil,
			Config{PoolNamespace: "default", PoolGroup: DefaultPoolGroup}, ModeOff},
		{"namespace from NAMESPACE", "llm", nil,
			Config{PoolNamespace: "llm", PoolGroup: DefaultPoolGroup}, ModeOff},
		{"GIE pool flags", "llm", []string{"--pool-name", "vllm", "--pool-namespace", "prod", "--pool-group", "example.com"},
			Config{PoolName: "vllm", PoolNamespace: "prod", PoolGroup: "example.com"}, ModePool},
		{"standalone selector flags", "", []string{"--endpoint-selector", "app=vllm", "--endpoint-target-ports", "8000, 8001"},
			Config{PoolNamespace: "default", PoolGroup: DefaultPoolGroup, EndpointSelector: "app=vllm", EndpointTargetPorts: []int32{8000, 8001}}, ModeSelector},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("NAMESPACE", tt.env)
			var c Config
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			c.RegisterFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if c.PoolName != tt.want.PoolName || c.PoolNamespace != tt.want.PoolNamespace || c.PoolGroup != tt.want.PoolGroup ||
				c.EndpointSelector != tt.want.EndpointSelector || !slices.Equal(c.EndpointTargetPorts, tt.want.EndpointTargetPorts) {
				t.Errorf("config = %+v, want %+v", c, tt.want)
			}
			if c.Mode() != tt.wantMode {
				t.Errorf("mode = %v, want %v", c.Mode(), tt.wantMode)
			}
		})
	}
}

func TestBadTargetPortsFlag(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"--endpoint-target-ports", "http"}); err == nil || !strings.Contains(err.Error(), `port "http"`) {
		t.Fatalf("Parse error = %v, want one naming the bad port", err)
	}
}

func TestValidate(t *testing.T) {
	base := Config{PoolNamespace: "llm", PoolGroup: DefaultPoolGroup}
	with := func(f func(*Config)) Config { c := base; f(&c); return c }
	tests := []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"off", base, ""},
		{"pool", with(func(c *Config) { c.PoolName = "vllm" }), ""},
		{"selector", with(func(c *Config) { c.EndpointSelector = "app=vllm,tier in (a,b)"; c.EndpointTargetPorts = []int32{8000} }), ""},
		{"both pool and selector", with(func(c *Config) { c.PoolName = "p"; c.EndpointSelector = "app=x" }), "pass one"},
		{"ports without selector", with(func(c *Config) { c.EndpointTargetPorts = []int32{8000} }), "needs --endpoint-selector"},
		{"ports with pool", with(func(c *Config) { c.PoolName = "p"; c.EndpointTargetPorts = []int32{8000} }), "pool's spec.targetPorts"},
		{"bad pool name", with(func(c *Config) { c.PoolName = "Not_A_Name" }), "not a valid object name"},
		{"alpha group", with(func(c *Config) { c.PoolName = "p"; c.PoolGroup = "inference.networking.x-k8s.io" }), "v1alpha2"},
		{"bad group", with(func(c *Config) { c.PoolName = "p"; c.PoolGroup = "" }), "not a valid API group"},
		{"bad selector", with(func(c *Config) { c.EndpointSelector = "app==="; c.EndpointTargetPorts = []int32{8000} }), "--endpoint-selector"},
		{"selector selecting everything", with(func(c *Config) { c.EndpointSelector = " "; c.EndpointTargetPorts = []int32{8000} }), "selects every pod"},
		{"selector without ports", with(func(c *Config) { c.EndpointSelector = "app=vllm" }), "needs --endpoint-target-ports"},
		{"bad namespace", with(func(c *Config) { c.PoolName = "p"; c.PoolNamespace = "" }), "not a valid namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestParsePorts(t *testing.T) {
	tests := []struct {
		in      string
		want    []int32
		wantErr string
	}{
		{"8000", []int32{8000}, ""},
		{"8000,8001", []int32{8000, 8001}, ""},
		{" 1 , 65535 ", []int32{1, 65535}, ""},
		{"", nil, `port ""`},
		{"8000,", nil, `port ""`},
		{"0", nil, `port "0"`},
		{"65536", nil, `port "65536"`},
		{"-1", nil, `port "-1"`},
		{"80a", nil, `port "80a"`},
		{"8000,8000", nil, "listed twice"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePorts(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePorts(%q) error = %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("ParsePorts(%q) = %v, %v, want %v", tt.in, got, err, tt.want)
			}
		})
	}
}

func FuzzParsePorts(f *testing.F) {
	for _, s := range []string{"8000", "8000,8001", " 1 ,2", "", "0", "99999", "a,b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ports, err := ParsePorts(s)
		if err != nil {
			return
		}
		// Accepted lists are non-empty, in range, distinct, and round-trip.
		if len(ports) == 0 {
			t.Fatalf("ParsePorts(%q) accepted an empty list", s)
		}
		seen := map[int32]bool{}
		for _, p := range ports {
			if p < 1 || p > 65535 || seen[p] {
				t.Fatalf("ParsePorts(%q) = %v: out of range or repeated", s, ports)
			}
			seen[p] = true
		}
		pl := portList(ports)
		again, err := ParsePorts(pl.String())
		if err != nil || !slices.Equal(again, ports) {
			t.Fatalf("round trip of %v: %v, %v", ports, again, err)
		}
	})
}

func TestNewClientsFromEnv(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("HOME", t.TempDir())
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("clusters: {"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		kubeconfig string
		wantErr    string
	}{
		{"kubeconfig from KUBECONFIG", good, ""},
		{"unparsable kubeconfig", bad, "set KUBECONFIG"},
		{"no config anywhere", "", "set KUBECONFIG"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", tt.kubeconfig)
			client, dyn, err := NewClientsFromEnv()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || client == nil || dyn == nil {
				t.Fatalf("NewClientsFromEnv = %v, %v, %v", client, dyn, err)
			}
		})
	}
}
