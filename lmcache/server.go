package lmcache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadaware/loadaware-epp/internal/threadcpu"
	"github.com/loadaware/loadaware-epp/ratelog"
	"github.com/loadaware/loadaware-epp/zmqwait"
	zmq "github.com/pebbe/zmq4"
	"github.com/prometheus/client_golang/prometheus"
)

// AllowMode says which peers may connect to the controller's sockets.
type AllowMode int

const (
	// AllowFleet admits only the IPs given to SetAllowedIPs (the fleet's endpoints).
	AllowFleet AllowMode = iota
	// AllowAny admits every peer IP (MaxPeerConns still applies).
	AllowAny
)

// ParseAllowMode parses "fleet" or "any".
func ParseAllowMode(s string) (AllowMode, error) {
	switch strings.TrimSpace(s) {
	case "fleet":
		return AllowFleet, nil
	case "any":
		return AllowAny, nil
	}
	return 0, fmt.Errorf("lmcache: unknown allow mode %q: use fleet (only the endpoints' IPs may push cache events) or any", s)
}

func (m AllowMode) String() string {
	if m == AllowAny {
		return "any"
	}
	return "fleet"
}

// ServerConfig configures the controller's sockets. Addresses are "host:port" (or
// "tcp://host:port"); port 0 picks a free port, and an empty host listens on every
// interface.
type ServerConfig struct {
	// PullAddr is where the workers' PUSH sockets connect (production stack: port 9000).
	PullAddr string
	// ReplyAddr is the ROUTER serving RegisterMsg/HeartbeatMsg requests from REQ and DEALER
	// peers (port 9001); empty disables it.
	ReplyAddr string
	// HeartbeatAddr is the optional dedicated heartbeat ROUTER of the newest workers; empty
	// disables it.
	HeartbeatAddr string
	// HeartbeatURL ("host:port") is told to registering workers as extra_config
	// heartbeat_url. Empty: derived from the bound heartbeat address when its host is a
	// specific IP, else not sent (those workers then send no heartbeats).
	HeartbeatURL string
	// Allow selects the peers admitted; the zero value is AllowFleet.
	Allow AllowMode
	// SweepInterval is how often silent instances are expired; 0 means 5 s.
	SweepInterval time.Duration
	// Now is the clock stamped on received messages; nil means time.Now.
	Now func() time.Time
	// MaxFrameBytes bounds one received frame (ZeroMQ's ZMQ_MAXMSGSIZE): ZeroMQ disconnects
	// a peer that announces a larger one, before reading it, and the message never reaches
	// the controller. 0 means DefaultMaxFrameBytes.
	MaxFrameBytes int64
	// Ingest, when set, wraps every application of frames received from the network (see
	// IngestFunc); nil applies them directly.
	Ingest IngestFunc
	// RcvHWM is how many messages each socket queues before ZeroMQ stops reading its
	// peers (their PUSH sockets then block or drop): the memory a peer faster than the index
	// can make libzmq hold. 0 means DefaultRcvHWM.
	RcvHWM int
	// PeerRate is how many bytes a second of messages one peer IP may send, summed over
	// the sockets; 0 means DefaultPeerRate, negative: no limit. A peer over it is slowed
	// to it: the controller stops reading (at most 50 ms per message) until the peer's
	// debt is repaid, so its connection backs up and ZeroMQ blocks its sender; a peer
	// more than PeerBurst bytes in debt has its messages dropped. The bytes of messages the
	// ZMTP front drops are charged too, before they are read, and the front stops reading
	// that connection until the debt is repaid (no cap: no other peer waits). Counted in
	// loadaware_lmcache_peer_over_rate_*.
	PeerRate int64
	// PeerBurst is how many bytes a peer may send at once above PeerRate (a full sync);
	// 0 means DefaultPeerBurst.
	PeerBurst int64
	// IngestCPU is the share of one CPU the pull loop may use on average, every peer
	// together: its OS thread's CPU time receiving, decoding and applying messages (Linux;
	// elsewhere no budget applies). A loop over it pauses (at most 50 ms at a time) until
	// the debt is repaid, so the socket's queue fills to RcvHWM and ZeroMQ blocks the
	// senders: nothing is dropped. 0 means DefaultIngestCPU, negative: no budget. Counted
	// in loadaware_lmcache_ingest_cpu_seconds_total and ..._paused_seconds_total.
	IngestCPU float64
	// IngestCPUBurst is how much CPU time the pull loop may use at once above IngestCPU;
	// 0 means DefaultIngestCPUBurst.
	IngestCPUBurst time.Duration
	// MaxPeerConns is how many connections one peer IP may hold to each socket; a connection
	// past it is closed by the front as it is accepted, counted in
	// loadaware_lmcache_peer_conns_refused_total. 0 means DefaultMaxPeerConns, negative: no
	// cap.
	MaxPeerConns int
}

