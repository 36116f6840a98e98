// Package kvpublish is the engine side of vLLM's KV events protocol, as vLLM's
// ZmqEventPublisher: a PUB socket numbering batches and a ROUTER answering replays. It
// stands in for engines in tests and the benchmark's simulated engines; the picker
// never imports it.
package kvpublish

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/kvevents"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/loadaware/loadaware-epp/zmqwait"
	zmq "github.com/pebbe/zmq4"
)

// PublisherConfig configures a Publisher. Addresses are "host:port"; port 0 picks a free one.
type PublisherConfig struct {
	Addr       string // PUB address (vLLM's endpoint, default tcp://*:5557)
	ReplayAddr string // ROUTER replay address (vLLM's replay_endpoint); empty: no replay
	Topic      string
	Layout     kvevents.Layout
	DPRank     int // data_parallel_rank in every batch; -1: None
	// BufferSteps is how many batches replay can resend (vLLM's buffer_steps); 0 means 10000.
	BufferSteps int
	// ReplayWithoutTopic answers replays as vLLM before vllm#45177 did: [id, "", seq, payload].
	ReplayWithoutTopic bool
	Now                func() time.Time // batch timestamps; nil: time.Now
}

// Publisher is the engine side of the protocol, as vLLM's ZmqEventPublisher: every
// Publish is one batch on the PUB socket with the next sequence number, kept for replay.
// It exists for tests and the benchmark's simulated engines. Its methods are safe for
// concurrent use.
type Publisher struct {
	cfg        PublisherConfig
	zctx       *zmq.Context
	addr, rddr string

	mu   sync.Mutex
	pub  *zmq.Socket
	seq  int64
	ring []sent // the last BufferSteps batches (and up to as many older ones), oldest first
	// replayWait is the replay socket's waiter (nil without replay): its goroutine waits
	// for requests on the network poller, never in a blocking cgo receive (package zmqwait).
	replayWait *zmqwait.Waiter
	wg         sync.WaitGroup
	once       sync.Once
	err        error
}

type sent struct {
	seq     int64
	payload []byte
}

// NewPublisher binds the sockets.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = 10000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	zctx, err := zmq.NewContext()
	if err != nil {
		return nil, fmt.Errorf("kvevents: zeromq context: %w", err)
	}
	p := &Publisher{cfg: cfg, zctx: zctx}
	var router *zmq.Socket
	fail := func(err error) (*Publisher, error) {
		for _, so := range []*zmq.Socket{p.pub, router} {
			if so != nil {
				so.Close()
			}
		}
		zctx.Term()
		return nil, err
	}
	// XPUB is PUB on the wire; it also reports subscriptions, so WaitSubscribed can
	// wait for a subscriber instead of sleeping past ZeroMQ's slow-joiner window.
	if p.pub, p.addr, err = bindSocket(zctx, zmq.XPUB, cfg.Addr); err != nil {
		return fail(fmt.Errorf("kvevents: publisher: %w", err))
	}
	if cfg.ReplayAddr != "" {
		if router, p.rddr, err = bindSocket(zctx, zmq.ROUTER, cfg.ReplayAddr); err != nil {
			return fail(fmt.Errorf("kvevents: publisher replay: %w", err))
		}
		if p.replayWait, err = zmqwait.New(router); err != nil {
			return fail(fmt.Errorf("kvevents: publisher replay: %w", err))
		}
		p.wg.Go(func() { p.serveReplay(router, p.replayWait) })
	}
	return p, nil
}

func bindSocket(zctx *zmq.Context, kind zmq.Type, addr string) (*zmq.Socket, string, error) {
	host, port, ok := strings.Cut(strings.TrimPrefix(addr, "tcp://"), ":")
	if !ok {
		return nil, "", fmt.Errorf("address %q is not host:port", addr)
	}
	if port == "0" {
		port = "*"
	}
	if host == "" {
		host = "*"
	}
	so, err := zctx.NewSocket(kind)
	if err != nil {
		return nil, "", err
	}
	err = so.SetLinger(0)
	if err == nil && kind == zmq.XPUB {
		err = so.SetXpubVerbose(1)
	}
	if err == nil {
		err = so.SetSndhwm(100000)
	}
	if err != nil {
		so.Close()
		return nil, "", err
	}
	if err := so.Bind("tcp://" + host + ":" + port); err != nil {
		so.Close()
		return nil, "", fmt.Errorf("bind %s: %w (is the port in use?)", addr, err)
	}
	last, err := so.GetLastEndpoint()
	if err != nil {
		so.Close()
		return nil, "", err
	}
	return so, strings.TrimPrefix(last, "tcp://"), nil
}

// Addr is the bound PUB address ("ip:port").
func (p *Publisher) Addr() string { return p.addr }

// ReplayAddr is the bound replay address, or "" without replay.
func (p *Publisher) ReplayAddr() string { return p.rddr }

