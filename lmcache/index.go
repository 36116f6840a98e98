package lmcache

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// IndexConfig configures an Index.
type IndexConfig struct {
	// Keys says how the engines hash prompts into chunk keys.
	Keys KeyConfig
	// HeartbeatTimeout drops an instance (and its keys) whose workers send heartbeats once
	// it has been silent this long. 0 means automatic: 6 times the observed heartbeat
	// period, at least 30 s (5 min until a second heartbeat shows the period). Negative
	// disables expiry. Instances that never sent a heartbeat (LMCache 0.3.9's default) are
	// never expired.
	HeartbeatTimeout time.Duration
	// Logger receives registry events and decode problems; nil discards them.
	Logger *slog.Logger
	// Registerer receives the index metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Detector, when set, is fed every admit whose instance IP is known.
	Detector *MissDetector
	// MaxInstancesPerIP bounds the instances known per connection IP (messages from the
	// network only); 0 means DefaultMaxInstancesPerIP.
	MaxInstancesPerIP int
	// MaxKeys bounds the chunk keys held; over it the least recently used (admitted or
	// looked up) tenth is dropped. 0 means DefaultMaxKeys; negative means no bound.
	MaxKeys int
}

// DefaultMaxKeys keeps the index under about 160 MiB: BenchmarkMemoryPerKey measures
// 122 bytes per key held by one instance and 159 by two.
const DefaultMaxKeys = 1 << 20

const (
	autoTimeoutMultiple = 6
	autoTimeoutMin      = 30 * time.Second
	autoTimeoutUnknown  = 5 * time.Minute
	numShards           = 64
	maxLoggedTags       = 32
)

// Match is one LMCache instance's cached prefix of a prompt.
type Match struct {
	InstanceID string
	IP         string // the IP the instance's workers registered with
	Tokens     int    // contiguous prefix held, in tokens, capped at the prompt length
	HolderRank int    // order in which the instance stored the prompt's first chunk (0 = first); -1 if it does not hold it
}

// Index maps chunk keys to the workers holding them and keeps the worker registry. Its
// parts: the registry of instances, workers and IP claims (registry.go), the key table
// (table.go), and the lookups that match a prompt against both (match.go).
//
// Writers (Apply, ApplyFrames, Sweep, RetainIPs) are serialised among themselves; every
// change they make costs time in proportion to what it changes (one key, one instance's
// slots, the instances of one IP), never to the size of the registry or the table.
// Lookups take no writer lock: the key table is sharded, each shard guarded by a
// read-write lock held for one key at a time (the write side only to renew a credited
// key's use stamp when it is older than touchSlack ticks), and the registry is read
// through a view of atomic entries, so a lookup waits at most for one key's update, never
// for a burst of admits or a registration.
type Index struct {
	hasher      *Hasher
	chunk       int
	log         *slog.Logger
	met         *indexMetrics
	det         *MissDetector
	hbTimeout   time.Duration
	trust       *trustMetrics
	maxPerIP    int
	maxKeys     int64
	tick        atomic.Uint32 // logical clock of key use (LRU)
	trustClaims atomic.Bool   // registers may claim an IP other than their connection's (allow-from any)

	shards         [numShards]shard
	nkeys          atomic.Int64
	view           atomic.Pointer[view]
	endpoints      atomic.Pointer[endpointSet] // the endpoint list last resolved by MatchHeld
	scratch        sync.Pool                   // *lookupScratch
	memo           keyMemo                     // the last lookup's prompt and keys, for Routed
	numbers        atomic.Int32                // dense numbers given out so far
	endpointLogged sync.Map                    // endpoints already reported by MatchEndpoints

	mu        sync.Mutex // serialises writers; guards everything below
	instances map[string]*instance
	ipClaims  map[string]*instance // IP -> the instance that claimed it last
	nextSlot  uint32
	syncs     map[syncKey]*fullSync
	logged    map[string]bool // decode error kinds and tags already logged

	perIP       map[string]int       // instances created from each connection IP
	refusedLog  map[logKey]time.Time // refusal kinds (and peers) last logged
	slotByID    map[uint32]*slot     // live slots, for evicting a key from its holders
	retired     []*slot              // from retiredHead on: slots retired by registrations whose keys are still in the key table, oldest first
	retiredHead int
	retiredKeys int    // the keys they still hold
	credit      credit // who is credited, kept current by settle
}