// Server owns the ZeroMQ sockets of the embedded controller and feeds an Index. Create it
// with NewServer, then Start; Close stops it.
type Server struct {
	cfg      ServerConfig
	idx      *Index
	log      *slog.Logger
	rejected prometheus.Counter
	now      func() time.Time

	allowed   atomic.Pointer[map[string]bool]
	rejectLog *ratelog.Limiter // a refused address's line, once a minute

	limit    *peerLimiter
	overWait prometheus.Counter
	overMsgs *prometheus.CounterVec
	overLog  *ratelog.Limiter // a peer's over-rate line, once a minute per outcome

	longMsgs     prometheus.Counter
	longLog      *ratelog.Limiter // a peer's too-many-frames line, once a minute
	ingestCPU    prometheus.Counter
	ingestPaused prometheus.Counter
	pausedLog    *ratelog.Limiter // the pull loop's over-budget line, once a minute
	connsRefused prometheus.Counter
	connLog      *ratelog.Limiter // a peer's over-the-cap line, once a minute per socket
	bigMsgs      prometheus.Counter
	connsCut     *prometheus.CounterVec
	cutLog       *ratelog.Limiter // a connection ended by the front, once a minute per peer and reason

	fronts []*front
	inner  *innerSockets // where the libzmq sockets listen behind the fronts
	peerID peerID        // how a message's peer is read from its metadata

	zctx                           *zmq.Context
	waiters                        []*zmqwait.Waiter // one a serving goroutine; Close closes them
	pullAddr, replyAddr, heartAddr string
	heartbeatURL                   string
	wg                             sync.WaitGroup
	done                           chan struct{}
	started                        atomic.Bool
	closeOnce                      sync.Once
	closeErr                       error
}

// DefaultRcvHWM queues 100 messages per connected peer (ZeroMQ's high-water mark is a
// pipe's). A worker's batch is up to 50 events of about 60 bytes and a busy engine sends
// some 25 KB/s, so 100 is seconds of its events, and a 110,000-key full sync (55 batches of
// 2,000 keys) fits whole; a faster peer is read at --lmcache-peer-rate anyway, so a longer
// queue only holds more of its backlog in libzmq. At 2,000 (decision 0703, down from the
// 100,000 under which a flooding peer made libzmq hold a gigabyte) the soak's junk flood
// queued 100,000 events in its first second, faulting in 4,200-4,800 pages a second of the
// picker's process outside Go; at 100, 500-590 (decision 1188).
const DefaultRcvHWM = 100

// DefaultMaxFrameBytes bounds one frame at 256 KiB, 14 times the largest frame LMCache sends (a
// full sync's batch of 2,000 keys, about 18 KB; a worker's batch is up to 50 frames of about
// 60 bytes). With DefaultRcvHWM, what ZeroMQ holds for one peer connection of one socket is
// at most (100 + 1) x 256 KiB, 25.3 MiB, for messages of one frame (64 MiB frames allowed
// 6.3 GiB; decision 1179). ZeroMQ reads a multi-frame message whole before the controller
// sees it and its high-water mark counts whole messages, so messages of many frames are not
// bounded in bytes by ZeroMQ (docs/security.md).
const DefaultMaxFrameBytes = 256 << 10

