// Package extproc is the Envoy external-processing (ext_proc) server of the endpoint
// picker: one gRPC stream per HTTP request, handled as an explicit state machine.
//
// It reads the request headers and the OpenAI body, asks a Picker for endpoints, and
// answers Envoy with the x-gateway-destination-endpoint header and the same value in the
// envoy.lb dynamic metadata, with the candidates' scores and the decision's reason beside it
// (metadata.go). It then passes the response through unchanged and releases
// the booking exactly once however the stream ends. Client errors become
// ImmediateResponses with a readable body, never gRPC errors. extproc is transport only:
// it makes no routing decision itself.
package extproc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/loadaware/loadaware-epp/picker"
	"github.com/loadaware/loadaware-epp/ratelog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Names of the GIE protocol.
const (
	DestinationHeader = "x-gateway-destination-endpoint"
	SubsetHint        = "x-gateway-destination-endpoint-subset"
	LBNamespace       = "envoy.lb"
	SubsetNamespace   = "envoy.lb.subset_hint"
	RequestIDHeader   = "x-request-id"
	ExplainHeader     = "x-loadaware-explain"
	DecisionHeader    = "x-loadaware-decision"
	// RankHeader pins a request to one data-parallel rank of the engine behind the
	// endpoint: vLLM's OpenAI server reads X-data-parallel-rank on completions and chat
	// (serving_engine.py _get_data_parallel_rank) and skips its own rank balancing.
	RankHeader         = "x-data-parallel-rank"
	MaxStreamedChunk   = 62000 // bytes per StreamedBodyResponse
	DefaultMaxBodySize = 16 << 20
)

// Picker is what the server needs of the decision engine: picker.Picker's PickInto, which
// decides into the caller's Decision and reuses its memory (see its ownership contract).
type Picker interface {
	PickInto(ctx context.Context, r picker.Request, d *picker.Decision) error
}

// Config configures a Server.
type Config struct {
	BodyMode      BodyMode // used when Envoy sends no protocol_config
	MaxBodyBytes  int64    // request bodies over this get 413; default DefaultMaxBodySize
	SessionHeader string   // default "x-user-id"
	Logger        *slog.Logger
	Registerer    prometheus.Registerer // nil: metrics are not registered
	OmitScores    bool                  // leave the candidates' scores and the reason out of the dynamic metadata

	Limits     Limits      // stream, buffered-byte and idle bounds; zero fields take the defaults
	Explain    ExplainMode // who may get the decision header; the zero value is ExplainToken
	AdminToken string      // the bearer token ExplainToken accepts; empty: nobody gets it

	// OnResponse, when set, is told the HTTP status of every routed request's response
	// (what Envoy saw from the first endpoint of the answer, or its own local reply such
	// as a 503 for a connect failure) and when that request was routed (time.Now at the
	// decision). It must be fast and must not block.
	OnResponse func(endpoint string, status int, decided time.Time)

	// Pacer, when set, gives a stream the Pacer of the connection it came on (from the
	// stream's context), or nil for none.
	Pacer func(ctx context.Context) Pacer

	// Received, when set, is told the wire length of every request or response body
	// message the stream of ctx has received, as soon as Recv returns it: the length of
	// the bytes decoded (the length in the message's gRPC prefix) under grpcbuf's codec,
	// else proto.Size of the message (the same for the canonical encoding Envoy sends).
	// The transport's gate (TakeBuffered) gives back what it took for the message.
	Received func(ctx context.Context, n int)
}

// A Pacer slows the large bodies of one ext_proc connection (decision 0710). Delay is how long
// a stream whose body has gone past Limits.UnpacedBodyBytes waits before each further body
// chunk (request or response) is processed: 0 while the connection is within its rate. A
// waiting stream does not receive, so gRPC stops renewing that stream's flow-control window
// (the connection's window is renewed as data arrives) and only that stream's sender blocks;
// the connection's small requests never queue behind its large ones. Delay must be safe for
// concurrent use.
type Pacer interface {
	Delay() time.Duration
}

// Server implements envoy.service.ext_proc.v3.ExternalProcessor.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	cfg     Config
	picker  Picker
	metrics *metrics
	bytes   *budget
	streams *gate
	// admitted counts the streams Admit let in, up to maxAdmitted.
	admitted    atomic.Int64
	maxAdmitted int64
	// overloadLog lets each limit's refusal line through once per overloadLogPeriod.
	overloadLog *ratelog.Limiter

	// decisions holds Decisions between streams, so a decision reuses the memory of an
	// earlier stream's (picker.PickInto) rather than allocating its own. A stream takes
	// one when it decides and puts it back when it ends, after releasing its booking;
	// nothing of a Decision is read after that.
	decisions sync.Pool
	// answers holds routingAnswers between streams: a stream takes one to send its routing
	// answer and puts it back once Send has returned.
	answers sync.Pool
	// idArrays holds *[]uint32 token-id arrays of at most maxKeptIDs between decisions: a
	// request with ids is decoded into one and it is put back once PickInto has returned
	// (picker.Request.Tokens is read only until then). No stream holds one while it waits
	// for its response, so the arrays add nothing to what live streams hold (decision 1200).
	idArrays sync.Pool
	// streamPool holds streams whose worker has ended, for Process to reuse.
	streamPool sync.Pool
	// bodyAnswers holds bodyAnswers between body chunks, the same way.
	bodyAnswers sync.Pool

	// handoff gives a stream to an idle worker goroutine (worker), whose stack has already
	// grown for the stream's work; with none idle, Process starts a worker.
	handoff chan *stream

	streamDone  func() // test hook: called after a stream's booking is released
	workerStart func() // test hook: called when Process starts a worker
	workerEnd   func() // test hook: called when an idle worker ends
}

