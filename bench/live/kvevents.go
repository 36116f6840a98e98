package live

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/kvpublish"
	"github.com/loadaware/loadaware-epp/bench/sim"
	"github.com/loadaware/loadaware-epp/kvevents"
)

// KVEventsConfig makes an engine publish vLLM KV cache events for its LMCache CPU tier,
// as LMCache's multi-process mode does (medium "CPU", LMCache#5076): a BlockStored for
// each stored chunk (block_size = the chunk size, the engine hash = the chunk key, the
// parent = the previous chunk's key) and a BlockRemoved for each evicted one, one batch
// per engine step with events, on a real PUB socket on the engine's IP. A prompt's
// trailing partial chunk is not published: vLLM's format carries full blocks only, so
// the LMCache source credits up to ChunkSize-1 more tokens on an exact repeat.
type KVEventsConfig struct {
	Port       int  // PUB port on the engine's IP; 0: a free port (every engine of a fleet must use the same)
	ReplayPort int  // replay ROUTER port on the engine's IP; 0: a free port
	NoReplay   bool // no replay socket
	Layout     kvevents.Layout
}

// kvPub is the engine's KV events publisher. learn and publish run on the driver goroutine.
type kvPub struct {
	pub       *kvpublish.Publisher
	keys      sim.KeyFunc
	events    *experiment.ChunkEvents // chunk contents, learnt from arriving prompts
	published atomic.Int64            // batches sent
}

func startKVPub(ip string, c KVEventsConfig, keys sim.KeyFunc, chunk int) (*kvPub, error) {
	cfg := kvpublish.PublisherConfig{Addr: net.JoinHostPort(ip, strconv.Itoa(c.Port)), Layout: c.Layout, DPRank: 0}
	if !c.NoReplay {
		cfg.ReplayAddr = net.JoinHostPort(ip, strconv.Itoa(c.ReplayPort))
	}
	p, err := kvpublish.NewPublisher(cfg)
	if err != nil {
		return nil, fmt.Errorf("live: KV events publisher on %s: %w", ip, err)
	}
	return &kvPub{pub: p, keys: keys, events: experiment.NewChunkEvents(chunk)}, nil
}

// learn records the content of a prompt's full chunks, so that their stores can be
// published with their tokens.
func (k *kvPub) learn(tokens []uint32) {
	if k == nil {
		return
	}
	k.events.Learn(tokens, k.keys(tokens))
}

// publish sends one step's CPU-tier changes as one batch.
func (k *kvPub) publish(evs []sim.KVEvent, log *slog.Logger) {
	if k == nil || len(evs) == 0 {
		return
	}
	if _, err := k.pub.Publish(k.events.Events(evs)); err != nil {
		log.Error("live: KV events batch not published: the picker's vLLM events index will miss it", "err", err)
	}
	k.published.Add(1)
}

func (k *kvPub) close() error {
	if k == nil {
		return nil
	}
	return k.pub.Close()
}

// KVBatches is how many KV event batches the engine has published.
func (e *Engine) KVBatches() int64 {
	if e.kv == nil {
		return 0
	}
	return e.kv.published.Load()
}

// kvEventsPorts picks the PUB and replay ports every engine of a run binds on its own IP
// (the picker subscribes to one port on every endpoint IP): ports free on the first IP.
func kvEventsPorts(ip string) (*KVEventsConfig, error) {
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, fmt.Errorf("live: find a free port for the KV events on %s: %w", ip, err)
		}
		ports[i] = l.Addr().(*net.TCPAddr).Port
		defer l.Close()
	}
	return &KVEventsConfig{Port: ports[0], ReplayPort: ports[1]}, nil
}

// awaitSubscribed waits until the picker's KV events subscriber has finished its first
// replays and every engine sees its subscription (nothing published before is lost).
func (f *liveFleet) awaitSubscribed(ctx context.Context) error {
	if !f.kv {
		return nil
	}
	select {
	case <-f.app.KVEventsSubscriber.Ready():
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, e := range f.engines {
		if err := e.WaitKVSubscribed(); err != nil {
			return err
		}
	}
	return nil
}

// kvDelivered reports whether the picker has applied every KV event batch the engines
// published (true without KV events).
func (f *liveFleet) kvDelivered() bool {
	if !f.kv {
		return true
	}
	var sent int64
	for _, e := range f.engines {
		sent += e.KVBatches()
	}
	mfs, err := f.app.Registry.Gather()
	if err != nil {
		return false
	}
	applied := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "loadaware_kvevents_batches_total" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "outcome" && l.GetValue() == "applied" {
					applied += m.GetCounter().GetValue()
				}
			}
		}
	}
	return applied >= float64(sent)
}

// WaitKVSubscribed waits for the picker's subscription to the engine's KV events.
func (e *Engine) WaitKVSubscribed() error {
	if e.kv == nil {
		return errors.New("live: the engine publishes no KV events")
	}
	return e.kv.pub.WaitSubscribed(10 * time.Second)
}