// maxMessageFrames is the most frames of one message the controller keeps: a worker's batch
// (maxBatchFrames), a ROUTER's routing id with an empty delimiter and a request. The rest of
// a longer message is received and dropped with it, so one message holds at most
// maxMessageFrames x MaxFrameBytes of the controller's memory (16 MiB by default).
const maxMessageFrames = maxBatchFrames

// errTooManyFrames reports a message of more than maxMessageFrames frames, received and dropped.
var errTooManyFrames = errors.New("lmcache: message of too many frames dropped")

// NewServer prepares a server for idx. reg (optional) receives the server's metrics.
func NewServer(cfg ServerConfig, idx *Index, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if idx == nil {
		return nil, errors.New("lmcache: NewServer needs an Index")
	}
	if cfg.PullAddr == "" {
		return nil, errors.New("lmcache: no pull address: set the LMCache controller pull port (production stack: 9000)")
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = 5 * time.Second
	}
	if cfg.RcvHWM <= 0 {
		cfg.RcvHWM = DefaultRcvHWM
	}
	if cfg.MaxFrameBytes <= 0 {
		cfg.MaxFrameBytes = DefaultMaxFrameBytes
	}
	if cfg.PeerRate == 0 {
		cfg.PeerRate = DefaultPeerRate
	}
	if cfg.PeerBurst <= 0 {
		cfg.PeerBurst = DefaultPeerBurst
	}
	if cfg.IngestCPU == 0 {
		cfg.IngestCPU = DefaultIngestCPU
	}
	if cfg.IngestCPUBurst <= 0 {
		cfg.IngestCPUBurst = DefaultIngestCPUBurst
	}
	if cfg.MaxPeerConns == 0 {
		cfg.MaxPeerConns = DefaultMaxPeerConns
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg: cfg,
		idx: idx,
		log: logger,
		now: cfg.Now,
		rejected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_rejected_peers_total",
			Help: "Connections to the LMCache controller sockets refused because the peer's IP is not a fleet endpoint (each attempt counts; the log names the address).",
		}),
		rejectLog: ratelog.New(time.Minute),
		done:      make(chan struct{}),
		limit:     newPeerLimiter(cfg.PeerRate, cfg.PeerBurst),
		overWait: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_peer_over_rate_wait_seconds_total",
			Help: "Time the LMCache controller stopped reading its sockets because a peer IP sent faster than --lmcache-peer-rate (back-pressure: its sender blocks): the pull loop's waits (every peer waits) and the ZMTP front's for the bytes of messages it drops (that connection waits).",
		}),
		overMsgs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_lmcache_peer_over_rate_messages_total",
			Help: "Messages of a peer IP over --lmcache-peer-rate: delayed (applied after a wait) or dropped (more than --lmcache-peer-burst in debt).",
		}, []string{"outcome"}),
		overLog: ratelog.New(time.Minute),
		longMsgs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_long_messages_total",
			Help: "LMCache messages of more than 64 frames (a worker batches at most 50): received and dropped whole, so that one message holds at most 64 x --lmcache-max-frame-bytes of the controller's memory.",
		}),
		longLog: ratelog.New(time.Minute),
		ingestCPU: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_ingest_cpu_seconds_total",
			Help: "CPU time the LMCache controller's pull loop used receiving, decoding and applying cache events (its OS thread's; Linux).",
		}),
		ingestPaused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_ingest_paused_seconds_total",
			Help: "Time the LMCache controller's pull loop stopped reading because it had used its CPU budget (--lmcache-ingest-cpu; back-pressure: the senders block).",
		}),
		pausedLog: ratelog.New(time.Minute),
		connsRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_peer_conns_refused_total",
			Help: "Connections to an LMCache controller socket ended as they were accepted because their peer IP already held --lmcache-max-peer-conns connections to it.",
		}),
		connLog: ratelog.New(time.Minute),
		bigMsgs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_big_messages_total",
			Help: "LMCache messages of more bytes than --lmcache-max-frame-bytes, all frames together: read and dropped before libzmq holds them (a message of one frame over it ends the connection instead).",
		}),
		connsCut: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_lmcache_peer_conns_cut_total",
			Help: "Connections to an LMCache controller socket ended by its ZMTP front: a frame over --lmcache-max-frame-bytes (frame_cap), or a peer not speaking ZMTP 3 with the NULL mechanism (protocol).",
		}, []string{"reason"}),
		cutLog: ratelog.New(time.Minute),
	}
	if s.now == nil {
		s.now = time.Now
	}
	empty := map[string]bool{}
	s.allowed.Store(&empty)
	idx.SetTrustClaims(cfg.Allow == AllowAny)
	if cfg.PeerRate < 0 {
		s.limit = nil
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{s.rejected, s.overWait, s.overMsgs, s.longMsgs, s.ingestCPU, s.ingestPaused, s.connsRefused, s.bigMsgs, s.connsCut} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("lmcache: register server metrics: %w", err)
			}
		}
	}
	return s, nil
}

