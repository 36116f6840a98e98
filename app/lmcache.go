package app

import (
	"time"

	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/prometheus/client_golang/prometheus"
)

// LMCacheConfig configures the embedded LMCache controller.
type LMCacheConfig struct {
	PullAddr      string // PULL socket the workers push to (production stack: :9000)
	ReplyAddr     string // ROUTER for register/heartbeat requests (:9001); empty disables it
	HeartbeatAddr string // optional heartbeat ROUTER; empty disables it
	HeartbeatURL  string // host:port told to registering workers; empty: derived when possible

	Keys             lmcache.KeyConfig // how the engines hash prompts into chunk keys
	HashSeedSource   string            // where Keys.HashSeed came from, for the startup log
	Allow            lmcache.AllowMode // fleet (default) or any
	HeartbeatTimeout time.Duration     // 0: automatic; negative: never expire instances

	MaxKeys           int // chunk keys held (LRU beyond); 0: lmcache.DefaultMaxKeys; negative: no bound
	MaxInstancesPerIP int // 0: lmcache.DefaultMaxInstancesPerIP

	PeerRate  int64 // bytes/s of messages one engine IP may send; 0: lmcache.DefaultPeerRate; negative: no limit
	PeerBurst int64 // bytes above PeerRate at once; 0: lmcache.DefaultPeerBurst
	RcvHWM    int   // messages each socket queues in ZeroMQ; 0: lmcache.DefaultRcvHWM

	IngestCPU float64 // share of one CPU the pull loop may use; 0: lmcache.DefaultIngestCPU; negative: no budget

	MaxFrameBytes int64 // largest frame received; 0: lmcache.DefaultMaxFrameBytes
	MaxPeerConns  int   // connections one IP may hold to each socket; 0: lmcache.DefaultMaxPeerConns; negative: no cap
}

func (a *App) newLMCache(c LMCacheConfig, reg prometheus.Registerer) error {
	det, err := lmcache.NewMissDetector(lmcache.MissConfig{Keys: c.Keys, Logger: a.log, Registerer: reg})
	if err != nil {
		return err
	}
	a.LMCacheIndex, err = lmcache.NewIndex(lmcache.IndexConfig{Keys: c.Keys, HeartbeatTimeout: c.HeartbeatTimeout,
		Logger: a.log, Registerer: reg, Detector: det, MaxKeys: c.MaxKeys, MaxInstancesPerIP: c.MaxInstancesPerIP})
	if err != nil {
		return err
	}
	ingest, err := a.newGate(a.LMCacheIndex, reg)
	if err != nil {
		return err
	}
	ingest = a.lmcacheIngest(ingest)
	a.LMCacheServer, err = lmcache.NewServer(lmcache.ServerConfig{PullAddr: c.PullAddr, ReplyAddr: c.ReplyAddr,
		HeartbeatAddr: c.HeartbeatAddr, HeartbeatURL: c.HeartbeatURL, Allow: c.Allow, Ingest: ingest,
		PeerRate: c.PeerRate, PeerBurst: c.PeerBurst, RcvHWM: c.RcvHWM, IngestCPU: c.IngestCPU,
		MaxFrameBytes: c.MaxFrameBytes, MaxPeerConns: c.MaxPeerConns}, a.LMCacheIndex, a.log, reg)
	if err != nil {
		return err
	}
	a.log.Info("LMCache controller configured", "pull", c.PullAddr, "reply", c.ReplyAddr, "hash_seed", c.Keys.HashSeed,
		"hash_seed_from", c.HashSeedSource, "chunk_size", c.Keys.ChunkSize, "key_format", c.Keys.Format, "allow_from", c.Allow.String())
	return nil
}

// LMCachePullAddr is the bound PULL address ("" without LMCache).
func (a *App) LMCachePullAddr() string {
	if a.LMCacheServer == nil {
		return ""
	}
	return a.LMCacheServer.PullAddr()
}

// LMCacheReplyAddr is the bound reply ROUTER address ("" without it).
func (a *App) LMCacheReplyAddr() string {
	if a.LMCacheServer == nil {
		return ""
	}
	return a.LMCacheServer.ReplyAddr()
}