// workerIdle is how long a worker waits for another stream before it ends. Under load the
// next stream comes within a millisecond; a worker idle for longer is not needed soon, and
// ending it lets the goroutines (and their 16 KiB stacks) go with the load.
const workerIdle = 50 * time.Millisecond

// worker runs st's conversation, then the conversations of the streams Process hands it,
// until none comes for workerIdle. A new goroutine's stack grows to growStack's reserve on
// its first stream (allocating and copying a 16 KiB stack); a worker that stays grows it
// once for all its streams, and spares the goroutine's start and end (decision 1198).
func (s *Server) worker(st *stream) {
	st.work()
	idle := time.NewTimer(workerIdle)
	for {
		select {
		case st = <-s.handoff:
			idle.Stop()
			st.work()
			idle.Reset(workerIdle)
		case <-idle.C:
			if s.workerEnd != nil {
				s.workerEnd()
			}
			return
		}
	}
}

// NewServer returns a Server that asks p for decisions.
func NewServer(p Picker, cfg Config) (*Server, error) {
	if p == nil {
		return nil, errors.New("extproc: NewServer needs a Picker")
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodySize
	}
	if cfg.SessionHeader == "" {
		cfg.SessionHeader = "x-user-id"
	}
	cfg.SessionHeader = strings.ToLower(cfg.SessionHeader)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Limits.setDefaults()
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, picker: p, metrics: m,
		bytes: &budget{max: cfg.Limits.MaxBufferedBytes}, streams: &gate{max: int64(cfg.Limits.MaxStreams)},
		maxAdmitted: int64(cfg.Limits.MaxStreams) + TransportSlack, overloadLog: ratelog.New(overloadLogPeriod),
		handoff: make(chan *stream)}, nil
}

// Process implements the ext_proc stream: one HTTP request.
//
// The stream is served by a worker goroutine of its own, which receives, decides and
// answers each message itself (no hand-over per message: decision 1122); an idle worker
// that served an earlier stream is reused (worker). Process only watches it:
// it returns when the worker ends, or, while the request is still being read, once no part
// of it has arrived for Limits.IdleTimeout; it then answers 408 itself and returns, which
// ends the gRPC stream and so fails the worker's pending Recv. The worker releases the
// booking and the stream's budget when it ends, in either case.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	// A stream whose worker has ended is reused by a later one, with its channel and timer
	// (three to five allocations a request fewer: decision 1175) and its decoder's parts
	// (about fifteen: decision 1198); token-id arrays are the server's (idArrays, 1200).
	st, _ := s.streamPool.Get().(*stream)
	if st == nil {
		st = &stream{done: make(chan error, 1)}
	}
	*st = stream{srv: srv, s: s, reqMode: s.cfg.BodyMode.envoy(), respMode: s.cfg.BodyMode.envoy(),
		done: st.done, idleTimer: st.idleTimer, msg: received{parts: st.msg.parts}, phase: awaitingHeaders,
		decision: &noDecision, lastRecv: time.Now()}
	if !s.streams.enter() {
		st.refuse = "overloaded"
	}
	select {
	case s.handoff <- st: // an idle worker runs it
	default:
		if s.workerStart != nil {
			s.workerStart()
		}
		go s.worker(st)
	}
	workerDone, err := st.watch()
	if err != nil {
		s.metrics.streamErrors.WithLabelValues(errKind(srv.Context(), err)).Inc()
		if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) {
			err = nil // the client or Envoy went away: nothing to answer
		} else {
			s.cfg.Logger.Warn("ext_proc stream ended with an error; the request's booking was released",
				"request_id", st.requestID, "err", err)
		}
	}
	if workerDone { // else the worker still holds st
		// Nothing of this request stays reachable: the decoder's parts are clear (released).
		*st = stream{done: st.done, idleTimer: st.idleTimer, msg: received{parts: st.msg.parts}}
		s.streamPool.Put(st)
	}
	return err
}

// watch waits for the worker to end and reports true (the worker has ended) and its error.
// While the request is being read, it answers 408 once no message has arrived for the idle
// timeout, moves the stream to timed-out (the worker then stops at its next message or
// failed Recv) and returns at once, with false.
func (st *stream) watch() (bool, error) {
	idleAfter := st.s.cfg.Limits.IdleTimeout
	if st.idleTimer == nil {
		st.idleTimer = time.NewTimer(idleAfter)
	} else {
		st.idleTimer.Reset(idleAfter) // stopped when its last stream ended: nothing stale is received
	}
	defer st.idleTimer.Stop()
	for {
		select {
		case err := <-st.done:
			return true, err
		case <-st.idleTimer.C:
		}
		st.mu.Lock()
		if wait := idleAfter - time.Since(st.lastRecv); wait > 0 && st.phase.reading() {
			st.mu.Unlock()
			st.idleTimer.Reset(wait)
			continue
		}
		if st.on(idle) != nil { // past reading (routed, or ended): a slow engine is waited for
			st.mu.Unlock()
			return true, <-st.done
		}
		err := st.overloaded("idle-timeout", typev3.StatusCode_RequestTimeout, "RequestTimeout",
			fmt.Sprintf("no part of the request arrived for %v while the picker was reading it (--stream-idle-timeout)", idleAfter))
		st.mu.Unlock()
		return false, err
	}
}

// errKind labels a stream error for the metrics.
func errKind(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil || status.Code(err) == codes.Canceled:
		return "canceled"
	case status.Code(err) == codes.InvalidArgument:
		return "protocol"
	case errors.Is(err, errSend):
		return "send"
	}
	return "recv"
}

var errSend = errors.New("ext_proc: send")
