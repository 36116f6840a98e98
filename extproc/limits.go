package extproc

import (
	"crypto/subtle"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// Defaults of Limits, sized for a 1 GiB pod: 256 MiB of buffered request bodies at most,
// whatever the number of streams.
const (
	DefaultMaxStreams       = 1024
	DefaultMaxBufferedBytes = 256 << 20
	DefaultIdleTimeout      = 30 * time.Second
	// DefaultUnpacedBodyBytes: a chat or completion request of up to about 16k tokens of
	// text or 10k token ids, and most responses, never wait on their connection's rate.
	DefaultUnpacedBodyBytes = 64 << 10
)

// Limits bound what ext_proc streams may hold. Every refusal is an ImmediateResponse,
// counted in loadaware_extproc_overload_total{reason}; none is a stream error.
type Limits struct {
	// MaxStreams caps concurrent ext_proc streams. A stream over the cap is answered 503
	// at its request headers and ends. 0 means DefaultMaxStreams.
	MaxStreams int
	// MaxBufferedBytes caps the request body bytes held across all streams while they
	// are read before routing. A body chunk that would go over it is answered 503 (the
	// client may retry; nothing was booked). 0 means DefaultMaxBufferedBytes.
	MaxBufferedBytes int64
	// IdleTimeout is the longest wait for the next message while the request is read
	// (headers and body, before routing). Over it the request is answered 408. It does
	// not apply once the request is routed: an engine may take long to answer. 0 means
	// DefaultIdleTimeout.
	IdleTimeout time.Duration
	// UnpacedBodyBytes is how much of a stream's body (request and response together) is
	// processed without asking the connection's Pacer (Config.Pacer); past it, each chunk
	// waits the pacer's Delay. 0 means DefaultUnpacedBodyBytes.
	UnpacedBodyBytes int64
}

func (l *Limits) setDefaults() {
	if l.MaxStreams <= 0 {
		l.MaxStreams = DefaultMaxStreams
	}
	if l.MaxBufferedBytes <= 0 {
		l.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.UnpacedBodyBytes <= 0 {
		l.UnpacedBodyBytes = DefaultUnpacedBodyBytes
	}
}

// overloaded refuses the request at a resource limit: counted by reason, and logged at
// WARN at most once per reason every 10 s with the number refused since, so a flood does not
// become a log flood.
func (st *stream) overloaded(reason string, code typev3.StatusCode, kind, msg string) error {
	st.s.metrics.overload.WithLabelValues(reason).Inc()
	if n, ok := st.s.overloadLog.Due(reason, time.Now()); ok {
		st.s.cfg.Logger.Warn("requests refused at a resource limit (logged once per 10 s per limit; see loadaware_extproc_overload_total)",
			"limit", reason, "refused", n, "last_reason", msg, "request_id", st.requestID)
	}
	st.quiet = true
	return st.immediate(code, kind, msg)
}

// overloadLogPeriod is how often each limit's refusals are logged at most.
const overloadLogPeriod = 10 * time.Second

// budget is a shared byte allowance. take and give are safe for concurrent use.
type budget struct {
	max  int64
	used atomic.Int64
}

// take reserves n bytes; it reports false (and reserves nothing) when that would go over.
func (b *budget) take(n int64) bool {
	if b.used.Add(n) > b.max {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *budget) give(n int64) { b.used.Add(-n) }

// gate counts concurrent streams.
type gate struct {
	max int64
	n   atomic.Int64
}

// enter reports whether one more stream fits; the caller must leave either way.
func (g *gate) enter() bool { return g.n.Add(1) <= g.max }
func (g *gate) leave()      { g.n.Add(-1) }

// ExplainMode says which requests may get the x-loadaware-decision header.
type ExplainMode int

// The explain modes. The zero value is ExplainToken: the decision reveals endpoint IPs,
// loads and whether someone recently sent a prefix, so only the operator sees it.
const (
	ExplainToken ExplainMode = iota // requests carrying Authorization: Bearer <admin token>
	ExplainAll                      // every request that asks (x-loadaware-explain: 1)
	ExplainOff                      // none
)

// ParseExplainMode reads "token", "all" or "off".
func ParseExplainMode(s string) (ExplainMode, error) {
	switch strings.TrimSpace(s) {
	case "token", "":
		return ExplainToken, nil
	case "all":
		return ExplainAll, nil
	case "off":
		return ExplainOff, nil
	}
	return 0, fmt.Errorf("explain mode %q: use token (only requests with Authorization: Bearer <admin token>), all (every client) or off", s)
}

func (m ExplainMode) String() string {
	switch m {
	case ExplainAll:
		return "all"
	case ExplainOff:
		return "off"
	}
	return "token"
}

// explainAllowed reports whether a request that asked for an explanation gets one, given
// its Authorization header value.
func explainAllowed(mode ExplainMode, adminToken, authorization string) bool {
	switch mode {
	case ExplainAll:
		return true
	case ExplainOff:
		return false
	}
	if adminToken == "" {
		return false
	}
	got, ok := strings.CutPrefix(authorization, "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(adminToken)) == 1
}
