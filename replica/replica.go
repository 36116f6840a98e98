package replica

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/fleet"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Config.
const (
	DefaultSubject        = "loadaware"
	DefaultStateInterval  = 200 * time.Millisecond
	DefaultPeerTimeout    = 750 * time.Millisecond
	DefaultScrapeInterval = 250 * time.Millisecond
	DefaultCeilingWindow  = 2 * time.Second
	DefaultWarmTimeout    = 5 * time.Second
	DefaultPeerWait       = 500 * time.Millisecond
	snapshotChunkBytes    = 512 << 10 // under NATS's default 1 MiB max_payload
)

// Config configures a Replica. The zero value of a field means its default.
type Config struct {
	// URL is the NATS server (nats://host:4222, or a comma-separated list). Required.
	URL string
	// Subject prefixes every subject the replicas use; replicas of one picker deployment
	// share it, and different deployments on one NATS server use different ones.
	Subject string
	// Name is this replica in logs and in NATS's connection list; default the host name.
	Name string
	// Gate, when set, shares the LMCache index: frames the controller applied are
	// published, the peers' frames applied, and a starting replica warmed from a peer.
	// nil shares the bookings only.
	Gate *Gate
	// Fleet is the endpoint set whose bookings are shared. Required.
	Fleet *fleet.Set
	// StateInterval is how often this replica publishes its absolute in-flight counts.
	StateInterval time.Duration
	// PeerTimeout drops a peer (and its bookings) from the load view after this long
	// without a message from it; it must be longer than StateInterval.
	PeerTimeout time.Duration
	// ScrapeInterval is how often the engines' /metrics are read (the load view's ground
	// truth); negative disables scraping.
	ScrapeInterval time.Duration
	// ScrapeFollowed says that another scraper fetches the engines' pages every
	// ScrapeInterval and tells the replica of each fetch (FollowScrape: the picker's
	// enginemetrics.Scraper, so that each page is fetched once for both); the replica then
	// fetches none itself.
	ScrapeFollowed bool
	// CeilingWindow is how far back the scraped counts bound the peers' share of an
	// endpoint's load: the largest count over the window plus every booking since its
	// start. It must outlast an engine's own lag behind the bookings (its gauges move
	// once per step; its API server streams a finished request's last tokens after the
	// engine stopped counting it), or real bookings are cut; a booking a live peer leaked
	// is cut after it. Default DefaultCeilingWindow.
	CeilingWindow time.Duration
	// WarmTimeout bounds the warm start: connecting, finding a peer and taking its snapshot.
	WarmTimeout time.Duration
	// PeerWait is the shortest wait at start to hear a peer (a loaded peer may take a while
	// to answer the hello); default DefaultPeerWait.
	PeerWait time.Duration
	// KVEvents, when set, is this picker's vLLM KV events index: its streams are served
	// to starting peers, and KVSnapshots takes the peers' into it.
	KVEvents *kvindex.Index
	// KVSnapshots, when set (with KVEvents), is bound to this replica: the KV events
	// subscriber's Snapshotter, asking the peers for each stream.
	KVSnapshots *KVSnapshots
	// History, when set, is told of every booking a peer makes (its endpoint and tag), so
	// that routing history (the QPS fallback's request counts, latencyaware's last route of
	// a prefix) covers every replica's requests, not only this one's.
	History History
	// Client scrapes the engines; nil: a client with keep-alive.
	Client *http.Client
	Logger *slog.Logger
	// Registerer receives the metrics when Gate is nil (else the gate's registry has them).
	Registerer prometheus.Registerer
	Now        func() time.Time
}

// History receives the peers' bookings (picker.Picker is one). PeerBooked is called on
// the NATS delivery goroutine, once per booking, in each peer's order; it must not block.
type History interface {
	PeerBooked(addr string, tag uint64)
}

