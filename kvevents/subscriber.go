package kvevents

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/zmqwait"
	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus"
)

// SubscriberConfig configures a Subscriber.
type SubscriberConfig struct {
	// Port is the engines' KV events PUB port (vLLM --kv-events-config endpoint); 0 means 5557.
	Port int
	// ReplayPort is the engines' replay ROUTER port (replay_endpoint); 0: the engines offer
	// no replay, and a lost batch drops the endpoint's entries.
	ReplayPort int
	// Topic filters batches by topic prefix (vLLM's topic, default empty: all).
	Topic string
	// Ranks is the engines' data-parallel size: rank r publishes on Port+r (and replays on
	// ReplayPort+r), as vLLM's offset_endpoint_port does; each rank is a stream of its own
	// and the endpoint is credited with its best rank. 0 means 1.
	Ranks int
	// ReplayTimeout bounds one replay, end marker included; 0 means 2 s.
	ReplayTimeout time.Duration
	// PollInterval is how often an endpoint's loop, while no message arrives, checks for
	// being stopped and for a lost connection; 0 means 100 ms.
	PollInterval time.Duration
	// MaxFrameBytes bounds one received frame; 0 means 64 MiB.
	MaxFrameBytes int64
	// Snapshots, when set, rebuilds a stream from the engine's snapshot (start,
	// reconnect, restart) before falling back to replay; nil: replay only.
	Snapshots Snapshotter
	// OnBatch, when set, is called from the endpoint's loop after each received batch
	// (live or replayed, applied or not) has been handled. It must not block.
	OnBatch    func(endpoint string, seq int64)
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Subscriber keeps an Index current from the engines' KV event streams: one SUB socket
// per endpoint (its IP, Port), connected and closed as SetEndpoints changes the set. A
// gap in the sequence is repaired by replay when ReplayPort is set; otherwise, or when
// replay cannot repair it, the endpoint's entries are dropped (it is credited with
// nothing until new events arrive): the index never credits a block an engine may have
// evicted. An engine restart (sequence going back) drops its entries the same way.
type Subscriber struct {
	cfg  SubscriberConfig
	idx  *kvindex.Index
	log  *slog.Logger
	m    *subMetrics
	zctx *zmq.Context

	mu      sync.Mutex
	subs    map[string]*follower // by follower key
	pending map[string]bool      // followers of the first set whose first sync has not finished
	ready   chan struct{}
	setOnce bool
	closed  bool
	wg      sync.WaitGroup
}

// follower is one endpoint rank's stream.
type follower struct {
	endpoint string
	rank     int
	key      string // endpoint#rank
	stop     chan struct{}
}

// NewSubscriber prepares a subscriber feeding idx.
func NewSubscriber(cfg SubscriberConfig, idx *kvindex.Index) (*Subscriber, error) {
	if idx == nil {
		return nil, errors.New("kvevents: NewSubscriber needs an Index")
	}
	if cfg.Port == 0 {
		cfg.Port = 5557
	}
	if cfg.Port < 0 || cfg.Port > 65535 || cfg.ReplayPort < 0 || cfg.ReplayPort > 65535 {
		return nil, fmt.Errorf("kvevents: ports %d/%d: use 1-65535 (replay 0 = none)", cfg.Port, cfg.ReplayPort)
	}
	if cfg.Ranks <= 0 {
		cfg.Ranks = 1
	}
	if cfg.Port+cfg.Ranks-1 > 65535 || (cfg.ReplayPort != 0 && cfg.ReplayPort+cfg.Ranks-1 > 65535) {
		return nil, fmt.Errorf("kvevents: %d ranks from ports %d/%d run past 65535: lower the data-parallel size or the ports", cfg.Ranks, cfg.Port, cfg.ReplayPort)
	}
	if cfg.ReplayTimeout <= 0 {
		cfg.ReplayTimeout = 2 * time.Second
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 100 * time.Millisecond
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = 64 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := newSubMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	zctx, err := zmq.NewContext()
	if err != nil {
		return nil, fmt.Errorf("kvevents: zeromq context: %w", err)
	}
	return &Subscriber{cfg: cfg, idx: idx, log: cfg.Logger, m: m, zctx: zctx,
		subs: map[string]*follower{}, pending: map[string]bool{}, ready: make(chan struct{})}, nil
}

// Ready is closed once every endpoint of the first SetEndpoints has finished its first
// sync: its replay applied (or failed, or no replay configured) and its socket connected.
func (s *Subscriber) Ready() <-chan struct{} { return s.ready }

// SetEndpoints follows exactly the endpoints given ("ip:port" of their HTTP servers; the
// events are read from ip:Port). Endpoints that left are unsubscribed and their entries
// dropped.
func (s *Subscriber) SetEndpoints(endpoints []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	keep := make(map[string]bool, len(endpoints))
	for _, ep := range endpoints {
		keep[ep] = true
		host, _, err := net.SplitHostPort(ep)
		if err != nil {
			s.log.Error("kvevents: endpoint is not ip:port; its KV events are not followed", "endpoint", ep, "err", err)
			continue
		}
		for r := range s.cfg.Ranks {
			key := ep + "#" + strconv.Itoa(r)
			if s.subs[key] != nil {
				continue
			}
			f := &follower{endpoint: ep, rank: r, key: key, stop: make(chan struct{})}
			s.subs[key] = f
			if !s.setOnce {
				s.pending[key] = true
			}
			s.wg.Go(func() { s.follow(f, host) })
		}
	}
	for key, f := range s.subs {
		if !keep[f.endpoint] {
			close(f.stop)
			delete(s.subs, key)
			delete(s.pending, key)
		}
	}
	s.setOnce = true
	s.m.subscriptions.Set(float64(len(s.subs)))
	s.checkReady()
}

func (s *Subscriber) synced(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.pending, key)
	s.checkReady()
}

// checkReady closes ready when nothing is pending. s.mu is held.
func (s *Subscriber) checkReady() {
	if s.setOnce && len(s.pending) == 0 {
		select {
		case <-s.ready:
		default:
			close(s.ready)
		}
	}
}

// Close stops every endpoint's loop and closes the sockets. It is idempotent.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for ep, f := range s.subs {
		close(f.stop)
		delete(s.subs, ep)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return s.zctx.Term()
}

