package main

import (
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/extproc"
	"github.com/loadaware/loadaware-epp/picker"
)

func TestHardeningFlags(t *testing.T) {
	ok := "--endpoints=10.0.0.1:8000"
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no streams", []string{ok, "--max-streams", "0"}, "--max-streams 0: use at least 1"},
		{"budget under one body", []string{ok, "--max-buffered-bytes", "2048"}, "smaller than --max-body-bytes"},
		{"idle timeout", []string{ok, "--stream-idle-timeout", "0s"}, "--stream-idle-timeout 0s"},
		{"explain", []string{ok, "--explain", "some"}, "--explain: explain mode \"some\""},
		{"prompt bound", []string{ok, "--max-prompt-bytes", "0"}, "or -1 for no bound"},
		{"mTLS without TLS", []string{ok, "--secure-serving=false", "--client-ca", "/ca.pem"}, "--client-ca needs --secure-serving"},
		{"connections", []string{ok, "--max-connections-per-ip", "0"}, "must be at least 1"},
		{"health interval", []string{ok, "--health-check-interval", "-1s"}, "--health-check-interval -1s"},
		{"lmcache keys", []string{ok, "--lmcache-max-keys", "0"}, "--lmcache-max-keys must be a count"},
		{"conn read rate", []string{ok, "--grpc-conn-read-rate", "0"}, "--grpc-conn-read-rate must be bytes per second"},
		{"conn read burst", []string{ok, "--grpc-conn-read-burst", "0"}, "--grpc-conn-read-burst at least 1 byte"},
		{"unpaced body bytes", []string{ok, "--grpc-unpaced-body-bytes", "0"}, "--grpc-unpaced-body-bytes 0: use at least 1 byte"},
		{"message size", []string{ok, "--grpc-max-message-bytes", "1000"}, "--grpc-max-message-bytes 1000: use at least 65536"},
		{"lmcache peer rate", []string{ok, "--lmcache-peer-rate", "-2"}, "--lmcache-peer-rate must be bytes per second"},
		{"lmcache peer burst", []string{ok, "--lmcache-peer-burst", "0"}, "--lmcache-peer-burst at least 1 byte"},
		{"lmcache frame cap", []string{ok, "--lmcache-max-frame-bytes", "100"}, "--lmcache-max-frame-bytes 100: use at least 4096 bytes"},
		{"lmcache connections", []string{ok, "--lmcache-max-peer-conns", "0"}, "--lmcache-max-peer-conns 0: use at least 1"},
		{"lmcache connections", []string{ok, "--lmcache-max-peer-conns", "-2"}, "--lmcache-max-peer-conns -2: use at least 1"},
		{"large tokenize cpu zero", []string{ok, "--large-tokenize-cpu", "0"}, "--large-tokenize-cpu 0: give a share of one CPU such as 0.5"},
		{"large tokenize cpu negative", []string{ok, "--large-tokenize-cpu", "-0.5"}, "--large-tokenize-cpu -0.5: give a share of one CPU"},
		{"large tokenize cpu NaN", []string{ok, "--large-tokenize-cpu", "NaN"}, "--large-tokenize-cpu NaN: give a share of one CPU"},
		{"large tokenize cpu Inf", []string{ok, "--large-tokenize-cpu", "+Inf"}, "--large-tokenize-cpu +Inf: give a share of one CPU"},
		{"large tokenize cpu word", []string{ok, "--large-tokenize-cpu", "half"}, `invalid value "half" for flag -large-tokenize-cpu`},
		{"gc percent", []string{ok, "--gc-percent", "0"}, "--gc-percent 0: use a GOGC of at least 1"},
		{"memory limit", []string{ok, "--memory-limit", "-2"}, "--memory-limit -2: use a limit in bytes"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parse(tt.args, env())
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("err = %v, want one line containing %q", err, tt.wantErr)
			}
		})
	}
	cfg, _, err := parse([]string{ok}, env())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LMCache.MaxKeys != 1<<20 || cfg.LMCache.MaxInstancesPerIP != 8 || cfg.LMCache.PeerRate != 1<<20 || cfg.LMCache.PeerBurst != 1<<20 ||
		cfg.LMCache.MaxFrameBytes != 256<<10 || cfg.LMCache.MaxPeerConns != 8 {
		t.Fatalf("lmcache bounds: %+v", cfg.LMCache)
	}
	if cfg.Explain != extproc.ExplainToken || cfg.MaxPromptBytes != picker.DefaultMaxPromptBytes || cfg.Limits.MaxStreams != extproc.DefaultMaxStreams ||
		cfg.Health.CheckInterval != 250*time.Millisecond || cfg.Health.CheckPath != "/health" || cfg.ConnReadRate != 32<<20 || cfg.ConnReadBurst != 32<<20 {
		t.Fatalf("defaults: %+v", cfg)
	}
	if cfg.LargeTokenizeCPU != picker.DefaultLargeTokenizeCPU {
		t.Fatalf("--large-tokenize-cpu default: %g, want %g", cfg.LargeTokenizeCPU, picker.DefaultLargeTokenizeCPU)
	}
	for _, v := range []string{"-1", "0.05", "2"} {
		if _, _, err := parse([]string{ok, "--large-tokenize-cpu", v}, env()); err != nil {
			t.Fatalf("--large-tokenize-cpu %s: %v", v, err)
		}
	}
	cfg, _, err = parse([]string{"--pool-name", "p", "--pool-namespace", "n", "--explain", "all", "--max-prompt-bytes", "-1"}, env())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Explain != extproc.ExplainAll || cfg.MaxPromptBytes != -1 || cfg.Health.CheckInterval != 0 {
		t.Fatalf("discovery mode: active checks should be off, explain all, no prompt bound: %+v", cfg)
	}
}
