package live

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/loadaware/loadaware-epp/bench/lmworker"
	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/zmqwait"
	zmq "github.com/pebbe/zmq4"
)

// batchSize is the most messages an LMCache 0.3.9 worker pushes in one multipart message.
const batchSize = 50

// pusher is the worker side of an engine's LMCache controller channel: a ZeroMQ PUSH socket
// connected from the engine's IP to the picker's PULL address. Messages are queued without
// blocking the engine's driver and sent by one goroutine, which owns the socket, in
// multipart batches of up to batchSize frames in queue order.
type pusher struct {
	zctx *zmq.Context
	sock *zmq.Socket
	log  *slog.Logger

	mu    sync.Mutex
	queue [][]byte

	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}
	emitted atomic.Int64 // messages queued
	pushed  atomic.Int64 // messages the socket accepted
}

// startPusher connects a PUSH socket bound to ip (so the controller sees the engine's IP as
// the peer address) to pullAddr.
func startPusher(ip, pullAddr string, log *slog.Logger) (*pusher, error) {
	zctx, sock, err := lmworker.Dial(ip, pullAddr)
	if err != nil {
		return nil, fmt.Errorf("live: %w", err)
	}
	if err := sock.SetSndtimeo(100 * time.Millisecond); err != nil {
		return nil, errors.Join(fmt.Errorf("live: LMCache PUSH socket from %s: %w", ip, err), sock.Close(), zctx.Term())
	}
	p := &pusher{zctx: zctx, sock: sock, log: log, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go p.run()
	return p, nil
}

// enqueue encodes msg and queues it for sending.
func (p *pusher) enqueue(msg lmcache.Message) error {
	frame, err := lmcache.Encode(msg)
	if err != nil {
		return fmt.Errorf("live: encode %s: %w", msg.Tag(), err)
	}
	p.mu.Lock()
	p.queue = append(p.queue, frame)
	p.emitted.Add(1)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

// run sends the queue until quit; what is still queued then is dropped.
func (p *pusher) run() {
	defer close(p.done)
	defer p.sock.Close()
	for {
		select {
		case <-p.quit:
			return
		case <-p.wake:
		}
		for {
			p.mu.Lock()
			n := min(len(p.queue), batchSize)
			batch := make([][]byte, n)
			copy(batch, p.queue)
			p.queue = p.queue[n:]
			p.mu.Unlock()
			if n == 0 {
				break
			}
			if !p.send(batch) {
				return
			}
		}
	}
}

// send pushes one batch, retrying while the socket is full or not yet connected; it returns
// false when quit closed first.
func (p *pusher) send(batch [][]byte) bool {
	for {
		_, err := p.sock.SendMessage(batch)
		switch {
		case err == nil:
			p.pushed.Add(int64(len(batch)))
			return true
		case zmqwait.IsAgain(err): // the socket is full or not yet connected
			select {
			case <-p.quit:
				return false
			default:
			}
		default:
			p.log.Error("live: LMCache batch not pushed: the picker's index will miss it", "messages", len(batch), "err", err)
			return true
		}
	}
}

// close stops the sender, closes the socket and terminates the context.
func (p *pusher) close() error {
	close(p.quit)
	<-p.done
	return p.zctx.Term()
}
