package app

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/loadaware/loadaware-epp/enginemetrics"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/replica"
	"github.com/prometheus/client_golang/prometheus"
)

// ReplicaConfig shares this picker's state with its other replicas over NATS (package
// replica; docs/replicas.md). Zero durations take replica's defaults.
type ReplicaConfig struct {
	URL            string // NATS server(s); required
	Subject        string // subject prefix shared by the replicas of one deployment
	Name           string // this replica in logs (default the host name)
	StateInterval  time.Duration
	PeerTimeout    time.Duration
	ScrapeInterval time.Duration // negative: no scraping of the engines
	CeilingWindow  time.Duration // how far back the scraped counts bound the peers' share
	WarmTimeout    time.Duration
	// PeerWait is the shortest wait at start to hear a peer before the replica serves
	// without one (replica.Config.PeerWait); zero means replica.DefaultPeerWait.
	PeerWait time.Duration
}

// StateFileConfig persists the LMCache index of a picker across restarts.
type StateFileConfig struct {
	Path     string
	Interval time.Duration // default 30s
}

// newGate returns the ingest hook of the LMCache controller when the index is shared or
// persisted (nil otherwise: the controller applies frames directly, as a lone picker
// always has), after loading the state file.
func (a *App) newGate(idx *lmcache.Index, reg prometheus.Registerer) (lmcache.IngestFunc, error) {
	if a.cfg.Replicas == nil && a.cfg.StateFile == nil {
		return nil, nil
	}
	g, err := replica.NewGate(idx, reg, nil)
	if err != nil {
		return nil, err
	}
	a.gate = g
	if sf := a.cfg.StateFile; sf != nil {
		n, err := replica.LoadState(sf.Path, g)
		if err != nil {
			return nil, err
		}
		a.log.Info("state file loaded", "path", sf.Path, "chunks", n, "instances", len(idx.Instances()), "keys", idx.Keys())
	}
	if a.cfg.Replicas == nil {
		g.Open()
	}
	return g.Ingest, nil
}

// startReplica joins the other replicas and starts the state file's saver.
func (a *App) startReplica(ctx context.Context, reg prometheus.Registerer) error {
	if sf := a.cfg.StateFile; sf != nil && a.gate != nil {
		iv := sf.Interval
		if iv <= 0 {
			iv = 30 * time.Second
		}
		a.wg.Go(func() { replica.RunStateFile(ctx, sf.Path, iv, a.gate, a.log) })
	}
	rc := a.cfg.Replicas
	if rc == nil {
		return nil
	}
	cfg := replica.Config{URL: rc.URL, Subject: rc.Subject, Name: rc.Name, Fleet: a.Fleet, StateInterval: rc.StateInterval,
		PeerTimeout: rc.PeerTimeout, ScrapeInterval: rc.ScrapeInterval, CeilingWindow: rc.CeilingWindow, WarmTimeout: rc.WarmTimeout, PeerWait: rc.PeerWait, Logger: a.log, Registerer: reg,
		History: a.Picker, ScrapeFollowed: a.EngineMetrics != nil && a.scrapeFollower() != nil}
	if a.gate != nil {
		cfg.Gate = a.gate
	}
	if a.kvSnapshots != nil {
		cfg.KVEvents, cfg.KVSnapshots = a.KVEventsIndex, a.kvSnapshots
	}
	r, err := replica.Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("replicas: %w", err)
	}
	a.Replica = r
	return nil
}

// scrapeFollower is the replica's reader of the engine-metrics scraper's pages, when the
// replicas scrape the engines no more often than that scraper's rounds come (then each
// engine's page is fetched once for both: decision 1191); nil otherwise. The replica
// starts before the scraper runs.
func (a *App) scrapeFollower() func(string) func(enginemetrics.Reading, error) {
	rounds := cmp.Or(a.cfg.EngineMetricsInterval, enginemetrics.DefaultInterval)
	if rc := a.cfg.Replicas; rc == nil || rc.ScrapeInterval < 0 || a.cfg.EngineMetricsInterval < 0 || rounds > a.followInterval() {
		return nil
	}
	return func(addr string) func(enginemetrics.Reading, error) { return a.Replica.FollowScrape(addr) }
}

// followInterval is how often the replica reads the engines' pages (its ScrapeInterval).
func (a *App) followInterval() time.Duration {
	if rc := a.cfg.Replicas; rc != nil && rc.ScrapeInterval > 0 {
		return rc.ScrapeInterval
	}
	return replica.DefaultScrapeInterval
}

// replicaReady is closed once the shared index is warm (at once without replicas).
func (a *App) replicaReady() <-chan struct{} {
	if a.Replica == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return a.Replica.Ready()
}