// Replica is one picker's membership in a group of replicas. Start it with Start; Close
// stops it. It is safe for concurrent use.
type Replica struct {
	cfg    Config
	log    *slog.Logger
	met    *metrics
	nc     *nats.Conn
	sub    *nats.Subscription
	origin uint64
	load   *loadView
	client *http.Client
	now    func() time.Time

	pubMu    sync.Mutex // guards loadSeq and outbox
	loadSeq  uint64
	outbox   []byte        // encoded load messages not yet published, each length-prefixed
	wake     chan struct{} // signals the publisher that outbox has messages
	frameSeq uint64        // guarded by the gate's lock

	applied map[uint64]uint64 // frames Seq applied per origin; guarded by the gate's lock

	warmMu    sync.Mutex
	warming   bool
	buffered  []Message     // peers' frames received while warming
	firstPeer chan struct{} // closed when a peer's state arrives while warming
	peerOnce  sync.Once
	// peersHeard is closed once the warm start has heard its peers, or given up: the
	// load view then names the peers to ask for KV events streams.
	peersHeard chan struct{}
	heardOnce  sync.Once
	ready      chan struct{}

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start connects to NATS (retrying in the background when it is unreachable), starts
// publishing this picker's bookings and, with a Gate, its LMCache frames, and warms the
// index from a peer. Ready is closed once the index is warm; the Gate opens then too.
func Start(ctx context.Context, cfg Config) (*Replica, error) {
	if strings.TrimSpace(cfg.URL) == "" {
		return nil, errors.New("replica: no NATS URL: pass --nats-url nats://host:4222")
	}
	if cfg.Fleet == nil {
		return nil, errors.New("replica: Config.Fleet is nil")
	}
	if cfg.KVSnapshots != nil && cfg.KVEvents == nil {
		return nil, errors.New("replica: Config.KVSnapshots without the KVEvents index to take the streams into")
	}
	setDefaults(&cfg)
	if cfg.PeerTimeout <= cfg.StateInterval {
		return nil, fmt.Errorf("replica: peer timeout %s must be longer than the state interval %s (--replica-peer-timeout, --replica-state-interval)", cfg.PeerTimeout, cfg.StateInterval)
	}
	r := &Replica{cfg: cfg, log: cfg.Logger, now: cfg.Now, origin: newOrigin(), applied: map[uint64]uint64{},
		client: cfg.Client, ready: make(chan struct{}), firstPeer: make(chan struct{}), peersHeard: make(chan struct{}), warming: true, wake: make(chan struct{}, 1)}
	if cfg.Gate != nil {
		r.met = cfg.Gate.met
	} else {
		var err error
		if r.met, err = newMetrics(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	r.load = newLoadView(cfg.Fleet, r.met, cfg.PeerTimeout, ceilingScrapes(cfg.CeilingWindow, cfg.ScrapeInterval))
	nc, err := nats.Connect(cfg.URL, nats.Name("loadaware-epp "+cfg.Name), nats.NoEcho(),
		nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.ConnectHandler(func(*nats.Conn) { r.connected(true) }),
		nats.ReconnectHandler(func(*nats.Conn) { r.connected(true) }),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { r.connected(false) }))
	if err != nil {
		return nil, fmt.Errorf("replica: --nats-url %s: %w", cfg.URL, err)
	}
	r.nc = nc
	if nc.IsConnected() {
		r.connected(true)
	} else {
		r.connected(false)
	}
	if r.sub, err = nc.Subscribe(cfg.Subject+".>", r.handle); err != nil {
		nc.Close()
		return nil, fmt.Errorf("replica: subscribe to %s.>: %w", cfg.Subject, err)
	}
	_ = r.sub.SetPendingLimits(1<<20, 256<<20)
	if cfg.Gate != nil {
		cfg.Gate.mu.Lock()
		cfg.Gate.after = r.publishFrames
		cfg.Gate.mu.Unlock()
	}
	cfg.Fleet.SetListener(r)
	if k := cfg.KVSnapshots; k != nil {
		k.r = r
		close(k.bound)
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.wg.Go(func() { r.tick(ctx) })
	r.wg.Go(func() { r.publisher(ctx) })
	if cfg.ScrapeInterval > 0 && !cfg.ScrapeFollowed {
		r.wg.Go(func() { r.scrapeLoop(ctx) })
	}
	r.wg.Go(func() { r.warmStart(ctx) })
	r.log.Info("replica: sharing state over NATS", "url", cfg.URL, "subject", cfg.Subject, "name", cfg.Name,
		"origin", strconv.FormatUint(r.origin, 16), "lmcache", cfg.Gate != nil, "scrape_interval", cfg.ScrapeInterval.String(), "scrape_followed", cfg.ScrapeFollowed)
	return r, nil
}

func setDefaults(c *Config) {
	if c.Subject == "" {
		c.Subject = DefaultSubject
	}
	if c.Name == "" {
		c.Name, _ = os.Hostname()
	}
	if c.StateInterval <= 0 {
		c.StateInterval = DefaultStateInterval
	}
	if c.PeerTimeout <= 0 {
		c.PeerTimeout = DefaultPeerTimeout
	}
	if c.ScrapeInterval == 0 {
		c.ScrapeInterval = DefaultScrapeInterval
	}
	if c.CeilingWindow <= 0 {
		c.CeilingWindow = DefaultCeilingWindow
	}
	if c.WarmTimeout <= 0 {
		c.WarmTimeout = DefaultWarmTimeout
	}
	if c.PeerWait <= 0 {
		c.PeerWait = DefaultPeerWait
	}
	if c.Client == nil {
		c.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

func newOrigin() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1 // never 0
}

// Ready is closed once the index is warm (a peer's snapshot applied, or no peer answered).
func (r *Replica) Ready() <-chan struct{} { return r.ready }

// Origin is this replica's id on the wire (new at every start).
func (r *Replica) Origin() uint64 { return r.origin }

// Published returns the sequence numbers of the last load message (booking delta or
// state) and the last LMCache frames message this replica has queued for its peers.
func (r *Replica) Published() (load, frames uint64) {
	r.pubMu.Lock()
	load = r.loadSeq
	r.pubMu.Unlock()
	if g := r.cfg.Gate; g != nil {
		g.mu.Lock()
		frames = r.frameSeq
		g.mu.Unlock()
	}
	return load, frames
}

// Heard returns the sequence numbers of the last load and frames messages this replica
// has applied from the peer with the given origin (0 for what it has not heard). A peer
// whose Published numbers are at most these has had everything it sent applied here.
func (r *Replica) Heard(origin uint64) (load, frames uint64) {
	r.load.mu.Lock()
	if p := r.load.peers[origin]; p != nil {
		load = p.seq
	}
	r.load.mu.Unlock()
	if g := r.cfg.Gate; g != nil {
		g.mu.Lock()
		frames = r.applied[origin]
		g.mu.Unlock()
	}
	return load, frames
}

// Forget drops what the load view knows of endpoints not in keep.
func (r *Replica) Forget(keep []string) { r.load.forget(keep) }

// Close stops publishing and leaves NATS; the peers drop this replica's bookings after
// their peer timeout.
func (r *Replica) Close() error {
	r.cancel()
	r.wg.Wait()
	r.cfg.Fleet.SetListener(nil)
	if g := r.cfg.Gate; g != nil {
		g.mu.Lock()
		g.after = nil
		g.mu.Unlock()
	}
	r.nc.Close()
	return nil
}

func (r *Replica) connected(up bool) {
	if up {
		r.met.connected.Set(1)
	} else {
		r.met.connected.Set(0)
	}
	r.load.setFallback(!up)
}

func (r *Replica) subject(s string) string { return r.cfg.Subject + "." + s }

// publish sends b on subject, counted under kind.
func (r *Replica) publish(subject, kind string, b []byte) {
	if err := r.nc.Publish(subject, b); err != nil {
		r.log.Debug("replica: publish failed", "subject", subject, "err", err)
		return
	}
	r.met.sent.WithLabelValues(kind).Inc()
	r.met.sentBytes.WithLabelValues(kind).Add(float64(len(b)))
}

// publishFrames hands frames the controller applied to the peers; the gate calls it
// with its lock held, so the sequence follows the order of application.
func (r *Replica) publishFrames(peer string, frames [][]byte) {
	r.frameSeq++
	r.publish(r.subject("frames"), "frames", AppendEncode(nil, Message{Kind: KindFrames, Origin: r.origin, Seq: r.frameSeq, Peer: peer, Frames: frames}))
}

// publishLoad numbers m and queues it for the publisher: a booking on the decision path
// costs an encoding and an append, never a wait on NATS.
func (r *Replica) publishLoad(m Message) {
	r.pubMu.Lock()
	if m.Kind == KindState {
		// Read under the lock: every booking whose delta is queued before the state is in it.
		m.Loads = r.load.local()
	}
	r.loadSeq++
	m.Origin, m.Seq = r.origin, r.loadSeq
	start := len(r.outbox)
	r.outbox = append(r.outbox, 0, 0, 0, 0)
	r.outbox = AppendEncode(r.outbox, m)
	n := len(r.outbox) - start - 4
	r.outbox[start], r.outbox[start+1], r.outbox[start+2], r.outbox[start+3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	r.pubMu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// publisher publishes the queued load messages in order until ctx ends.
func (r *Replica) publisher(ctx context.Context) {
	var batch []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		}
		r.pubMu.Lock()
		batch, r.outbox = r.outbox, batch[:0]
		r.pubMu.Unlock()
		for rest := batch; len(rest) >= 4; {
			n := int(rest[0]) | int(rest[1])<<8 | int(rest[2])<<16 | int(rest[3])<<24
			m := rest[4 : 4+n]
			kind := "delta"
			if Kind(m[1]) == KindState {
				kind = "state"
			}
			r.publish(r.subject("load"), kind, m) // nats.go copies m into its buffer
			rest = rest[4+n:]
		}
	}
}

// Booked implements fleet.Listener; the tag travels with the delta to the peers' History.
func (r *Replica) Booked(addr string, tag uint64) {
	r.load.booked(addr)
	r.publishLoad(Message{Kind: KindDelta, Addr: addr, Op: OpBook, Tag: tag})
}

// Decoding implements fleet.Listener.
func (r *Replica) Decoding(addr string) {
	r.publishLoad(Message{Kind: KindDelta, Addr: addr, Op: OpDecoding})
}

// Released implements fleet.Listener.
func (r *Replica) Released(addr string, decoding bool) {
	op := OpReleasePrefill
	if decoding {
		op = OpReleaseDecode
	}
	r.publishLoad(Message{Kind: KindDelta, Addr: addr, Op: op})
}

// tick publishes this replica's state every state interval and expires silent peers
// every eighth of the peer timeout (so a dead peer's bookings go at most an eighth late).
func (r *Replica) tick(ctx context.Context) {
	t := time.NewTicker(r.cfg.StateInterval)
	defer t.Stop()
	e := time.NewTicker(max(r.cfg.PeerTimeout/8, 10*time.Millisecond))
	defer e.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.publishLoad(Message{Kind: KindState})
		case <-e.C:
			r.load.expire(r.now())
		}
	}
}

func (r *Replica) scrapeLoop(ctx context.Context) {
	t := time.NewTicker(r.cfg.ScrapeInterval)
	defer t.Stop()
	for {
		r.scrapeAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// handle takes one message of the shared subjects, on the subscription's goroutine: the
// messages of one origin arrive, and are applied, in the order it published them.
func (r *Replica) handle(msg *nats.Msg) {
	rest := strings.TrimPrefix(msg.Subject, r.cfg.Subject+".")
	if rest == "hello" { // a replica is starting: let it hear this one at once
		r.publishLoad(Message{Kind: KindState})
		return
	}
	if target, ok := strings.CutPrefix(rest, "kvsnap."); ok {
		if target == strconv.FormatUint(r.origin, 16) && msg.Reply != "" {
			r.wg.Go(func() { r.serveKVStream(msg) })
		}
		return
	}
	if target, ok := strings.CutPrefix(rest, "snapshot."); ok {
		if target == strconv.FormatUint(r.origin, 16) && msg.Reply != "" {
			r.serveSnapshot(msg.Reply)
		}
		return
	}
	r.met.receivedBytes.Add(float64(len(msg.Data)))
	m, err := Decode(msg.Data)
	if err != nil {
		r.met.received.WithLabelValues("unknown", outInvalid).Inc()
		r.log.Debug("replica: dropped a peer message", "subject", msg.Subject, "err", err)
		return
	}
	if m.Origin == r.origin {
		return
	}
	switch {
	case rest == "frames" && m.Kind == KindFrames:
		if r.cfg.Gate == nil {
			return
		}
		r.warmMu.Lock()
		if r.warming {
			r.buffered = append(r.buffered, m)
			r.warmMu.Unlock()
			return
		}
		r.warmMu.Unlock()
		g := r.cfg.Gate
		g.mu.Lock()
		out := r.applyFramesLocked(m)
		g.mu.Unlock()
		r.met.received.WithLabelValues(m.Kind.String(), out).Inc()
	case rest == "load" && (m.Kind == KindDelta || m.Kind == KindState):
		out := r.load.apply(m, r.now())
		r.met.received.WithLabelValues(m.Kind.String(), out).Inc()
		if h := r.cfg.History; h != nil && m.Kind == KindDelta && m.Op == OpBook && out != outStale {
			h.PeerBooked(m.Addr, m.Tag)
		}
		if m.Kind == KindState {
			r.peerOnce.Do(func() { close(r.firstPeer) })
		}
	default:
		r.met.received.WithLabelValues(m.Kind.String(), outOther).Inc()
	}
}

// applyFramesLocked applies one origin's frames message in sequence, with the gate's
// lock held, and returns its outcome.
func (r *Replica) applyFramesLocked(m Message) string {
	last, seen := r.applied[m.Origin]
	if seen && m.Seq <= last {
		return outStale
	}
	out := outApplied
	if seen && m.Seq != last+1 {
		out = outGap
	}
	r.cfg.Gate.applyFramesLocked(m.Peer, m.Frames)
	r.applied[m.Origin] = m.Seq
	return out
}