// WaitSubscribed waits up to timeout for the next subscription to the PUB socket.
func (p *Publisher) WaitSubscribed(timeout time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pub == nil {
		return errors.New("kvevents: publisher closed")
	}
	poller := zmq.NewPoller()
	poller.Add(p.pub, zmq.POLLIN)
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("kvevents: no subscriber on %s within %v", p.addr, timeout)
		}
		polled, err := poller.Poll(left)
		if err != nil {
			return err
		}
		if len(polled) == 0 {
			continue
		}
		msg, err := p.pub.RecvBytes(0)
		if err != nil {
			return err
		}
		if len(msg) > 0 && msg[0] == 1 {
			return nil
		}
	}
}

// Publish sends events as the next batch and returns its sequence number.
func (p *Publisher) Publish(events []kvindex.Event) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.send(p.seq, kvevents.Encode(kvindex.Batch{TS: float64(p.cfg.Now().UnixNano()) / 1e9, Events: events, DPRank: p.cfg.DPRank}, p.cfg.Layout))
}

// Skip advances the sequence number without sending: the batch is lost for the
// subscribers (as when the PUB socket's high-water mark drops it) but kept for replay.
func (p *Publisher) Skip(events []kvindex.Event) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := p.seq
	p.keep(seq, kvevents.Encode(kvindex.Batch{TS: float64(p.cfg.Now().UnixNano()) / 1e9, Events: events, DPRank: p.cfg.DPRank}, p.cfg.Layout))
	p.seq++
	return seq
}

// SendRaw sends a payload as-is with the next sequence number (for bad-frame tests).
func (p *Publisher) SendRaw(payload []byte) (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.send(p.seq, payload)
}

// Restart forgets the sequence and the replay buffer, as a restarted engine does.
func (p *Publisher) Restart() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq, p.ring = 0, nil
}

func (p *Publisher) send(seq int64, payload []byte) (int64, error) {
	if p.pub == nil {
		return 0, errors.New("kvevents: publisher closed")
	}
	p.keep(seq, payload)
	p.seq++
	if _, err := p.pub.SendMessage([]byte(p.cfg.Topic), kvevents.SeqFrame(seq), payload); err != nil {
		return seq, fmt.Errorf("kvevents: publish batch %d: %w", seq, err)
	}
	return seq, nil
}

func (p *Publisher) keep(seq int64, payload []byte) {
	if len(p.ring) >= 2*p.cfg.BufferSteps { // amortized: copy once every BufferSteps batches
		p.ring = append([]sent(nil), p.ring[len(p.ring)-p.cfg.BufferSteps:]...)
	}
	p.ring = append(p.ring, sent{seq, payload})
}

// serveReplay answers [id, "", start_seq] with every kept batch from start_seq, then the
// end marker, as vLLM's _service_replay does.
func (p *Publisher) serveReplay(so *zmq.Socket, w *zmqwait.Waiter) {
	defer so.Close()
	for {
		var req [][]byte
		err := w.Receive(time.Time{}, func(f zmq.Flag) (err error) {
			req, err = so.RecvMessageBytes(f)
			return err
		})
		if err != nil {
			if isTerm(err) || errors.Is(err, zmqwait.ErrClosed) {
				return
			}
			continue
		}
		if len(req) != 3 || len(req[2]) != 8 {
			continue
		}
		id, start := req[0], int64(binary.BigEndian.Uint64(req[2]))
		p.mu.Lock()
		var out []sent
		for _, s := range p.ring[max(0, len(p.ring)-p.cfg.BufferSteps):] {
			if s.seq >= start {
				out = append(out, s)
			}
		}
		p.mu.Unlock()
		out = append(out, sent{kvevents.EndOfReplay, []byte{}})
		for _, s := range out {
			frames := [][]byte{id, {}, []byte(p.cfg.Topic), kvevents.SeqFrame(s.seq), s.payload}
			if p.cfg.ReplayWithoutTopic {
				frames = [][]byte{id, {}, kvevents.SeqFrame(s.seq), s.payload}
			}
			if _, err := so.SendMessage(frames); err != nil && isTerm(err) {
				return
			}
		}
	}
}

// Close closes the sockets. It is idempotent.
func (p *Publisher) Close() error {
	p.once.Do(func() {
		p.mu.Lock()
		p.pub.Close()
		p.pub = nil
		p.mu.Unlock()
		if p.replayWait != nil {
			p.replayWait.Close() // ends the replay goroutine's wait; it closes its socket
		}
		p.err = p.zctx.Term()
		p.wg.Wait()
	})
	return p.err
}

func isTerm(err error) bool {
	return errors.Is(err, zmq.ETERM) || zmq.AsErrno(err) == zmq.ETERM || errors.Is(err, zmq.ErrorSocketClosed) || errors.Is(err, zmq.ErrorContextClosed)
}
