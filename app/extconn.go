package app

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/tokenbucket"
)

// extConns is the open ext_proc connections by remote address: filed by extListener at
// Accept, removed at Close. A stream finds its connection here by its peer address
// (connRate.pacer, streamRate.tap), the one registry both per-connection limits share.
type extConns struct {
	mu   sync.Mutex
	open map[connKey]*extConn // by keyOf(RemoteAddr())
}

func newExtConns() *extConns { return &extConns{open: map[connKey]*extConn{}} }

// connKey is a remote address as a map key. A TCP address, the ext_proc port's, is its
// netip.AddrPort, which costs no allocation: streamRate.tap looks up every new stream's
// connection, and TCPAddr.String builds a new string each time. Any other address is its
// text.
type connKey struct {
	tcp   netip.AddrPort
	other string
}

// keyOf is addr's connKey. An address that wraps another (h2gate's carries its
// connection) is keyed by the one it wraps.
func keyOf(addr net.Addr) connKey {
	for {
		u, ok := addr.(interface{ Unwrap() net.Addr })
		if !ok {
			break
		}
		addr = u.Unwrap()
	}
	if t, ok := addr.(*net.TCPAddr); ok {
		return connKey{tcp: t.AddrPort()}
	}
	return connKey{other: addr.String()}
}

// byAddr returns the open connection from addr, or nil.
func (r *extConns) byAddr(addr net.Addr) *extConn {
	if addr == nil {
		return nil
	}
	key := keyOf(addr)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.open[key]
}

// extListener wraps every accepted ext_proc connection once, in an extConn carrying the
// limits that are on (a nil read or stream is off), and files it in conns.
type extListener struct {
	net.Listener
	conns  *extConns
	read   *connRate   // nil: reads are not rate-limited
	stream *streamRate // nil: streams are not rate-limited
}

func (l *extListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ec := &extConn{Conn: c, conns: l.conns, read: l.read, stream: l.stream, key: keyOf(c.RemoteAddr()), peer: c.RemoteAddr().String(), closed: make(chan struct{})}
	if l.read != nil {
		ec.bytes = tokenbucket.New(l.read.rate, l.read.burst, now)
	}
	if l.stream != nil {
		ec.streams = newStreamBucket(l.stream.rate, l.stream.burst, now)
	}
	l.conns.mu.Lock()
	l.conns.open[ec.key] = ec
	l.conns.mu.Unlock()
	return ec, nil
}

// extConn is an accepted ext_proc connection and its per-connection limits, under one
// mutex:
//
//   - with read set, a token bucket of the bytes read from it (decision 0710): every Read
//     draws on it; past one largest body below full, its large-body streams wait (Delay,
//     the extproc.Pacer; decision 1183); past one burst in debt, Read itself waits (owed);
//   - with stream set, a bucket of streams (decision 1185): streamRate.tap admits or
//     refuses each new stream from it, and after a refusal the next Read waits until the
//     connection could open a stream again.
//
// Read waits first for the stream limit, then for the read rate, then reads and draws the
// bytes read. A limit that is off costs nothing. Close ends any wait and unfiles the
// connection.
type extConn struct {
	net.Conn
	conns  *extConns
	read   *connRate   // nil: the read rate is off; bytes and slowed are unused
	stream *streamRate // nil: the stream rate is off; streams is unused
	key    connKey     // keyOf(RemoteAddr()), its key in conns
	peer   string      // RemoteAddr().String(), for the logs

	mu      sync.Mutex
	bytes   tokenbucket.Bucket
	slowed  bool
	streams streamBucket
	closed  chan struct{}
	closing sync.Once
}

func (c *extConn) Read(p []byte) (int, error) {
	if c.stream != nil {
		var wait time.Duration
		c.mu.Lock()
		if c.streams.refused { // else no wait: spare the clock read
			wait = c.streams.wait(time.Now())
		}
		c.mu.Unlock()
		if wait > 0 {
			c.stream.waited.Add(wait.Seconds())
			c.sleep(wait)
		}
	}
	if c.read == nil {
		return c.Conn.Read(p)
	}
	if wait := c.owed(-c.read.burst); wait > 0 {
		c.sleep(wait)
	}
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.bytes.Take(float64(n))
	c.mu.Unlock()
	return n, err
}

// sleep waits d or until the connection is closed.
func (c *extConn) sleep(d time.Duration) {
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-c.closed:
		t.Stop()
	}
}

// admit takes a stream from the connection's bucket of streams and reports whether there
// was one. Only with stream set.
func (c *extConn) admit() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams.admit(time.Now())
}

// Delay implements extproc.Pacer: the time for the bucket of read bytes to refill to one
// largest body below full. A wait while the bucket is not in debt is counted in
// bodyWaits. Only with read set.
func (c *extConn) Delay() time.Duration {
	wait, tokens := c.owedAt(c.read.burst - c.read.bodyBurst)
	if wait > 0 && tokens >= 0 {
		c.read.bodyWaits.Inc()
	}
	return wait
}

// owed refills the bucket of read bytes to now and returns how long it takes to bring it
// back up to floor; a wait is counted, and the connection's first is noted. Only with read
// set.
func (c *extConn) owed(floor float64) time.Duration {
	wait, _ := c.owedAt(floor)
	return wait
}

// owedAt is owed, also returning what the bucket held before the wait.
func (c *extConn) owedAt(floor float64) (time.Duration, float64) {
	c.mu.Lock()
	c.bytes.Refill(time.Now())
	wait, tokens := c.bytes.Until(floor), c.bytes.Tokens()
	first := wait > 0 && !c.slowed
	if first {
		c.slowed = true
	}
	c.mu.Unlock()
	if wait > 0 {
		c.read.waited.Add(wait.Seconds())
	}
	if first {
		c.read.note(c)
	}
	return wait, tokens
}

// Close ends any wait of Read, removes the connection from conns (once) and closes it.
func (c *extConn) Close() error {
	c.closing.Do(func() {
		close(c.closed)
		c.conns.mu.Lock()
		if c.conns.open[c.key] == c {
			delete(c.conns.open, c.key)
		}
		c.conns.mu.Unlock()
	})
	return c.Conn.Close()
}
