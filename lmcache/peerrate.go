package lmcache

import (
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/tokenbucket"
)

// Defaults of the per-IP byte rate on the controller's sockets (decision 0707). An engine
// prefilling 50,000 tokens/s stores about 200 chunks of 256 tokens a second: with as many
// evicts, some 25 KB/s of ~60-byte messages. A full sync sends the CPU backend's keys,
// about 9 bytes each, in batches of 2,000 (18 KB) every 5 ms; 100 GiB of an 8B model's
// 32 MiB chunks is 3,200 keys. 1 MiB/s is 40 times the busy stream, and the 1 MiB burst
// lets a sync of about 110,000 keys through at once (larger ones go at the rate).
const (
	DefaultPeerRate  = 1 << 20 // bytes per second, per peer IP
	DefaultPeerBurst = 1 << 20 // bytes

	// maxPeerWait is the longest the controller stops reading for one message of a peer
	// over its rate. While it waits no socket peer is read (ZeroMQ's fair queue cannot
	// skip one), so this bounds the delay an engine over its rate adds to the others':
	// each still gets at least one message through per wait. At the default rate a
	// message of up to 52 KB (a 5,800-key sync batch) is paid for in one wait; larger
	// ones leave debt, and a peer deeper than the burst in debt is dropped.
	maxPeerWait = 50 * time.Millisecond

	maxPeerBuckets = 4096 // beyond it, buckets that are full (idle peers) are forgotten
)

// peerLimiter is a token bucket of bytes per peer IP. A message may take the bucket into
// debt down to -burst; the reader then waits for the debt to be repaid (at most
// maxPeerWait per message), so a peer sending faster than its rate is slowed to it and its
// own socket backs up to the high-water mark, blocking the sender. A message that would go
// deeper than -burst is dropped. Safe for concurrent use.
type peerLimiter struct {
	rate, burst float64 // rate <= 0: unlimited
	mu          sync.Mutex
	buckets     map[string]*tokenbucket.Bucket
}

func newPeerLimiter(rate, burst int64) *peerLimiter {
	return &peerLimiter{rate: float64(rate), burst: float64(burst), buckets: map[string]*tokenbucket.Bucket{}}
}

// admit charges n bytes received from ip at now. It returns how long the reader must
// wait before going on, and whether the message is to be applied (after the wait) or
// dropped (also after the wait, so that a peer sending only droppable messages is paced
// too).
func (l *peerLimiter) admit(ip string, n int, now time.Time) (wait time.Duration, apply bool) {
	if l == nil || l.rate <= 0 {
		return 0, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(ip, now)
	if b.Tokens()-float64(n) < -l.burst {
		return maxPeerWait, false
	}
	b.Take(float64(n))
	return min(b.Until(0), maxPeerWait), true
}

// charge charges n bytes the ZMTP front read from ip and dropped (a message over the
// bounds) at now, whatever the debt, and returns how long the front must stop reading that
// connection for the debt to be repaid. Unlike admit's, the wait is not capped: it stops
// only the one connection, not every peer. So the bytes a peer makes the front read and
// discard count against its rate as its applied messages do, and are read at most at its
// rate once its burst is spent.
func (l *peerLimiter) charge(ip string, n int64, now time.Time) time.Duration {
	if l == nil || l.rate <= 0 {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucket(ip, now)
	b.Take(float64(n))
	return b.Until(0)
}

// bucket returns ip's bucket refilled to now, making it if need be. Called with l.mu held.
func (l *peerLimiter) bucket(ip string, now time.Time) *tokenbucket.Bucket {
	b := l.buckets[ip]
	if b == nil {
		if len(l.buckets) >= maxPeerBuckets {
			l.forgetFull(now)
		}
		nb := tokenbucket.New(l.rate, l.burst, now)
		b = &nb
		l.buckets[ip] = b
	}
	b.Refill(now)
	return b
}

// forgetFull drops the buckets that have refilled by now: their peers are within their
// rate, and a new bucket starts full. Called with l.mu held.
func (l *peerLimiter) forgetFull(now time.Time) {
	for ip, b := range l.buckets {
		if b.FullAt(now) {
			delete(l.buckets, ip)
		}
	}
	if len(l.buckets) >= maxPeerBuckets { // all in debt at once (allow-from any): start over
		clear(l.buckets)
	}
}