// conn is one endpoint's sockets, owned by its follow goroutine. The goroutine waits for
// messages on the sockets' zmqwait.Waiters, never in a blocking receive or zmq.Poller
// (cgo calls that keep the goroutine's P each time they start waiting, stalling a one-CPU
// process for up to 20 ms: see package zmqwait).
type conn struct {
	s          *Subscriber
	f          *follower
	sub        *zmq.Socket
	subWait    *zmqwait.Waiter
	mon        *zmq.Socket // the SUB socket's disconnect events
	dealer     *zmq.Socket // nil without replay
	dealerWait *zmqwait.Waiter
	replayAddr string
	host       string
	epoch      string // the publisher lifetime id of the last snapshot applied
	t          tracker
	resync     bool // reconnected: replay from 0 before the next live batch
}

// monitors numbers the inproc addresses of the SUB sockets' monitors.
var monitors atomic.Int64

func (s *Subscriber) follow(f *follower, host string) {
	defer s.idx.DropRank(f.endpoint, f.rank, "left")
	c := &conn{s: s, f: f, host: host, t: newTracker()}
	defer c.close()
	first := true
	defer func() {
		if first {
			s.synced(f.key)
		}
	}()
	if err := c.open(host); err != nil {
		s.m.connectErrors.Inc()
		s.log.Error("kvevents: cannot subscribe to an endpoint's KV events; it gets no cache credit", "endpoint", f.endpoint, "rank", f.rank, "err", err)
		return
	}
	if !c.bootstrap("initial") && c.dealer != nil {
		c.replay(0, "initial")
	}
	first = false
	s.synced(f.key)
	for {
		select {
		case <-f.stop:
			return
		default:
		}
		// The monitor before each message: a disconnect is handled before what came after it.
		if ev, _, _, err := c.mon.RecvEvent(zmq.DONTWAIT); err == nil && ev == zmq.EVENT_DISCONNECTED {
			c.disconnected()
		}
		frames, err := c.sub.RecvMessageBytes(zmq.DONTWAIT)
		if err == nil {
			c.live(frames)
			continue // the next queued message, without waiting
		}
		if isTerm(err) {
			return
		}
		// Nothing queued: wait for a message, at most PollInterval, so that stop and the
		// monitor are still checked that often.
		if err := c.subWait.Wait(time.Now().Add(s.cfg.PollInterval)); err != nil && (isTerm(err) || errors.Is(err, zmqwait.ErrClosed)) {
			return
		}
	}
}

