package replica

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/prometheus/client_golang/prometheus"
)

// Gate is the lmcache.IngestFunc of a picker whose index is shared or persisted. It
// orders every write to the index (frames from the engines, from peers, a snapshot or a
// state file being applied, an export being taken), holds the engines' frames until the
// index is warm (a snapshot or a state file applied first, so an older copy never
// overwrites newer frames), hands applied frames to the replica that publishes them, and
// drops an instance restored from a snapshot or file once its engine speaks as another
// instance id. Create it with NewGate; it is safe for concurrent use.
type Gate struct {
	idx   *lmcache.Index
	now   func() time.Time
	warm  chan struct{}
	once  sync.Once
	mu    sync.Mutex // serialises writes to idx through the gate
	after func(peer string, frames [][]byte)

	restored map[string]restoredInstance // engine IP -> what a snapshot or file restored there
	met      *metrics
}

type restoredInstance struct {
	id      string
	workers []int
}

// NewGate returns a gate for idx that holds the engines' frames until Open. reg
// (optional) receives the metrics of the gate and of the Replica or StateFile using it.
func NewGate(idx *lmcache.Index, reg prometheus.Registerer, now func() time.Time) (*Gate, error) {
	if idx == nil {
		return nil, errors.New("replica: NewGate needs the LMCache index")
	}
	if now == nil {
		now = time.Now
	}
	met, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Gate{idx: idx, now: now, warm: make(chan struct{}), restored: map[string]restoredInstance{}, met: met}, nil
}

// Open lets the engines' frames through: the index is warm. Calls after the first do nothing.
func (g *Gate) Open() { g.once.Do(func() { close(g.warm) }) }

// Warm is closed once Open was called.
func (g *Gate) Warm() <-chan struct{} { return g.warm }

// Ingest implements lmcache.IngestFunc: it waits until the gate is open, then applies the
// frames and hands them to the publisher when at least one was applied.
func (g *Gate) Ingest(peer string, frames [][]byte, apply func() bool) {
	<-g.warm
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checkRestored(peer, frames)
	if apply() && g.after != nil {
		g.after(peer, frames)
	}
}

// applyFramesLocked applies frames from peer (an engine's IP, as a peer replica or a snapshot
// names it), with the gate's lock held.
func (g *Gate) applyFramesLocked(peer string, frames [][]byte) int {
	g.checkRestored(peer, frames)
	return g.idx.ApplyFrames(frames, peer, g.now())
}

// restoreLocked applies frames of a snapshot or state file and remembers the instances they
// register, with the gate's lock held.
func (g *Gate) restoreLocked(peer string, frames [][]byte) int {
	for _, f := range frames {
		m, err := lmcache.Decode(f)
		if err != nil {
			continue
		}
		var r lmcache.RegisterMsg
		switch v := m.(type) {
		case lmcache.RegisterMsg:
			r = v
		case lmcache.HeartbeatMsg:
			r = lmcache.RegisterMsg(v)
		default:
			continue
		}
		ip := canonIP(r.IP)
		ri := g.restored[ip]
		if ri.id != r.InstanceID {
			ri = restoredInstance{id: r.InstanceID}
		}
		ri.workers = append(ri.workers, r.WorkerID)
		g.restored[ip] = ri
	}
	return g.idx.ApplyFrames(frames, peer, g.now())
}

// checkRestored drops the instance restored on peer's IP when frames name another
// instance id (the engine restarted as a new instance while this picker was away), and
// forgets the restored instance once its engine confirms it. Called with g.mu held.
func (g *Gate) checkRestored(peer string, frames [][]byte) {
	if len(g.restored) == 0 {
		return
	}
	ip := canonIP(peer)
	ri, ok := g.restored[ip]
	if !ok {
		return
	}
	for _, f := range frames {
		m, err := lmcache.Decode(f)
		if err != nil {
			continue
		}
		id, _, ok := lmcache.InstanceOf(m)
		if !ok || id == "" {
			continue
		}
		delete(g.restored, ip)
		if id == ri.id {
			return
		}
		for _, w := range ri.workers {
			_ = g.idx.Apply(lmcache.DeRegisterMsg{InstanceID: ri.id, WorkerID: w, IP: ip}, g.now())
		}
		g.met.discarded.Inc()
		return
	}
}

// exportLocked writes the index as KindFrames chunks of at most chunkBytes (Seq 0), with
// the gate's lock held.
func (g *Gate) exportLocked(origin uint64, chunkBytes int, emit func([]byte) error) error {
	var frames [][]byte
	var peer string
	size := 0
	flush := func() error {
		if len(frames) == 0 {
			return nil
		}
		b := AppendEncode(nil, Message{Kind: KindFrames, Origin: origin, Peer: peer, Frames: frames})
		frames, size = frames[:0], 0
		return emit(b)
	}
	return errorsJoin(g.idx.Export(func(p string, msgs []lmcache.Message) error {
		if p != peer {
			if err := flush(); err != nil {
				return err
			}
			peer = p
		}
		for _, m := range msgs {
			f, err := lmcache.Encode(m)
			if err != nil {
				return err
			}
			if size+len(f) > chunkBytes {
				if err := flush(); err != nil {
					return err
				}
			}
			frames = append(frames, f)
			size += len(f) + 8
		}
		return nil
	}), flush)
}

// errorsJoin returns err, else the result of then.
func errorsJoin(err error, then func() error) error {
	if err != nil {
		return err
	}
	return then()
}

// canonIP returns s as a canonical IP ("" when it is not one).
func canonIP(s string) string {
	a, err := netip.ParseAddr(strings.Trim(s, "[]"))
	if err != nil {
		return ""
	}
	return a.Unmap().WithZone("").String()
}