// SetAllowedIPs replaces the IPs admitted in AllowFleet mode. Entries may be "ip" or
// "ip:port" (endpoint addresses); host names cannot be checked against a peer address and
// are reported as a configuration error and skipped.
func (s *Server) SetAllowedIPs(ips []string) {
	set := make(map[string]bool, len(ips))
	var names []string
	for _, e := range ips {
		ip := canonicalIP(e)
		if _, err := netip.ParseAddr(ip); err != nil {
			names = append(names, e)
			continue
		}
		set[ip] = true
	}
	if s.cfg.Allow == AllowFleet {
		s.idx.RetainIPs(set) // instances of engines that left no longer speak for their ids
	}
	if len(names) > 0 {
		s.log.Error("lmcache: endpoints given by host name cannot be admitted to the controller sockets: list endpoints by IP (the engines register with their pod IP)", "names", names)
	}
	s.allowed.Store(&set)
}

// Start binds the sockets and serves them until Close or until ctx ends. It returns once
// every socket is bound (or the first error).
func (s *Server) Start(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("lmcache: server already started")
	}
	zctx, err := zmq.NewContext()
	if err != nil {
		return fmt.Errorf("lmcache: zeromq context: %w", err)
	}
	s.zctx = zctx
	var socks []*zmq.Socket
	fail := func(err error) error {
		for _, w := range s.waiters {
			w.Close()
		}
		for _, f := range s.fronts {
			f.close()
		}
		for _, so := range socks {
			so.Close()
		}
		zctx.Term()
		s.inner.remove()
		close(s.done)
		s.wg.Wait() // the fronts' goroutines
		return err
	}
	var secret [16]byte
	if _, err := rand.Read(secret[:]); err != nil {
		return fail(fmt.Errorf("lmcache: a key for the ZMTP front: %w", err))
	}
	s.peerID = peerID{key: hex.EncodeToString(secret[:])}
	inner, err := newInnerSockets()
	if err != nil {
		return fail(err)
	}
	s.inner = inner
	bind := func(kind zmq.Type, addr, what string) (*zmq.Socket, string, error) {
		hostPort := strings.TrimPrefix(strings.TrimSpace(addr), "tcp://")
		if _, _, err := net.SplitHostPort(hostPort); err != nil {
			return nil, "", fmt.Errorf("lmcache: %s address %q is not host:port: %w", what, addr, err)
		}
		// The front listens on addr; libzmq on a Unix socket behind it.
		ln, err := s.listenFront(hostPort)
		if err != nil {
			return nil, "", fmt.Errorf("lmcache: bind %s socket on %s: %w (is the port in use?)", what, addr, err)
		}
		fr := &front{s: s, what: what, ln: ln, inner: inner.addr(what), byIP: map[string]int{}, conns: map[net.Conn]struct{}{}}
		s.fronts = append(s.fronts, fr)
		so, err := zctx.NewSocket(kind)
		if err != nil {
			return nil, "", fmt.Errorf("lmcache: %s socket: %w", what, err)
		}
		socks = append(socks, so)
		for _, set := range []func() error{
			func() error { return so.SetLinger(0) },
			func() error { return so.SetMaxmsgsize(s.cfg.MaxFrameBytes) },
			func() error { return so.SetRcvhwm(s.cfg.RcvHWM) },
		} {
			if err := set(); err != nil {
				return nil, "", fmt.Errorf("lmcache: %s socket options: %w", what, err)
			}
		}
		if err := so.Bind("ipc://" + fr.inner); err != nil {
			return nil, "", fmt.Errorf("lmcache: bind the %s socket behind its front on %s: %w", what, fr.inner, err)
		}
		return so, fr.ln.Addr().String(), nil
	}
	pull, pullAddr, err := bind(zmq.PULL, s.cfg.PullAddr, "pull")
	if err != nil {
		return fail(err)
	}
	s.pullAddr = pullAddr
	var reply, heart *zmq.Socket
	if s.cfg.ReplyAddr != "" {
		if reply, s.replyAddr, err = bind(zmq.ROUTER, s.cfg.ReplyAddr, "reply"); err != nil {
			return fail(err)
		}
	}
	if s.cfg.HeartbeatAddr != "" {
		if heart, s.heartAddr, err = bind(zmq.ROUTER, s.cfg.HeartbeatAddr, "heartbeat"); err != nil {
			return fail(err)
		}
		s.heartbeatURL = s.cfg.HeartbeatURL
		if s.heartbeatURL == "" {
			if h, _, err := net.SplitHostPort(s.heartAddr); err == nil {
				if a, err := netip.ParseAddr(h); err == nil && !a.IsUnspecified() {
					s.heartbeatURL = s.heartAddr
				}
			}
		}
		if s.heartbeatURL == "" {
			s.log.Warn("lmcache: the heartbeat socket listens on every interface, so workers cannot be told its address: set the heartbeat URL (host:port the engines can reach); until then newer workers send no heartbeats", "bound", s.heartAddr)
		}
	}

	type loop struct {
		so    *zmq.Socket
		serve func(*zmq.Socket, *zmqwait.Waiter)
		what  string
	}
	loops := []loop{{pull, s.servePull, "pull"}}
	if reply != nil {
		loops = append(loops, loop{reply, s.serveRouter, "reply"})
	}
	if heart != nil {
		loops = append(loops, loop{heart, s.serveRouter, "heartbeat"})
	}
	for _, l := range loops {
		w, err := zmqwait.New(l.so)
		if err != nil {
			return fail(fmt.Errorf("lmcache: %s socket: %w", l.what, err))
		}
		s.waiters = append(s.waiters, w)
	}
	for i, l := range loops {
		s.wg.Go(func() { l.serve(l.so, s.waiters[i]) })
	}
	s.wg.Go(s.sweep)
	for _, f := range s.fronts {
		s.wg.Go(f.serve) // after every socket is bound: a forwarded connection finds its socket
	}
	go func() {
		select {
		case <-ctx.Done():
			s.Close()
		case <-s.done:
		}
	}()
	kc := s.idx.Hasher().Config()
	s.log.Info("lmcache: controller listening", "pull", s.pullAddr, "reply", s.replyAddr, "heartbeat", s.heartAddr,
		"heartbeat_url", s.heartbeatURL, "allow_from", s.cfg.Allow.String(), "allowed_ips", len(*s.allowed.Load()),
		"hash_seed", kc.HashSeed, "chunk_size", kc.ChunkSize, "key_format", kc.Format.String())
	s.log.Info("lmcache: what a peer can make the controller hold: per connection and socket, at most the queue's messages plus one being read in libzmq and one in the ZMTP front, each of at most the frame cap in bytes (all its frames together) and 64 frames; a larger frame ends its connection, a larger message is dropped before libzmq holds it; an IP holds at most max_peer_conns connections a socket (-1: no cap) (docs/security.md, decision 1178)",
		"queue_messages", s.cfg.RcvHWM, "frame_cap_bytes", s.cfg.MaxFrameBytes,
		"connection_bound_bytes", ConnectionBoundBytes(s.cfg.RcvHWM, s.cfg.MaxFrameBytes), "message_bound_bytes", s.cfg.MaxFrameBytes,
		"max_peer_conns", s.cfg.MaxPeerConns)
	if s.cfg.Allow == AllowFleet && len(*s.allowed.Load()) == 0 {
		s.log.Warn("lmcache: no fleet IPs known yet: every worker connection is refused until the endpoints are set (or use allow-from any)")
	}
	return nil
}

