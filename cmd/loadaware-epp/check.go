package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/stackcheck"
)

// checkOptions are the flags of the check subcommand.
type checkOptions struct {
	metrics, gateway string
	token            string // from LOADAWARE_ADMIN_TOKEN
	engineKey        string // from VLLM_API_KEY: the engines' --api-key, sent on their /v1 calls
	model            string
	timeout, settle  time.Duration
	probeRequests    int
	heartbeatMaxAge  time.Duration
	replicas         int
}

func newCheckFlagSet(o *checkOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("loadaware-epp check", flag.ContinueOnError)
	fs.StringVar(&o.metrics, "metrics", "", "the picker's metrics/admin URL, e.g. http://picker:9090 or http://picker:9090/metrics (required; admin token from env LOADAWARE_ADMIN_TOKEN)")
	fs.StringVar(&o.gateway, "gateway", "", "the gateway's URL, e.g. http://gateway:8080: runs the registry probe (one long prefix sent -probe-requests times must land on one engine, credited after the first)")
	fs.StringVar(&o.model, "model", "", "model name sent to the engines (default: the first of each engine's GET /v1/models)")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "timeout of one HTTP call or dial")
	fs.DurationVar(&o.settle, "settle", 5*time.Second, "longest wait for an engine's cache events to reach the picker after a prompt was sent to it")
	fs.IntVar(&o.probeRequests, "probe-requests", 4, "requests of the registry probe through -gateway (at least 2)")
	fs.DurationVar(&o.heartbeatMaxAge, "heartbeat-max-age", time.Minute, "longest silence of an LMCache instance that sends heartbeats")
	fs.IntVar(&o.replicas, "replicas", 0, "picker replicas that should see each other over NATS (0: only check the connection)")
	fs.SetOutput(io.Discard)
	return fs
}

// parseCheck reads the check flags; its errors are one line saying what would be right.
func parseCheck(args []string, getenv func(string) string) (checkOptions, error) {
	var o checkOptions
	fs := newCheckFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, fmt.Errorf("%v (run loadaware-epp check -h for the flags)", err)
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q: every setting is a -flag (run loadaware-epp check -h)", fs.Arg(0))
	}
	o.token = getenv("LOADAWARE_ADMIN_TOKEN")
	o.engineKey = getenv("VLLM_API_KEY")
	var err error
	if o.metrics == "" {
		return o, errors.New("-metrics is required: the picker's metrics URL, e.g. -metrics http://picker:9090")
	}
	if o.metrics, err = baseURL(o.metrics); err != nil {
		return o, fmt.Errorf("-metrics: %v", err)
	}
	// The metrics page's own URL (what the picker and the demo print) names the same server.
	o.metrics = strings.TrimSuffix(o.metrics, "/metrics")
	if o.gateway != "" {
		if o.gateway, err = baseURL(o.gateway); err != nil {
			return o, fmt.Errorf("-gateway: %v", err)
		}
	}
	switch {
	case o.timeout <= 0:
		return o, fmt.Errorf("-timeout %v: use a positive duration such as 5s", o.timeout)
	case o.settle <= 0:
		return o, fmt.Errorf("-settle %v: use a positive duration such as 5s", o.settle)
	case o.probeRequests < 2:
		return o, fmt.Errorf("-probe-requests %d: use at least 2 (the first stores the prefix, the others must be credited)", o.probeRequests)
	case o.heartbeatMaxAge <= 0:
		return o, fmt.Errorf("-heartbeat-max-age %v: use a positive duration such as 1m", o.heartbeatMaxAge)
	case o.replicas < 0:
		return o, fmt.Errorf("-replicas %d: use 0 (not checked) or the number of picker replicas", o.replicas)
	}
	return o, nil
}

// baseURL checks an http(s) URL (a bare host:port gets http://) and drops a trailing slash.
func baseURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http(s) URL such as http://host:9090", s)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// check runs the check subcommand: it gathers the facts, prints the table and returns 0
// only when every check passed (1 when one did not, 2 for bad flags).
func check(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	o, err := parseCheck(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		var tmp checkOptions
		fs := newCheckFlagSet(&tmp)
		fs.SetOutput(stdout)
		fmt.Fprintln(stdout, "Usage: loadaware-epp check -metrics URL [-gateway URL] [flags]\n\nVerifies every precondition of cache-aware routing; exit status 0 only when all pass.")
		fs.PrintDefaults()
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadaware-epp check:", err)
		return 2
	}
	if o.token == "" {
		fmt.Fprintln(stderr, "loadaware-epp check: LOADAWARE_ADMIN_TOKEN is not set: the picker's /admin/state needs its --admin-token")
	}
	rows := stackcheck.Evaluate(newGatherer(o).gather(ctx))
	if err := stackcheck.Write(stdout, rows); err != nil {
		fmt.Fprintln(stderr, "loadaware-epp check:", err)
		return 1
	}
	if !stackcheck.Passed(rows) {
		return 1
	}
	return 0
}
