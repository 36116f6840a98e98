package lmcache

import (
	"crypto/subtle"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/zmtp"
)

// DefaultMaxPeerConns is how many connections one peer IP may hold to each controller
// socket. An LMCache worker holds one a socket, and an engine pod runs one worker per
// tensor-parallel rank on it: 8 on a node of 8 GPUs. Each connection is a queue of its own
// in libzmq ((RcvHWM + 1) x MaxFrameBytes of one-frame messages), and libzmq has no cap of
// its own; the front caps them (decisions 1177, 1178).
const DefaultMaxPeerConns = 8

// The READY properties the front writes for libzmq: the peer's IP, and the key that proves
// the connection came through the front (libzmq's Unix socket is, on Linux, in the abstract
// namespace, which every process of the pod's network namespace can reach; none knows the key).
const (
	peerProperty = "X-Loadaware-Peer"
	keyProperty  = "X-Loadaware-Key"
)

// peerID reads a message's peer from its metadata (libzmq's, of frontProps): the
// peer is peerProperty's value when keyProperty's is key, else unknown ("": the message is
// refused). Without a key (before Start) every peer is unknown.
type peerID struct {
	key string
}

// frontProps are the metadata properties of a message that peerID.of reads.
var frontProps = []string{peerProperty, keyProperty}

func (id peerID) of(md map[string]string) string {
	if id.key == "" || subtle.ConstantTimeCompare([]byte(md[keyProperty]), []byte(id.key)) != 1 {
		return ""
	}
	return md[peerProperty]
}

// front listens on one of the controller's addresses in place of its libzmq socket: it
// admits a connection (the fleet's IPs under allow-from fleet, at most MaxPeerConns of an
// IP), then reads the peer's ZMTP stream and forwards it to the socket, bound to a Unix
// socket (innerSockets: abstract on Linux), with zmtp.Forward: a message of
// more than maxMessageFrames frames or more than MaxFrameBytes bytes is read and dropped
// before libzmq sees any of it, and a frame over MaxFrameBytes ends the connection. So what
// one connection makes libzmq hold is at most (RcvHWM + 1) x MaxFrameBytes whatever its
// messages' frames (decision 1178), and the front holds one message more. The peer's IP
// reaches the controller as the READY property peerProperty, beside keyProperty.
type front struct {
	s     *Server
	what  string // the socket's name: pull, reply, heartbeat
	ln    net.Listener
	inner string // the libzmq socket's Unix socket address (abstract: @name; else a path)

	mu     sync.Mutex
	byIP   map[string]int
	conns  map[net.Conn]struct{} // the peers' and libzmq's ends
	closed bool
}

func (f *front) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// out of descriptors, most likely: let the others finish something
			f.s.log.Error("lmcache: accept on a controller socket", "socket", f.what, "err", err)
			select {
			case <-f.s.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		f.admit(c)
	}
}

// admit refuses c or starts forwarding it.
func (f *front) admit(c net.Conn) {
	ip := "?"
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		ip = ap.Addr().Unmap().WithZone("").String()
	}
	s := f.s
	if s.cfg.Allow == AllowFleet && !(*s.allowed.Load())[ip] {
		c.Close()
		s.noteRejected(ip)
		return
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		c.Close()
		return
	}
	if max := s.cfg.MaxPeerConns; max > 0 && f.byIP[ip] >= max {
		f.mu.Unlock()
		c.Close()
		s.noteConnRefused(f.what, ip, max)
		return
	}
	f.byIP[ip]++
	f.conns[c] = struct{}{}
	f.mu.Unlock()
	s.wg.Go(func() {
		defer f.release(c, ip)
		f.forward(c, ip)
	})
}

// track adds c to the connections close ends; false once closed.
func (f *front) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *front) untrack(c net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
}

func (f *front) release(c net.Conn, ip string) {
	c.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.conns, c)
	if f.byIP[ip]--; f.byIP[ip] <= 0 {
		delete(f.byIP, ip)
	}
}

// forward carries c's stream to the libzmq socket and the socket's back, until either ends.
func (f *front) forward(c net.Conn, ip string) {
	s := f.s
	inner, err := net.Dial("unix", f.inner)
	if err != nil {
		s.log.Error("lmcache: reach the controller's socket behind its front", "socket", f.what, "err", err)
		return
	}
	// tracked too, so that close ends a write to a stalled libzmq at once
	if !f.track(inner) {
		inner.Close()
		return
	}
	defer f.untrack(inner)
	back := make(chan struct{})
	go func() { // ends when inner is closed below, or libzmq closes it
		defer close(back)
		buf := make([]byte, 4<<10)
		for {
			n, err := inner.Read(buf)
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		c.Close() // libzmq ended the connection: so does the front
	}()
	lim := zmtp.Limits{FrameBytes: s.cfg.MaxFrameBytes, MessageBytes: s.cfg.MaxFrameBytes, MessageFrames: maxMessageFrames}
	props := []zmtp.Property{{Name: peerProperty, Value: ip}, {Name: keyProperty, Value: s.peerID.key}}
	err = zmtp.Forward(c, inner, props, lim, zmtp.Drops{
		Charge:   func(n int64) error { return s.payFront(ip, n) },
		Dropped:  func(d zmtp.Drop) { s.noteDropped(ip, d) },
		Commands: func(n int64) error { return s.payFront(ip, n) },
	})
	inner.Close()
	<-back
	var pe *zmtp.ProtocolError
	switch {
	case errors.Is(err, errClosing):
	case errors.Is(err, zmtp.ErrFrameTooLarge):
		s.noteCut(f.what, ip, "frame_cap", err)
	case errors.As(err, &pe):
		s.noteCut(f.what, ip, "protocol", err)
	}
}

// close stops accepting, ends every connection and waits for nothing (the Server's wait
// group holds the goroutines).
func (f *front) close() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
}

