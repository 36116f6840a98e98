// Package h2gate admits gRPC messages against a byte budget as their HTTP/2 frames arrive,
// before grpc-go opens a stream's flow-control window to a message's length.
//
// grpc-go (v1.85) reads a message's 5-byte prefix and then asks its transport for the whole
// message: the transport sends a WINDOW_UPDATE opening the stream's window to the message's
// length, whatever the static window, and the handler sees nothing until the whole message
// is in (decision 1151). So every stream in Recv can make the process hold a message of up
// to the receive limit, and no handler can count it first. The gate sits between the
// connection and grpc-go's HTTP/2 transport (a credentials wrapper, so it sees plaintext
// under TLS too). It follows the client's frames as they pass; when a DATA frame completes
// the prefix of a message longer than Config.Threshold, it takes that length from the
// budget before grpc-go has read the prefix. A message the budget cannot take is refused:
// the gate rewrites its length to 0xFFFFFFFF, over any receive limit, so grpc-go fails that
// stream with ResourceExhausted without opening its window. Where some of the length's
// bytes were handed to grpc-go by an earlier read, the gate cannot rewrite them: it admits
// the message on a small overdraft (Config.Overdraft, beyond the budget) or, when that is
// spent too, closes the connection (a sender splitting 5-byte prefixes across reads while
// the budget is full). A taken length is given back when the handler reports the message received
// (Gate.Received), or when the stream or the connection ends.
package h2gate

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
)

// Config is a Gate's budget and bounds.
type Config struct {
	// Take reserves n bytes and reports whether it could; Give returns them. Both are
	// called concurrently.
	Take func(n int64) bool
	Give func(n int64)
	// Threshold: messages of at most this length pass without taking from the budget (a
	// stream's static window holds them; request headers are such messages).
	Threshold int64
	// MaxMessage is grpc-go's receive limit (grpc.MaxRecvMsgSize): longer messages are
	// refused by grpc-go itself before it reads them, so the gate lets them pass untaken.
	MaxMessage int64
	// Overdraft is what messages whose length came split across reads may take beyond
	// the budget, all connections together, when the budget cannot take them: such a
	// message can no longer be refused alone.
	Overdraft int64
	// Refused is called once per message refused; closed says the connection was closed
	// (the length was split across reads and the overdraft could not take it).
	Refused func(closed bool)
}

// Gate admits the messages of the connections its credentials wrap.
type Gate struct {
	cfg  Config
	over atomic.Int64 // taken on the overdraft
}

// held is a length a stream holds, from the budget or (over) from the overdraft.
type held struct {
	n    int64
	over bool
}

func (g *Gate) give(h held) {
	switch {
	case h.over:
		g.over.Add(-h.n)
	case h.n > 0:
		g.cfg.Give(h.n)
	}
}

// overdraw takes n from the overdraft, reporting whether it could.
func (g *Gate) overdraw(n int64) bool {
	if g.over.Add(n) > g.cfg.Overdraft {
		g.over.Add(-n)
		return false
	}
	return true
}

// New returns a Gate. Take, Give and Refused must be set.
func New(cfg Config) *Gate { return &Gate{cfg: cfg} }

// ErrRefused is what a connection's Read returns once the gate closed it.
var ErrRefused = errors.New("h2gate: a gRPC message over the byte budget, its length split across reads: connection closed")

// Creds wraps inner (TLS, or insecure.NewCredentials() for plaintext) so that the
// connections it hands to grpc-go pass through the gate.
func (g *Gate) Creds(inner credentials.TransportCredentials) credentials.TransportCredentials {
	return &creds{TransportCredentials: inner, g: g}
}

// Received gives back what the gate took for a message of wire length n that the handler
// of the stream of ctx has just received (the length in the message's prefix; for the
// canonical encoding Envoy sends, proto.Size of the decoded message). A length the gate did
// not take, or that no stream of the connection awaits, gives nothing back: what a stream
// still holds is given back when it ends.
func (g *Gate) Received(ctx context.Context, n int) {
	if int64(n) <= g.cfg.Threshold {
		return
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return
	}
	if a, ok := p.Addr.(remoteAddr); ok {
		a.c.received(int64(n))
	}
}

type creds struct {
	credentials.TransportCredentials
	g *Gate
}

func (c *creds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	return c.g.wrap(conn), info, nil
}

func (c *creds) Clone() credentials.TransportCredentials {
	return &creds{TransportCredentials: c.TransportCredentials.Clone(), g: c.g}
}

// remoteAddr is a gated connection's RemoteAddr: the peer's address (String is the same),
// carrying the connection so that Received finds it from a stream's peer.
type remoteAddr struct {
	net.Addr
	c *conn
}

// Unwrap is the connection's own address, the one its listener accepted it from.
func (a remoteAddr) Unwrap() net.Addr { return a.Addr }

// conn is a connection through the gate.
type conn struct {
	net.Conn
	g *Gate

	mu       sync.Mutex
	in, out  scanner
	streams  map[uint32]*stream
	spare    []*stream // records of ended streams, for the next ones (at most maxSpare)
	lastOpen uint32    // the highest stream id the client opened
	buf      []byte    // the buffer being scanned (Read's), for rewriting a length in it
	reads    uint64    // Reads scanned so far: a prefix byte's place in buf is valid in its own
	closed   bool
}

