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
	pub       *kvevents.Publisher
	keys      sim.KeyFunc
	chunk     int
	chunks    map[int64]kvChunk // chunk key -> its content, learnt from arriving prompts
	published atomic.Int64      // batches sent
}

type kvChunk struct {
	tokens    []uint32
	parent    int64
	hasParent bool
}

func startKVPub(ip string, c KVEventsConfig, keys sim.KeyFunc, chunk int) (*kvPub, error) {
	cfg := kvevents.PublisherConfig{Addr: net.JoinHostPort(ip, strconv.Itoa(c.Port)), Layout: c.Layout, DPRank: 0}
	if !c.NoReplay {
		cfg.ReplayAddr = net.JoinHostPort(ip, strconv.Itoa(c.ReplayPort))
	}
	p, err := kvevents.NewPublisher(cfg)
	if err != nil {
		return nil, fmt.Errorf("live: KV events publisher on %s: %w", ip, err)
	}
	return &kvPub{pub: p, keys: keys, chunk: chunk, chunks: map[int64]kvChunk{}}, nil
}

// learn records the content of a prompt's full chunks, so that their stores can be
// published with their tokens.
func (k *kvPub) learn(tokens []uint32) {
	if k == nil {
		return
	}
	ks := k.keys(tokens)
	for i, key := range ks {
		if (i+1)*k.chunk > len(tokens) {
			break
		}
		if _, ok := k.chunks[key]; !ok {
			c := kvChunk{tokens: tokens[i*k.chunk : (i+1)*k.chunk]}
			if i > 0 {
				c.parent, c.hasParent = ks[i-1], true
			}
			k.chunks[key] = c
		}
	}
}

// publish sends one step's CPU-tier changes as one batch.
func (k *kvPub) publish(evs []sim.KVEvent, log *slog.Logger) {
	if k == nil || len(evs) == 0 {
		return
	}
	out := make([]kvevents.Event, 0, len(evs))
	for _, ev := range evs {
		if !ev.Admit {
			out = append(out, kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: []uint64{uint64(ev.Key)}, Medium: "CPU"})
			continue
		}
		c, ok := k.chunks[ev.Key]
		if !ok {
			continue // a partial chunk
		}
		out = append(out, kvevents.Event{Kind: kvevents.BlockStored, Hashes: []uint64{uint64(ev.Key)}, Parent: uint64(c.parent),
			HasParent: c.hasParent, Tokens: c.tokens, BlockSize: k.chunk, Medium: "CPU"})
	}
	if _, err := k.pub.Publish(out); err != nil {
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

// KVEventsAddr is the engine's KV events PUB address ("" without KVEvents).
func (e *Engine) KVEventsAddr() string {
	if e.kv == nil {
		return ""
	}
	return e.kv.pub.Addr()
}

// KVEventsReplayAddr is the engine's KV events replay address ("" without one).
func (e *Engine) KVEventsReplayAddr() string {
	if e.kv == nil {
		return ""
	}
	return e.kv.pub.ReplayAddr()
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