// errClosing ends a connection's forwarding when the server closes during its wait.
var errClosing = errors.New("lmcache: the server is closing")

// payFront charges to ip's --lmcache-peer-rate n bytes the front reads that the pull loop
// never charges: a message the front is dropping, before it reads them, and commands (PING,
// PONG, ...; at least zmtp.CommandMinChargeBytes each), which it hands to libzmq at once,
// zmtp.CommandChargeBytes of them at a time or before it waits for the peer (zmtp.Drops).
// It stops reading the connection until the IP's debt is repaid (its wait counted in
// loadaware_lmcache_peer_over_rate_wait_seconds_total and logged as the pull loop's are; a
// dropped message is counted as dropped for its size, not again for its rate): a peer cannot
// make the front read and discard, or hand libzmq commands, faster than its rate once its
// burst is spent.
func (s *Server) payFront(ip string, n int64) error {
	wait := s.limit.charge(ip, n, time.Now())
	if wait <= 0 {
		return nil
	}
	s.overWait.Add(wait.Seconds())
	s.noteOverRate(ip, "delayed")
	if s.sleep(wait) {
		return errClosing
	}
	return nil
}

// noteDropped counts a message the front dropped and logs it, at most once a minute per peer
// and bound.
func (s *Server) noteDropped(ip string, d zmtp.Drop) {
	if d.OverFrames {
		s.noteLongMessage(ip)
		return
	}
	s.bigMsgs.Inc()
	if n, logIt := s.longLog.Due(ip+"|bytes", time.Now()); logIt {
		s.log.Warn("lmcache: dropped a message of more bytes than --lmcache-max-frame-bytes (all its frames together; LMCache's largest, a full sync's batch, is about 18 KB); it was read and not applied (logged once a minute per peer; see loadaware_lmcache_big_messages_total). If it is a real engine, raise --lmcache-max-frame-bytes",
			"peer", ip, "messages", n, "bytes", d.Bytes, "frames", d.Frames, "max_bytes", s.cfg.MaxFrameBytes)
	}
}

// noteCut counts a connection the front ended (a frame over the cap, or not ZMTP 3 with the
// NULL mechanism) and logs it at WARN, at most once a minute per peer and reason.
func (s *Server) noteCut(what, ip, reason string, err error) {
	s.connsCut.WithLabelValues(reason).Inc()
	if n, logIt := s.cutLog.Due(ip+"|"+reason, time.Now()); logIt {
		s.log.Warn("lmcache: ended a connection whose peer sent a frame over --lmcache-max-frame-bytes or did not speak ZMTP 3 with the NULL mechanism (LMCache's pyzmq sockets do both); if it is an LMCache worker, check its version and raise --lmcache-max-frame-bytes if its frames are larger (logged once a minute per peer and reason; see loadaware_lmcache_peer_conns_cut_total)",
			"peer", ip, "socket", what, "reason", reason, "err", err, "cut", n)
	}
}

// FrontConnBytes is what the ZMTP front holds for one connection besides its message: its
// read and write buffers (32 KiB each), a command's (4 KiB), the copy of libzmq's replies
// (4 KiB) and its two goroutines' stacks, rounded up.
const FrontConnBytes = 96 << 10

// ConnectionBoundBytes is the most one peer connection to one socket can make the controller
// hold behind the ZMTP front, with queue messages queued (RcvHWM) and a frame cap of
// frameBytes: the queue, the message libzmq is reading and the one the front is reading,
// each of at most frameBytes in all and maxMessageFrames frames of libzmq's 64-byte message
// headers, and the front's own buffers.
func ConnectionBoundBytes(queue int, frameBytes int64) int64 {
	return int64(queue+2)*(frameBytes+maxMessageFrames*64) + FrontConnBytes
}

// noteConnRefused counts a connection ended for its IP's cap and logs it at WARN, at most once
// a minute per socket and IP.
func (s *Server) noteConnRefused(what, ip string, held int) {
	s.connsRefused.Inc()
	if n, logIt := s.connLog.Due(what+"|"+ip, time.Now()); logIt {
		s.log.Warn("lmcache: ended a connection from a peer IP that already holds the most connections to this socket (each can make libzmq hold a queue of messages; an LMCache worker needs one); if it is an engine running more LMCache workers than that (one a tensor-parallel rank), raise --lmcache-max-peer-conns (logged once a minute per peer and socket; see loadaware_lmcache_peer_conns_refused_total)",
			"peer", ip, "socket", what, "held", held, "refused", n, "max_peer_conns", s.cfg.MaxPeerConns)
	}
}