// NewIndex returns an empty index.
func NewIndex(cfg IndexConfig) (*Index, error) {
	h, err := NewHasher(cfg.Keys)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ix := &Index{
		hasher:    h,
		chunk:     h.Config().ChunkSize,
		log:       log,
		det:       cfg.Detector,
		hbTimeout: cfg.HeartbeatTimeout,
		instances: map[string]*instance{},
		ipClaims:  map[string]*instance{},
		nextSlot:  1,
		syncs:     map[syncKey]*fullSync{},
		logged:    map[string]bool{},
		maxPerIP:  cfg.MaxInstancesPerIP,
		maxKeys:   int64(cfg.MaxKeys),

		perIP:      map[string]int{},
		refusedLog: map[logKey]time.Time{},
		slotByID:   map[uint32]*slot{},
		credit:     newCredit(),
	}
	if ix.maxPerIP <= 0 {
		ix.maxPerIP = DefaultMaxInstancesPerIP
	}
	if ix.maxKeys == 0 {
		ix.maxKeys = DefaultMaxKeys
	}
	for i := range ix.shards {
		ix.shards[i].m = map[int64]holders{}
	}
	ix.met, err = newIndexMetrics(cfg.Registerer, func() float64 { return float64(ix.Keys()) },
		func() float64 { return float64(ix.RetiredKeys()) })
	if err != nil {
		return nil, err
	}
	if ix.trust, err = newTrustMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	ix.view.Store(&view{slots: make([]atomic.Pointer[instView], 64)})
	ix.scratch.New = func() any { return new(lookupScratch) }
	ix.setGauges()
	return ix, nil
}

// Hasher returns the hasher the index looks prompts up with.
func (ix *Index) Hasher() *Hasher { return ix.hasher }

// ChunkKeys returns the chunk keys of tokens (see Hasher.ChunkKeys).
func (ix *Index) ChunkKeys(tokens []uint32) []int64 { return ix.hasher.ChunkKeys(tokens) }

// ErrNotWorkerMessage is returned by Apply for messages a worker never sends the controller.
var ErrNotWorkerMessage = errors.New("lmcache: not a worker-to-controller message")

// Apply ingests one worker message received at now. Understood messages never fail; a
// message with nothing to do (evicting a key the worker never admitted, deregistering an
// unknown worker) is counted as ignored. Replies (RegisterRetMsg, ...) return
// ErrNotWorkerMessage.
func (ix *Index) Apply(msg Message, now time.Time) error {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	err := ix.applyLocked(msg, now, "")
	ix.enforceBudget(now)
	return err
}