// stream is what the gate knows of one gRPC stream's messages from the client.
type stream struct {
	prefix [grpcPrefixLen]byte
	pos    [grpcPrefixLen]int    // where each prefix byte is in the buffer of the Read ...
	seq    [grpcPrefixLen]uint64 // ... whose conn.reads this is
	got    int                   // prefix bytes in
	left   int64                 // bytes of the current message still to come
	taken  held                  // taken for the current message
	dead   bool                  // refused: grpc-go fails it; its further bytes are not followed
	// waiting: lengths taken for messages whose bytes are all in, not yet Received.
	waiting []held
}

func (g *Gate) wrap(c net.Conn) net.Conn {
	return &conn{Conn: c, g: g, in: newScanner(true), out: newScanner(false), streams: map[uint32]*stream{}}
}

func (c *conn) RemoteAddr() net.Addr { return remoteAddr{Addr: c.Conn.RemoteAddr(), c: c} }

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		ok := true
		c.mu.Lock()
		if !c.closed { // once closed, nothing is held: bytes still read pass unscanned
			c.buf = p[:n]
			c.reads++
			ok = c.in.scan(p[:n], c)
			c.buf = nil
		}
		c.mu.Unlock()
		if !ok {
			c.Close()
			return 0, ErrRefused
		}
	}
	return n, err
}

func (c *conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if !c.closed {
		c.out.scan(p, c)
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// Close gives back everything the connection's streams hold.
func (c *conn) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		for id := range c.streams {
			c.ended(id)
		}
	}
	c.mu.Unlock()
	return c.Conn.Close()
}

// opened implements events (c.mu held).
func (c *conn) opened(id uint32) {
	if id <= c.lastOpen {
		return // trailers, or a stream that already ended
	}
	c.lastOpen = id
	var s *stream
	if n := len(c.spare); n > 0 {
		s, c.spare = c.spare[n-1], c.spare[:n-1]
	} else {
		s = new(stream)
	}
	c.streams[id] = s
}

// maxSpare bounds the ended streams' records a connection keeps for its next streams: a
// stream took one allocation of about 150 bytes, the gate's only one per request (decision
// 1196). A connection keeps what its busiest moments need, up to this many (about 10 KiB).
const maxSpare = 64

// data implements events (c.mu held): it follows the stream's messages, taking each long
// message's length from the budget when its prefix is complete.
func (c *conn) data(id uint32, b []byte, off int) bool {
	s := c.streams[id]
	if s == nil {
		return true // not open (ended, or refused at its headers): grpc-go drops it
	}
	for i := 0; i < len(b) && !s.dead; {
		if s.left > 0 {
			k := min(s.left, int64(len(b)-i))
			s.left -= k
			i += int(k)
			if s.left == 0 && s.taken.n > 0 {
				s.waiting = append(s.waiting, s.taken)
				s.taken = held{}
			}
			continue
		}
		s.prefix[s.got], s.pos[s.got], s.seq[s.got] = b[i], off+i, c.reads
		s.got++
		i++
		if s.got < grpcPrefixLen {
			continue
		}
		s.got = 0
		if !c.admit(s, int64(binary.BigEndian.Uint32(s.prefix[1:]))) {
			return false
		}
	}
	return true
}

// admit starts s's next message, of length n, whose prefix is complete (c.mu held): it
// takes n from the budget (or, for a length split across reads, the overdraft), or refuses
// the message. It reports false when the connection must close.
func (c *conn) admit(s *stream, n int64) bool {
	switch {
	case n > c.g.cfg.MaxMessage:
		s.dead = true // grpc-go refuses it unread
		return true
	case n <= c.g.cfg.Threshold:
		s.left = n
		return true
	case c.g.cfg.Take(n):
		s.taken, s.left = held{n: n}, n
		return true
	}
	split := s.seq[1] != c.reads // the length's bytes came in order: the first is the oldest
	if split && c.g.overdraw(n) {
		s.taken, s.left = held{n: n, over: true}, n
		return true
	}
	s.dead = true
	c.g.cfg.Refused(split)
	if split {
		return false
	}
	for _, p := range s.pos[1:] {
		c.buf[p] = 0xff
	}
	return true
}

// halfClosed implements events (c.mu held): a message the client ended without finishing
// will not come; what awaits the handler still does.
func (c *conn) halfClosed(id uint32) {
	if s := c.streams[id]; s != nil && s.taken.n > 0 {
		c.g.give(s.taken)
		s.taken, s.left = held{}, 0
	}
}

// ended implements events (c.mu held).
func (c *conn) ended(id uint32) {
	s := c.streams[id]
	if s == nil {
		return
	}
	c.g.give(s.taken)
	for _, h := range s.waiting {
		c.g.give(h)
	}
	delete(c.streams, id)
	if len(c.spare) < maxSpare {
		*s = stream{waiting: s.waiting[:0]}
		c.spare = append(c.spare, s)
	}
}

// received gives back one waiting length n of one of the connection's streams.
func (c *conn) received(n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.streams {
		for i, h := range s.waiting {
			if h.n == n {
				s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
				c.g.give(h)
				return
			}
		}
	}
}