func (c *conn) open(host string) error {
	s := c.s
	var err error
	if c.sub, err = s.zctx.NewSocket(zmq.SUB); err != nil {
		return err
	}
	for _, set := range []func() error{
		func() error { return c.sub.SetLinger(0) },
		func() error { return c.sub.SetRcvhwm(100000) },
		func() error { return c.sub.SetMaxmsgsize(s.cfg.MaxFrameBytes) },
		func() error { return c.sub.SetSubscribe(s.cfg.Topic) },
	} {
		if err := set(); err != nil {
			return err
		}
	}
	if c.subWait, err = zmqwait.New(c.sub); err != nil {
		return fmt.Errorf("wait on the SUB socket: %w", err)
	}
	mon := "inproc://kvevents-monitor-" + strconv.FormatInt(monitors.Add(1), 10)
	if err := c.sub.Monitor(mon, zmq.EVENT_DISCONNECTED); err != nil {
		return fmt.Errorf("monitor the SUB socket: %w", err)
	}
	if c.mon, err = s.zctx.NewSocket(zmq.PAIR); err != nil {
		return err
	}
	if err := c.mon.SetLinger(0); err != nil {
		return err
	}
	if err := c.mon.Connect(mon); err != nil {
		return fmt.Errorf("connect the SUB socket's monitor: %w", err)
	}
	addr := "tcp://" + net.JoinHostPort(host, strconv.Itoa(s.cfg.Port+c.f.rank))
	if err := c.sub.Connect(addr); err != nil {
		return fmt.Errorf("connect %s: %w", addr, err)
	}
	if s.cfg.ReplayPort != 0 {
		c.replayAddr = "tcp://" + net.JoinHostPort(host, strconv.Itoa(s.cfg.ReplayPort+c.f.rank))
		return c.openDealer()
	}
	return nil
}

// openDealer opens the replay socket and its waiter. On an error it leaves neither open
// (c.dealer nil: no replay).
func (c *conn) openDealer() (err error) {
	so, err := c.s.zctx.NewSocket(zmq.DEALER)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			so.Close()
		}
	}()
	if err := so.SetLinger(0); err != nil {
		return err
	}
	if err := so.SetMaxmsgsize(c.s.cfg.MaxFrameBytes); err != nil {
		return err
	}
	if err := so.Connect(c.replayAddr); err != nil {
		return fmt.Errorf("connect %s: %w", c.replayAddr, err)
	}
	w, err := zmqwait.New(so)
	if err != nil {
		return fmt.Errorf("wait on the replay socket: %w", err)
	}
	c.dealer, c.dealerWait = so, w
	return nil
}

// closeDealer closes the replay socket and its waiter, if open.
func (c *conn) closeDealer() {
	if c.dealerWait != nil {
		c.dealerWait.Close()
	}
	if c.dealer != nil {
		c.dealer.Close()
	}
	c.dealer, c.dealerWait = nil, nil
}