// listenFront listens on hostPort ("host:port"; an empty host: every
// interface) with the keepalive the libzmq sockets had: a peer gone without a word (its node
// lost) frees its connection's place in MaxPeerConns after 60 + 3 x 10 s, not never.
func (s *Server) listenFront(hostPort string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 60 * time.Second, Interval: 10 * time.Second, Count: 3}}
	return lc.Listen(context.Background(), "tcp", hostPort)
}

// PullAddr returns the bound pull address ("ip:port"), after Start.
func (s *Server) PullAddr() string { return s.pullAddr }

// ReplyAddr returns the bound reply address, or "" when disabled.
func (s *Server) ReplyAddr() string { return s.replyAddr }

// HeartbeatAddr returns the bound heartbeat address, or "" when disabled.
func (s *Server) HeartbeatAddr() string { return s.heartAddr }

// Close stops serving, closes the sockets and waits for the goroutines. It is idempotent.
func (s *Server) Close() error {
	if !s.started.Load() {
		return nil
	}
	s.closeOnce.Do(func() {
		select {
		case <-s.done: // Start failed and cleaned up
			return
		default:
		}
		close(s.done)
		for _, f := range s.fronts {
			f.close()
		}
		// Closing the waiters ends every wait for a message with zmqwait.ErrClosed, now or
		// when the goroutine next waits; a goroutine busy with a message stops in pace (on
		// s.done) or at its next socket call, which returns ETERM once Term has begun. Each
		// goroutine then closes its socket, and Term returns once all are closed.
		for _, w := range s.waiters {
			w.Close()
		}
		s.closeErr = s.zctx.Term()
		s.wg.Wait()
		s.inner.remove()
	})
	return s.closeErr
}

