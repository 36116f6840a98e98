package main

import (
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/replica"
)

// replicaFlags are the flags of several picker replicas sharing state (--nats-url) and
// of a lone picker's state file.
type replicaFlags struct {
	natsURL, subject, name      string
	stateInterval, peerTimeout  time.Duration
	scrapeInterval, warmTimeout time.Duration
	ceilingWindow               time.Duration
	stateFile                   string
	stateFileInterval           time.Duration
}

func (r *replicaFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	fs.StringVar(&r.natsURL, "nats-url", getenv("LOADAWARE_NATS_URL"), "NATS server(s) the picker's replicas share their LMCache events and bookings over, e.g. nats://nats:4222 (env LOADAWARE_NATS_URL); empty: a lone picker")
	fs.StringVar(&r.subject, "nats-subject", replica.DefaultSubject, "subject prefix of this deployment's replicas (different deployments on one NATS server use different ones)")
	fs.StringVar(&r.name, "replica-name", getenv("POD_NAME"), "this replica's name in logs and NATS (default: env POD_NAME, else the host name)")
	fs.DurationVar(&r.stateInterval, "replica-state-interval", replica.DefaultStateInterval, "how often each replica publishes its absolute in-flight counts (heals lost deltas)")
	fs.DurationVar(&r.peerTimeout, "replica-peer-timeout", replica.DefaultPeerTimeout, "a replica silent this long is dropped from the load view, with its bookings")
	fs.DurationVar(&r.scrapeInterval, "load-scrape-interval", replica.DefaultScrapeInterval, "with --nats-url: how often the engines' vllm:num_requests_running/_waiting are read (the load view's ground truth); 0 disables")
	fs.DurationVar(&r.ceilingWindow, "load-ceiling-window", replica.DefaultCeilingWindow, "with --nats-url: the peers' share of an engine's load may not exceed its largest scraped count over this window plus the bookings since; longer than the engines' own lag (a step, the API server's streaming)")
	fs.DurationVar(&r.warmTimeout, "warm-timeout", replica.DefaultWarmTimeout, "with --nats-url: longest wait at start for a peer's index before turning ready with an empty one")
	fs.StringVar(&r.stateFile, "state-file", "", "file the LMCache index is saved to on an interval and loaded from at start (a lone picker's warm restart)")
	fs.DurationVar(&r.stateFileInterval, "state-file-interval", 30*time.Second, "how often --state-file is written")
}

// config checks the flags; lmcache says whether the LMCache controller runs.
func (r *replicaFlags) config(lmcache bool) (*app.ReplicaConfig, *app.StateFileConfig, error) {
	var rc *app.ReplicaConfig
	if r.natsURL != "" {
		for _, u := range strings.Split(r.natsURL, ",") {
			p, err := url.Parse(strings.TrimSpace(u))
			if err != nil || p.Host == "" || (p.Scheme != "nats" && p.Scheme != "tls" && p.Scheme != "ws" && p.Scheme != "wss") {
				return nil, nil, fmt.Errorf("--nats-url %q: give nats://host:port (or tls://, ws://), comma-separated for several servers", u)
			}
		}
		if r.subject == "" || strings.ContainsAny(r.subject, " *>\t") || strings.HasPrefix(r.subject, ".") || strings.HasSuffix(r.subject, ".") {
			return nil, nil, fmt.Errorf("--nats-subject %q: use a NATS subject such as loadaware or team.loadaware (no spaces, wildcards or outer dots)", r.subject)
		}
		for _, d := range []struct {
			name string
			v    time.Duration
		}{{"replica-state-interval", r.stateInterval}, {"replica-peer-timeout", r.peerTimeout}, {"warm-timeout", r.warmTimeout}, {"load-ceiling-window", r.ceilingWindow}} {
			if d.v <= 0 {
				return nil, nil, fmt.Errorf("--%s %v: use a positive duration", d.name, d.v)
			}
		}
		if r.peerTimeout <= r.stateInterval {
			return nil, nil, fmt.Errorf("--replica-peer-timeout %v must be longer than --replica-state-interval %v (3 intervals or more)", r.peerTimeout, r.stateInterval)
		}
		if r.scrapeInterval < 0 {
			return nil, nil, fmt.Errorf("--load-scrape-interval %v: use a positive duration, or 0 to disable scraping", r.scrapeInterval)
		}
		scrape := r.scrapeInterval
		if scrape == 0 {
			scrape = -1
		}
		rc = &app.ReplicaConfig{URL: r.natsURL, Subject: r.subject, Name: r.name, StateInterval: r.stateInterval,
			PeerTimeout: r.peerTimeout, ScrapeInterval: scrape, CeilingWindow: r.ceilingWindow, WarmTimeout: r.warmTimeout}
	}
	var sf *app.StateFileConfig
	if r.stateFile != "" {
		if !lmcache {
			return nil, nil, fmt.Errorf("--state-file needs the LMCache controller (--lmcache-pull-port, --cache-source lmcache or both): it saves the LMCache index")
		}
		if r.stateFileInterval <= 0 {
			return nil, nil, fmt.Errorf("--state-file-interval %v: use a positive duration such as 30s", r.stateFileInterval)
		}
		if st, err := os.Stat(filepath.Dir(r.stateFile)); err != nil || !st.IsDir() {
			return nil, nil, fmt.Errorf("--state-file %s: its directory does not exist (create it, or mount a volume there)", r.stateFile)
		}
		sf = &app.StateFileConfig{Path: r.stateFile, Interval: r.stateFileInterval}
	}
	return rc, sf, nil
}