func (c *conn) close() {
	if c.sub != nil && c.mon != nil {
		_ = c.sub.Monitor("", 0) // stop the monitor before its socket goes
	}
	if c.subWait != nil {
		c.subWait.Close()
	}
	c.closeDealer()
	for _, so := range []*zmq.Socket{c.mon, c.sub} {
		if so != nil {
			so.Close()
		}
	}
}

// live handles one message from the SUB socket.
func (c *conn) live(frames [][]byte) {
	s, ep := c.s, c.f.endpoint
	msg, err := SplitLive(frames)
	if s.cfg.OnBatch != nil {
		defer func() { s.cfg.OnBatch(ep, msg.Seq) }()
	}
	if err != nil {
		s.m.batches.WithLabelValues("bad_frames").Inc()
		s.log.Warn("kvevents: skipped a message that is not [topic, seq, payload]", "endpoint", ep, "err", err)
		return
	}
	if c.resync {
		c.resync = false
		if !c.bootstrap("reconnect") && c.dealer != nil {
			c.replay(0, "reconnect")
		}
	}
	switch c.t.classifyLive(msg.Seq) {
	case vDuplicate:
		s.m.batches.WithLabelValues("duplicate").Inc()
		return
	case vFirst, vNext:
		c.apply(msg)
		return
	case vReset:
		s.m.sequence.WithLabelValues("reset").Inc()
		s.idx.DropRank(ep, c.f.rank, "reset")
		c.t.applied = -1
		s.log.Info("kvevents: an engine's event sequence went back (it restarted): its entries were dropped", "endpoint", ep, "seq", msg.Seq)
		if msg.Seq > 0 && !c.bootstrap("reset") && c.dealer != nil {
			c.replay(0, "reset")
		}
	case vGap:
		s.m.sequence.WithLabelValues("gap").Inc()
		from := c.t.applied + 1
		if c.dealer == nil || !c.replay(from, "gap") {
			c.failClosed("gap", fmt.Sprintf("batches %d to %d were lost", from, msg.Seq-1))
			c.apply(msg)
			return
		}
	}
	// After a replay: apply the message unless the replay did.
	switch {
	case msg.Seq <= c.t.applied:
		s.m.batches.WithLabelValues("duplicate").Inc()
	case c.t.applied >= 0 && msg.Seq != c.t.applied+1:
		c.failClosed("gap", fmt.Sprintf("replay ended at batch %d, before batch %d", c.t.applied, msg.Seq))
		c.apply(msg)
	default:
		c.apply(msg)
	}
}

// disconnected handles the loss of the connection to the engine's PUB socket. Whatever
// happened meanwhile is unknown (the engine may have restarted and published past the
// last sequence number seen), so its entries are dropped at once and the stream starts
// again: from a full replay when the engine offers one, else from the next batch.
func (c *conn) disconnected() {
	s := c.s
	s.m.sequence.WithLabelValues("disconnect").Inc()
	s.idx.DropRank(c.f.endpoint, c.f.rank, "disconnect")
	c.t = newTracker()
	c.resync = c.dealer != nil || s.cfg.Snapshots != nil
	s.log.Info("kvevents: lost the connection to an engine's KV events: its entries were dropped until it is back", "endpoint", c.f.endpoint)
}

// apply decodes and applies one batch in sequence.
func (c *conn) apply(msg Message) {
	s, ep := c.s, c.f.endpoint
	c.t.applied = msg.Seq
	b, err := Decode(msg.Payload)
	if err != nil {
		var de *DecodeError
		kind := ErrKindMalformed
		if errors.As(err, &de) {
			kind = de.Kind
		}
		s.m.batches.WithLabelValues("bad_payload_" + kind).Inc()
		// The batch's changes are unknown: the endpoint's entries cannot be trusted.
		c.failClosed("bad_batch", err.Error())
		return
	}
	s.m.skipped.Add(float64(b.Skipped))
	b.DPRank, b.Seq = c.f.rank, msg.Seq // the socket names the stream
	s.idx.Apply(ep, b)
	s.m.batches.WithLabelValues("applied").Inc()
}