// isTerm reports whether err means the server is closing: the context terminates, or the
// socket or its waiter was closed.
func isTerm(err error) bool {
	return errors.Is(err, zmq.ETERM) || zmq.AsErrno(err) == zmq.ETERM || errors.Is(err, zmq.ErrorSocketClosed) || errors.Is(err, zmq.ErrorContextClosed) ||
		errors.Is(err, zmqwait.ErrClosed)
}

// recvPeer receives one message with flags, appended to frames, and the address of the
// peer it came from ("" if unknown), read from the message's metadata by id. A message of more than maxMessageFrames frames is
// received to its end and dropped: errTooManyFrames, with the peer's address. The address is taken from the first frame that carries it: the routing id
// frame of a ROUTER carries none when ZMQ_EVENTS (read by every zmqwait.Waiter.Wait) has
// prefetched the message, in libzmq before 4.3.5 (zeromq/libzmq#4317; Debian 12 ships
// 4.3.4), while the frames the peer sent always do.
func recvPeer(so *zmq.Socket, flags zmq.Flag, frames [][]byte, id peerID) (_ [][]byte, peer string, err error) {
	long := false
	for {
		var b []byte
		if peer == "" {
			var md map[string]string
			b, md, err = so.RecvBytesWithMetadata(flags, frontProps...)
			peer = id.of(md)
		} else {
			b, err = so.RecvBytes(flags)
		}
		if err != nil {
			return frames[:0], "", err
		}
		switch {
		case len(frames) < maxMessageFrames && !long:
			frames = append(frames, b)
		case !long:
			long = true
			clear(frames)
			frames = frames[:0]
		}
		more, err := so.GetRcvmore()
		switch {
		case err != nil:
			return frames, peer, err
		case more:
		case long:
			return frames, peer, errTooManyFrames
		default:
			return frames, peer, nil
		}
	}
}

// noteLongMessage counts a message of too many frames and logs it at WARN, at most once a
// minute per peer.
func (s *Server) noteLongMessage(peer string) {
	s.longMsgs.Inc()
	ip := canonicalIP(peer)
	if n, logIt := s.longLog.Due(ip, time.Now()); logIt {
		s.log.Warn("lmcache: dropped a message of more frames than the controller keeps (an LMCache worker batches at most 50); it was read whole and not applied (logged once a minute per peer; see loadaware_lmcache_long_messages_total)",
			"peer", ip, "messages", n, "max_frames", maxMessageFrames)
	}
}

