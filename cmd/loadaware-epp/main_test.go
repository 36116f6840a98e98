package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/internal/testlog"
	"github.com/loadaware/loadaware-epp/picker"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParseErrorsSayWhatIsWrongAndWhatIsRight(t *testing.T) {
	ok := "--endpoints=10.0.0.1:8000"
	tests := []struct {
		name    string
		args    []string
		env     func(string) string
		wantErr string
	}{
		{"no endpoints", nil, env(), "pass --endpoints ip:port"},
		{"static list and discovery", []string{ok, "--pool-name", "p"}, env(), "use one"},
		{"selector without ports", []string{"--endpoint-selector", "app=vllm"}, env(), "--endpoint-target-ports"},
		{"host name endpoint", []string{"--endpoints", "vllm-0:8000"}, env(), "not an IP address"},
		{"negative beta", []string{ok, "--beta", "-1"}, env(), "--beta: beta -1 is out of range: use a number from 0"},
		{"beta not a number", []string{ok, "--beta", "x"}, env(), `invalid value "x" for flag -beta`},
		{"bad LOADAWARE_BETA", []string{ok}, env("LOADAWARE_BETA", "high"), `LOADAWARE_BETA="high" is not a number`},
		{"unknown policy", []string{ok, "--policy", "fastest"}, env(), "use one of loadaware, kvaware"},
		{"port out of range", []string{ok, "--metrics-port", "0"}, env(), "--metrics-port 0 is not a port: use 1-65535"},
		{"bad body mode", []string{ok, "--body-mode", "streamed"}, env(), "use full-duplex (GIE's FULL_DUPLEX_STREAMED) or buffered"},
		{"max endpoints", []string{ok, "--max-endpoints", "0"}, env(), "use 1 (no fallbacks) to 64"},
		{"tiny body limit", []string{ok, "--max-body-bytes", "10"}, env(), "use at least 1024"},
		{"log level", []string{ok, "--log-level", "loud"}, env(), "use debug, info, warn or error"},
		{"cert path without TLS", []string{ok, "--secure-serving=false", "--cert-path", "/x"}, env(), "drop one of them"},
		{"zap encoder", []string{ok, "--zap-encoder", "xml"}, env(), "use json or console"},
		{"stray argument", []string{ok, "extra"}, env(), `unexpected argument "extra"`},
		{"unknown flag", []string{ok, "--speed", "9"}, env(), "run loadaware-epp serve -h"},
		{"removed flag", []string{ok, "--lmcache-zmtp-front=false"}, env(), "--lmcache-zmtp-front was removed: the ZMTP front is the LMCache controller's only path"},
		{"removed flag, one dash", []string{ok, "-lmcache-zmtp-front"}, env(), "--lmcache-zmtp-front was removed"},
		{"lmcache key format", []string{ok, "--lmcache-key-format", "v9"}, env(), "--lmcache-key-format"},
		{"lora cost not two counts", []string{ok, "--lora-residency-cost", "4"}, env(), "use FREE,FULL"},
		{"lora cost negative", []string{ok, "--lora-residency-cost", "1,-2"}, env(), "--lora-residency-cost"},
		{"lmcache allow", []string{ok, "--lmcache-allow-from", "everyone"}, env(), "--lmcache-allow-from"},
		{"lmcache chunk size", []string{ok, "--lmcache-chunk-size", "0"}, env(), "--lmcache-chunk-size"},
		{"lmcache port", []string{ok, "--lmcache-pull-port", "99999"}, env(), "--lmcache-pull-port 99999 is not a port"},
		{"cache source", []string{ok, "--cache-source", "redis"}, env(), "--cache-source: unknown cache source \"redis\": use lmcache"},
		{"kv events port", []string{ok, "--cache-source", "vllm-events", "--kv-events-port", "0"}, env(), "--kv-events-port 0 is not a port"},
		{"kv events credit", []string{ok, "--cache-source", "both", "--kv-events-medium-credit", "CPU=3"}, env(), "--kv-events-medium-credit"},
		{"kv events dp size", []string{ok, "--cache-source", "vllm-events", "--kv-events-dp-size", "0"}, env(), "--kv-events-dp-size 0"},
		{"both without LMCache", []string{ok, "--cache-source", "both", "--lmcache-pull-port", "0"}, env(), "drop --lmcache-pull-port 0"},
		{"nats url without scheme", []string{ok, "--nats-url", "nats-host:4222"}, env(), "--nats-url \"nats-host:4222\": give nats://host:port"},
		{"nats url from env checked", []string{ok}, env("LOADAWARE_NATS_URL", "http://x:1"), "--nats-url \"http://x:1\""},
		{"nats subject wildcard", []string{ok, "--nats-url", "nats://n:4222", "--nats-subject", "a.>"}, env(), "--nats-subject \"a.>\""},
		{"peer timeout under the state interval", []string{ok, "--nats-url", "nats://n:4222", "--replica-peer-timeout", "100ms"}, env(), "--replica-peer-timeout 100ms must be longer than --replica-state-interval 200ms"},
		{"state file without LMCache", []string{ok, "--lmcache-pull-port", "0", "--state-file", "/tmp/s"}, env(), "--state-file needs the LMCache controller"},
		{"state file in a missing directory", []string{ok, "--state-file", "/nonexistent/dir/s"}, env(), "--state-file /nonexistent/dir/s: its directory does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := parse(tt.args, tt.env)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

func TestParseDefaultsAndPrecedence(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      func(string) string
		wantBeta float64
	}{
		{"default beta", []string{"--endpoints", "10.0.0.1:8000"}, env(), 1},
		{"env beats the default", []string{"--endpoints", "10.0.0.1:8000"}, env("LOADAWARE_BETA", "0.5"), 0.5},
		{"flag beats env", []string{"--endpoints", "10.0.0.1:8000", "--beta", "2"}, env("LOADAWARE_BETA", "0.5"), 2},
		{"flag beats a bad env", []string{"--endpoints", "10.0.0.1:8000", "--beta", "2"}, env("LOADAWARE_BETA", "x"), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := parse(tt.args, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Beta != tt.wantBeta {
				t.Fatalf("beta %v, want %v", cfg.Beta, tt.wantBeta)
			}
			if cfg.AdapterCost != picker.DefaultAdapterCost || cfg.BaseModels != nil {
				t.Fatalf("LoRA defaults: cost %+v, base models %v", cfg.AdapterCost, cfg.BaseModels)
			}
			if cfg.GRPCAddr != ":9002" || cfg.HealthAddr != ":9003" || cfg.MetricsAddr != ":9090" || !cfg.SecureServing ||
				cfg.Policy != "loadaware" || cfg.MaxEndpoints != 1 {
				t.Fatalf("GIE defaults not kept: %+v", cfg)
			}
		})
	}
	cfg, o, err := parse([]string{"--endpoints", "10.0.0.1:8000", "--config-file", "p", "--zap-encoder", "json", "--v", "4", "--admin-token", "t"}, env())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.LMCache == nil || cfg.LMCache.Keys.HashSeed != "123" || cfg.LMCache.PullAddr != ":9000" || cfg.LMCache.ReplyAddr != ":9001" {
		t.Fatalf("LMCache defaults not kept: %+v", cfg.LMCache)
	}
	if cfg, _, _ := parse([]string{"--endpoints", "10.0.0.1:8000"}, env("PYTHONHASHSEED", "7")); cfg.LMCache.Keys.HashSeed != "7" {
		t.Fatalf("PYTHONHASHSEED not used as the hash seed: %+v", cfg.LMCache.Keys)
	}
	if _, o, err := parse([]string{"--pool-name", "vllm-pool", "--pool-namespace", "llm"}, env()); err != nil || o.kube.Mode().String() != "inferencepool" {
		t.Fatalf("pool discovery flags: %v %+v", err, o.kube)
	}
	if *o.unsupported["config-file"] != "p" || o.logFormat != "json" || o.logLevel != "debug" || cfg.AdminToken != "t" {
		t.Fatalf("GIE flags not read: %+v", o)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestServeStartsAndStops runs the picker on ports free a moment before (the flags take
// no port 0): a parallel test may bind one in that moment, and then the start fails with
// EADDRINUSE and is tried again on new ports. Once it has started the picker holds its
// ports, so the /readyz polled is its own.
func TestServeStartsAndStops(t *testing.T) {
	for attempt := 1; ; attempt++ {
		mp := freePort(t)
		args := []string{"--bind-address", "127.0.0.1", "--grpc-port", fmt.Sprint(freePort(t)), "--grpc-health-port", "0",
			"--metrics-port", fmt.Sprint(mp), "--endpoints", "10.0.0.1:8000", "--config-file", "ignored",
			"--lmcache-pull-port", fmt.Sprint(freePort(t)), "--lmcache-reply-port", "0"}
		ctx, cancel := context.WithCancel(context.Background())
		stderr := &testlog.Buffer{}
		started := stderr.Seen("loadaware-epp started") // the picker has bound its ports
		done := make(chan int, 1)
		go func() { done <- serve(ctx, args, env(), &bytes.Buffer{}, stderr) }()
		select {
		case <-started:
		case code := <-done:
			cancel()
			if attempt < 5 && strings.Contains(strings.ToLower(stderr.String()), "address already in use") {
				t.Logf("start %d: a port was taken before the picker bound it; again on new ports:\n%s", attempt, stderr.String())
				continue
			}
			t.Fatalf("exit %d before the start; log:\n%s", code, stderr.String())
		case <-time.After(10 * time.Second):
			cancel()
			t.Fatalf("not started after 10s; log:\n%s", stderr.String())
		}
		if err := waitReady(mp, nil, time.Now().Add(10*time.Second)); err != nil {
			cancel()
			t.Fatalf("%v; log:\n%s", err, stderr.String())
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("exit %d; log:\n%s", code, stderr.String())
		}
		if !strings.Contains(stderr.String(), "--config-file") || !strings.Contains(stderr.String(), "not supported") {
			t.Fatalf("the unsupported GIE flag was not logged:\n%s", stderr.String())
		}
		return
	}
}

func TestRunDispatch(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"version"}, nil, &out, &errb); code != 0 || !strings.HasPrefix(out.String(), "loadaware-epp ") {
		t.Fatalf("version: %d %q", code, out.String())
	}
	if code := run([]string{"frobnicate"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatalf("unknown command: %d %q", code, errb.String())
	}
	out.Reset()
	if code := run([]string{"serve", "-h"}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "-endpoints") {
		t.Fatalf("help: %d %q", code, out.String())
	}
}

func TestTokenizeSubcommandAndTokenizerFlags(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"tokenize", "--tokenizer", "../../testdata/ext/qwen2_5"}, strings.NewReader("\"Hello world\"\n"), &out, &errb)
	if code != 0 || strings.TrimSpace(out.String()) != "[9707,1879]" {
		t.Fatalf("tokenize: exit %d, out %q, err %q (run make testdata if the tokenizer is missing)", code, out.String(), errb.String())
	}
	errb.Reset()
	code = serve(context.Background(), []string{"--endpoints", "10.0.0.1:8000", "--lmcache-pull-port", "0", "--tokenizer", t.TempDir() + "/missing"}, env(), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "--tokenizer") {
		t.Fatalf("a missing tokenizer must stop the start with a clear error: exit %d, %q", code, errb.String())
	}
}