func (c *conn) failClosed(reason, why string) {
	s := c.s
	s.idx.DropRank(c.f.endpoint, c.f.rank, reason)
	s.m.endpointDrops.WithLabelValues(reason).Inc()
	hint := "enable vLLM's replay socket (replay_endpoint in --kv-events-config) and pass --kv-events-replay-port"
	if c.dealer != nil {
		hint = "replay could not fill the gap (raise vLLM's buffer_steps, or check the replay port)"
	}
	s.log.Warn("kvevents: an endpoint's KV event stream lost information, so its cache entries were dropped and it gets no cache credit until new events arrive; "+hint,
		"endpoint", c.f.endpoint, "reason", reason, "detail", why)
}

// replay asks for every buffered batch from start and applies, in order, those past the
// last applied one; when the buffer no longer reaches back to the next batch needed, the
// endpoint's entries are dropped first (fail closed) and the rest applied. It reports
// whether the replay ended with its end marker; false means nothing more was applied
// after the failure and the caller must fail closed itself.
func (c *conn) replay(start int64, why string) bool {
	s, ep := c.s, c.f.endpoint
	if _, err := c.dealer.SendMessage([]byte{}, SeqFrame(start)); err != nil {
		s.m.replays.WithLabelValues("failed").Inc()
		s.log.Warn("kvevents: replay request failed", "endpoint", ep, "err", err)
		return false
	}
	deadline := time.Now().Add(s.cfg.ReplayTimeout)
	outcome := "complete"
	for {
		left := time.Until(deadline)
		if left <= 0 {
			s.m.replays.WithLabelValues("timeout").Inc()
			s.log.Warn("kvevents: replay timed out: check --kv-events-replay-port and the engine's replay_endpoint", "endpoint", ep, "why", why, "timeout", s.cfg.ReplayTimeout)
			// Late replies must not be taken for the next replay's: start a new socket.
			c.closeDealer()
			if err := c.openDealer(); err != nil {
				s.log.Warn("kvevents: cannot reopen the replay socket, so this endpoint's gaps are no longer repaired (its entries are dropped instead) until it is followed anew", "endpoint", ep, "err", err)
			}
			return false
		}
		select {
		case <-c.f.stop:
			return false
		default:
		}
		frames, err := c.dealer.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			// Nothing queued (or a failed receive): wait, at most PollInterval, so that
			// stop is still checked that often.
			if err := c.dealerWait.Wait(time.Now().Add(min(left, s.cfg.PollInterval))); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
				s.m.replays.WithLabelValues("failed").Inc()
				return false
			}
			continue
		}
		msg, err := SplitReplay(frames)
		if err != nil {
			s.m.batches.WithLabelValues("bad_frames").Inc()
			continue
		}
		switch {
		case msg.Seq == EndOfReplay:
			s.m.replays.WithLabelValues(outcome).Inc()
			return true
		case msg.Seq <= c.t.applied:
			s.m.batches.WithLabelValues("duplicate").Inc()
			c.observe(msg.Seq)
			continue
		case c.t.applied >= 0 && msg.Seq != c.t.applied+1:
			outcome = "incomplete"
			c.failClosed("gap", "the replay buffer starts at batch "+strconv.FormatInt(msg.Seq, 10)+", after the last applied "+strconv.FormatInt(c.t.applied, 10))
		}
		c.apply(msg)
		c.observe(msg.Seq)
	}
}

func (c *conn) observe(seq int64) {
	if c.s.cfg.OnBatch != nil {
		c.s.cfg.OnBatch(c.f.endpoint, seq)
	}
}

// isTerm reports whether err means the ZeroMQ context or socket is closing.
func isTerm(err error) bool {
	return errors.Is(err, zmq.ETERM) || zmq.AsErrno(err) == zmq.ETERM || errors.Is(err, zmq.ErrorSocketClosed) || errors.Is(err, zmq.ErrorContextClosed)
}