// servePull receives and applies the pull socket's messages until the socket is closed. Its
// frames slice and its two functions are made once, not per message: the frames are the
// loop's again once ingest has returned (IngestFunc's contract), and the message of the
// moment is read through the variables the functions share. The two functions keep to
// their OS thread while they run, and add the CPU time it used to the loop's budget
// (ServerConfig.IngestCPU); the loop is not locked to a thread while it waits, so a wake-up
// costs what it did without the budget.
func (s *Server) servePull(so *zmq.Socket, w *zmqwait.Waiter) {
	defer so.Close()
	budget := newIngestBudget(s.cfg.IngestCPU, s.cfg.IngestCPUBurst, time.Now())
	var frames [][]byte
	var peer string
	var used time.Duration // the thread CPU the functions used since the last payIngest
	recv := func(f zmq.Flag) (err error) {
		d, _ := threadcpu.Of(func() { frames, peer, err = recvPeer(so, f, frames[:0], s.peerID) })
		used += d
		return err
	}
	applyFrames := func() (ok bool) {
		d, _ := threadcpu.Of(func() { ok = s.idx.ApplyFrames(frames, peer, s.now()) > 0 })
		used += d
		return ok
	}
	for {
		clear(frames) // hold no message's memory while waiting for the next
		if used > 0 {
			if stop := s.payIngest(budget, used); stop {
				return
			}
			used = 0
		}
		err := w.Receive(time.Time{}, recv)
		if err != nil {
			if isTerm(err) {
				return
			}
			if errors.Is(err, errTooManyFrames) {
				s.noteLongMessage(peer)
				continue
			}
			s.log.Error("lmcache: receive on the pull socket", "err", err)
			continue
		}
		if peer == "" {
			s.idx.RefuseUnknownPeer(s.now())
			continue
		}
		apply, stop := s.pace(peer, frames)
		if stop {
			return
		}
		if !apply {
			continue
		}
		s.ingest(peer, frames, applyFrames)
	}
}

// payIngest counts the pull loop's CPU time used and charges it to its budget, pausing
// while the budget is in debt. It reports stop when the server is closing.
func (s *Server) payIngest(budget *ingestBudget, used time.Duration) (stop bool) {
	s.ingestCPU.Add(used.Seconds())
	wait := budget.charge(used, time.Now())
	if wait <= 0 {
		return false
	}
	s.ingestPaused.Add(wait.Seconds())
	if n, logIt := s.pausedLog.Due("pull", time.Now()); logIt {
		s.log.Warn("lmcache: the controller's ingestion used its CPU budget; it stops reading the pull socket until the budget refills (the senders block; nothing is dropped; logged once a minute; see loadaware_lmcache_ingest_paused_seconds_total). If the fleet's events fall behind, raise --lmcache-ingest-cpu",
			"pauses", n, "cpu_share", s.cfg.IngestCPU, "burst", s.cfg.IngestCPUBurst)
	}
	return s.sleep(wait)
}

// pace charges a message of peer to its byte rate and waits out the peer's debt (see
// ServerConfig.PeerRate). It reports whether to apply the message, and stop when the server
// is closing.
func (s *Server) pace(peer string, frames [][]byte) (apply, stop bool) {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	ip := canonicalIP(peer)
	wait, apply := s.limit.admit(ip, n, time.Now())
	if wait <= 0 {
		return apply, false
	}
	outcome := "delayed"
	if !apply {
		outcome = "dropped"
	}
	s.overMsgs.WithLabelValues(outcome).Inc()
	s.overWait.Add(wait.Seconds())
	s.noteOverRate(ip, outcome)
	if s.sleep(wait) {
		return false, true
	}
	return apply, false
}

// sleep waits d, or until the server closes: closing reports which. A wait for a budget or a
// rate (the pull loop's, the front's) is cut short by Close.
func (s *Server) sleep(d time.Duration) (closing bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return false
	case <-s.done:
		return true
	}
}