// ApplyFrameFrom decodes one frame received from peer (the connection's IP, never empty)
// and applies it if peer may speak for the instance it names (see authorize).
func (ix *Index) ApplyFrameFrom(frame []byte, peer string, now time.Time) (Message, error) {
	msg, err := Decode(frame)
	if err != nil {
		ix.noteInvalid(err)
		return nil, err
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	err = ix.applyLocked(msg, now, canonicalIP(peer))
	ix.enforceBudget(now)
	return msg, err
}

// ApplyFrame decodes one frame and applies it. A frame that cannot be decoded is counted
// by kind, logged the first time its kind (or unknown tag) is seen, and returned as the
// error; the caller just moves on to the next frame.
func (ix *Index) ApplyFrame(frame []byte, now time.Time) (Message, error) {
	msg, err := Decode(frame)
	if err != nil {
		ix.noteInvalid(err)
		return nil, err
	}
	return msg, ix.Apply(msg, now)
}

// ApplyFrames decodes and applies the frames of one multipart batch (a worker pushes up to
// 50 messages at once), taking the writer lock once. Frames that cannot be decoded are
// handled as in ApplyFrame and skipped; it returns how many frames were applied.
//
// peer is the IP the batch's connection comes from; "" marks a trusted in-process caller.
// With a peer, a message is applied only if the peer may speak for its instance
// (authorize). An instance that never registered (LMCache 0.3.9 registers once, at start, so after a picker restart
// none of them does) takes it as its IP, unless another instance has claimed that IP.
//
// A batch of up to maxBatchFrames frames is decoded without allocating more than its
// messages, and frames naming the instance of the frame before share its instance id.
func (ix *Index) ApplyFrames(frames [][]byte, peer string, now time.Time) int {
	var buf [maxBatchFrames]Message
	msgs := buf[:0]
	prev := ""
	for _, f := range frames {
		m, err := decodeAfter(f, prev)
		if err != nil {
			ix.noteInvalid(err)
			continue
		}
		msgs = append(msgs, m)
		if id, _, ok := InstanceOf(m); ok {
			prev = id
		}
	}
	if peer != "" {
		peer = canonicalIP(peer) // once a batch: every frame comes from the one connection
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	n := 0
	for _, m := range msgs {
		if ix.applyLocked(m, now, peer) == nil {
			n++
		}
	}
	ix.enforceBudget(now)
	return n
}

// maxBatchFrames is the most frames LMCache 0.3.9 pushes in one batch (50), rounded up: a
// batch of more is applied the same, its message list on the heap.
const maxBatchFrames = 64

// ErrRefused is returned for a message its connection may not send (see authorize).
var ErrRefused = errors.New("lmcache: message refused")

func (ix *Index) noteInvalid(err error) {
	var de *DecodeError
	kind, tag := KindMalformed, ""
	if errors.As(err, &de) {
		kind, tag = de.Kind, de.Tag
	}
	if c, ok := ix.met.invalid[kind]; ok {
		c.Inc()
	}
	ix.met.message(tag, outcomeInvalid)
	key := kind
	if kind == KindUnknownType {
		key = kind + ":" + tag
	}
	ix.mu.Lock()
	first := !ix.logged[key] && len(ix.logged) < maxLoggedTags
	if first {
		ix.logged[key] = true
	}
	ix.mu.Unlock()
	if first {
		ix.log.Warn("lmcache: skipped a frame that could not be decoded (logged once per kind; see loadaware_lmcache_frames_invalid_total)",
			"kind", kind, "type", tag, "err", err)
	}
}

// applyLocked applies msg from peer, which is canonical (canonicalIP) or "" for a trusted
// in-process caller. Called with ix.mu held.
func (ix *Index) applyLocked(msg Message, now time.Time, peer string) error {
	defer ix.settle()
	if peer != "" {
		if r := ix.authorize(msg, peer); r.reason != "" {
			ix.refuse(r, now)
			if msg != nil {
				ix.met.message(msg.Tag(), outcomeIgnored)
			}
			return refusedErrs[r.reason]
		}
	}
	outcome := outcomeApplied
	switch m := msg.(type) {
	case RegisterMsg:
		ix.register(m, now, peer)
	case HeartbeatMsg:
		ix.heartbeat(m, now, peer)
	case DeRegisterMsg:
		w := ix.worker(m.InstanceID, m.WorkerID)
		if w == nil {
			outcome = outcomeIgnored
			break
		}
		ix.log.Info("lmcache: worker deregistered", "instance", m.InstanceID, "worker", m.WorkerID, "ip", w.inst.ip)
		ix.removeWorker(w)
	case KVAdmitMsg:
		w := ix.touch(m.InstanceID, m.WorkerID, now, peer)
		if !ix.admit(w, m.Location, m.Key) {
			outcome = outcomeIgnored
		}
	case KVEvictMsg:
		w := ix.touch(m.InstanceID, m.WorkerID, now, peer)
		if !ix.evict(w, m.Location, m.Key) {
			outcome = outcomeIgnored
		}
	case BatchedKVOperationMsg:
		w := ix.touch(m.InstanceID, m.WorkerID, now, peer)
		for _, op := range m.Operations {
			if op.Op == OpEvict {
				ix.evict(w, m.Location, op.Key)
				continue
			}
			ix.admit(w, m.Location, op.Key)
		}
	case FullSyncBatchMsg:
		w := ix.touch(m.InstanceID, m.WorkerID, now, peer)
		sk := syncKey{m.InstanceID, m.WorkerID, m.Location}
		fs := ix.syncs[sk]
		if fs == nil || fs.id != m.SyncID {
			fs = &fullSync{id: m.SyncID, keys: map[int64]struct{}{}}
			ix.syncs[sk] = fs
		}
		for _, k := range m.Keys {
			ix.admit(w, m.Location, k)
			if ix.maxKeys > 0 && int64(len(fs.keys)) >= ix.maxKeys {
				fs.overflow = true // over the budget: the sync cannot be trusted to evict
				continue
			}
			fs.keys[k] = struct{}{}
		}
	case FullSyncEndMsg:
		w := ix.touch(m.InstanceID, m.WorkerID, now, peer)
		if !ix.endSync(w, m) {
			outcome = outcomeIgnored
		}
	case nil:
		return fmt.Errorf("lmcache: apply: nil message")
	default:
		ix.met.message("other", outcomeIgnored)
		return fmt.Errorf("%w: %s", ErrNotWorkerMessage, msg.Tag())
	}
	ix.met.message(msg.Tag(), outcome)
	return nil
}