// noteOverRate logs a peer over its rate at WARN, at most once a minute per peer, with the
// messages delayed or dropped since the last line.
func (s *Server) noteOverRate(ip, outcome string) {
	if n, logIt := s.overLog.Due(ip+"|"+outcome, time.Now()); logIt {
		s.log.Warn("lmcache: a peer sends cache events faster than --lmcache-peer-rate; the controller slows it (it stops reading, so the peer's sends block) and drops what is more than --lmcache-peer-burst over (logged once a minute per peer; see loadaware_lmcache_peer_over_rate_messages_total). If it is a real engine, raise the rate",
			"peer", ip, "outcome", outcome, "messages", n, "rate_bytes_per_s", s.cfg.PeerRate, "burst_bytes", s.cfg.PeerBurst)
	}
}

func (s *Server) serveRouter(so *zmq.Socket, w *zmqwait.Waiter) {
	defer so.Close()
	for {
		var frames [][]byte
		var peer string
		err := w.Receive(time.Time{}, func(f zmq.Flag) (err error) {
			frames, peer, err = recvPeer(so, f, nil, s.peerID)
			return err
		})
		if err != nil {
			if isTerm(err) {
				return
			}
			if errors.Is(err, errTooManyFrames) {
				s.noteLongMessage(peer)
				continue
			}
			s.log.Error("lmcache: receive on a reply socket", "err", err)
			continue
		}
		if len(frames) < 2 {
			continue // no routing identity: cannot answer
		}
		if peer != "" {
			apply, stop := s.pace(peer, frames[len(frames)-1:])
			if stop {
				return
			}
			if !apply {
				continue // dropped unanswered: the peer is far over its rate
			}
		}
		reply := s.answer(frames[len(frames)-1], peer)
		out := append(frames[:len(frames)-1:len(frames)-1], reply)
		if _, err := so.SendMessage(out); err != nil {
			if isTerm(err) {
				return
			}
			s.log.Warn("lmcache: send a reply", "err", err)
		}
	}
}

// answer applies one request from peer and encodes its reply.
func (s *Server) answer(payload []byte, peer string) []byte {
	var msg Message
	var err error
	if peer == "" {
		s.idx.RefuseUnknownPeer(s.now())
		err = errors.New("the connection's address is unknown, so the message cannot be authenticated")
	} else {
		s.ingest(peer, [][]byte{payload}, func() bool {
			msg, err = s.idx.ApplyFrameFrom(payload, peer, s.now())
			return err == nil
		})
	}
	if errors.Is(err, ErrRefused) {
		msg = nil // answer the refusal
	}
	var reply Message
	switch m := msg.(type) {
	case RegisterMsg:
		extra := map[string]string{}
		if s.heartbeatURL != "" {
			extra["heartbeat_url"] = s.heartbeatURL
		}
		reply = RegisterRetMsg{ExtraConfig: extra}
	case HeartbeatMsg:
		reply = HeartbeatRetMsg{}
	default:
		switch {
		case err != nil:
			reply = ErrorMsg{Error: "loadaware-epp LMCache controller cannot serve this request: " + err.Error()}
		default:
			reply = ErrorMsg{Error: fmt.Sprintf("loadaware-epp LMCache controller: %s was applied, but it belongs on the pull channel and has no reply", m.Tag())}
		}
	}
	b, err := Encode(reply)
	if err != nil {
		// Every reply type above is encodable; keep the peer unblocked regardless.
		b, _ = Encode(ErrorMsg{Error: err.Error()})
	}
	return b
}

func (s *Server) sweep() {
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
			s.idx.Sweep(s.now())
		}
	}
}

// noteRejected counts a refused connection and logs it, at most once a minute per address.
func (s *Server) noteRejected(addr string) {
	s.rejected.Inc()
	if _, logIt := s.rejectLog.Due(addr, s.now()); logIt {
		allowed := make([]string, 0, len(*s.allowed.Load()))
		for ip := range *s.allowed.Load() {
			allowed = append(allowed, ip)
		}
		sort.Strings(allowed)
		s.log.Warn("lmcache: refused a connection from outside the fleet (allow-from fleet); if it is an engine, add its IP to the endpoints, or use allow-from any",
			"peer", addr, "allowed", allowed)
	}
}
