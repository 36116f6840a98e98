package lmcache

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
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

// Index maps chunk keys to the workers holding them and keeps the worker registry.
//
// Writers (Apply, ApplyFrame, Sweep) are serialised among themselves. Lookups take no
// writer lock: the key table is sharded, each shard guarded by a read-write lock held for
// one key at a time (the write side only to renew a credited key's use stamp when it is
// older than touchSlack ticks), and the registry is read from an immutable snapshot, so a lookup
// waits at most for one key's update, never for a burst of admits.
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
	endpointLogged sync.Map // endpoints already reported by MatchEndpoints

	mu        sync.Mutex // serialises writers; guards everything below
	instances map[string]*instance
	ipClaims  map[string]*instance // IP -> the instance that claimed it last
	nextSlot  uint32
	syncs     map[syncKey]*fullSync
	logged    map[string]bool // decode error kinds and tags already logged

	perIP      map[string]int       // instances created from each connection IP
	onIP       map[string]int       // instances whose IP is each IP
	refusedLog map[string]time.Time // refusal kinds last logged
	slotByID   map[uint32]*slot     // live slots, for evicting a key from its holders
}

type shard struct {
	mu sync.RWMutex
	m  map[int64]holders
	_  [32]byte // keep neighbouring shards' locks off one cache line
}

type instance struct {
	id            string
	ip            string
	peer          string // the connection IP it was first seen from ("" for trusted callers)
	workers       map[int]*worker
	lastSeen      time.Time
	heartbeats    bool
	superseded    bool   // another instance claimed ip after this one
	supersededBy  string // that instance
	conflict      bool   // sent messages after being superseded: two live instances on one IP
	loggedNoIP    bool
	hbIntervalMax time.Duration
	iv            *instView // its entry in the view while credited, else nil
}

type worker struct {
	inst          *instance
	id            int
	port          int
	slots         map[string]*slot // by location
	lastHeartbeat time.Time
	hbInterval    time.Duration
}

// slot is one (worker, location): the unit a key's holder list names.
type slot struct {
	id   uint32
	w    *worker
	loc  string
	keys map[int64]struct{}
}

type syncKey struct {
	instance string
	worker   int
	location string
}

type fullSync struct {
	id       string
	keys     map[int64]struct{}
	overflow bool // more keys than the budget: end it without evicting
}

// view is the registry snapshot lookups read: the credited instance of each slot id (nil
// for slots of instances without credit). A full publish replaces it; a slot added to an
// instance already credited is stored in place (an atomic entry), so ingesting new
// instances and slots costs no rebuild (linear time).
type view struct {
	slots []atomic.Pointer[instView]
}

func (v *view) get(id uint32) *instView {
	if int(id) < len(v.slots) {
		return v.slots[id].Load()
	}
	return nil
}

// addSlot credits slot id to iv in place; it reports false when the view has no room (the
// caller then publishes in full).
func (ix *Index) addSlot(id uint32, iv *instView) bool {
	v := ix.view.Load()
	if int(id) >= len(v.slots) {
		return false
	}
	v.slots[id].Store(iv)
	return true
}

type instView struct {
	id, ip string
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
		onIP:       map[string]int{},
		refusedLog: map[string]time.Time{},
		slotByID:   map[uint32]*slot{},
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
	ix.met, err = newIndexMetrics(cfg.Registerer, func() float64 { return float64(ix.nkeys.Load()) })
	if err != nil {
		return nil, err
	}
	if ix.trust, err = newTrustMetrics(cfg.Registerer); err != nil {
		return nil, err
	}
	ix.view.Store(&view{slots: make([]atomic.Pointer[instView], 64)})
	return ix, nil
}

// Hasher returns the hasher the index looks prompts up with.
func (ix *Index) Hasher() *Hasher { return ix.hasher }

// ChunkKeys returns the chunk keys of tokens (see Hasher.ChunkKeys).
func (ix *Index) ChunkKeys(tokens []uint32) []int64 { return ix.hasher.ChunkKeys(tokens) }

func (ix *Index) shardOf(key int64) *shard {
	return &ix.shards[(uint64(key)*0x9E3779B97F4A7C15)>>58]
}

// Lookup returns, for every credited instance holding the first chunk of tokens, its
// contiguous matched prefix (see LookupKeys).
func (ix *Index) Lookup(tokens []uint32) []Match {
	var buf [16]int64
	return ix.LookupKeys(ix.hasher.AppendChunkKeys(buf[:0], tokens), len(tokens))
}

// LookupKeys is Lookup for chunk keys already computed from a prompt of promptTokens
// tokens. An instance's credit ends at its first missing chunk; the walk stops when no
// instance is still contiguous. Credited instances have a known IP that no newer instance
// has claimed and that no second live instance reports. The result is ordered by Tokens
// (longest first), then HolderRank; it is empty when nobody holds the first chunk.
func (ix *Index) LookupKeys(keys []int64, promptTokens int) []Match {
	start := time.Now()
	v := ix.view.Load()
	type cand struct {
		iv     *instView
		rank   int
		chunks int
		live   bool
	}
	var cbuf [8]cand
	cands := cbuf[:0]
	var hbuf [16]uint32
	walked := 0 // keys some candidate still held
	slack, clock := ix.touchSlack(), ix.tick.Load()
	var stale uint64 // keys (of the first 64) whose use stamp is older than slack
	for i, k := range keys {
		hs, used := ix.holdersOf(k, hbuf[:0])
		if i < 64 && slack > 0 && clock-used >= slack {
			stale |= 1 << i
		}
		if i == 0 {
			for _, s := range hs {
				iv := v.get(s)
				if iv == nil || containsFunc(cands, func(c cand) bool { return c.iv == iv }) {
					continue
				}
				cands = append(cands, cand{iv: iv, rank: len(cands), chunks: 1, live: true})
			}
			if len(cands) == 0 {
				break
			}
			walked = 1
			continue
		}
		alive := 0
		for j := range cands {
			if !cands[j].live {
				continue
			}
			held := false
			for _, s := range hs {
				if v.get(s) == cands[j].iv {
					held = true
					break
				}
			}
			if held {
				cands[j].chunks++
				alive++
			} else {
				cands[j].live = false
			}
		}
		if alive == 0 {
			break
		}
		walked = i + 1
	}
	if stale != 0 && len(cands) > 0 {
		ix.renew(keys[:walked], stale)
	}
	out := make([]Match, 0, len(cands))
	best := 0
	for _, c := range cands {
		tokens := min(c.chunks*ix.chunk, promptTokens)
		best = max(best, tokens)
		out = append(out, Match{InstanceID: c.iv.id, IP: c.iv.ip, Tokens: tokens, HolderRank: c.rank})
	}
	slices.SortFunc(out, func(a, b Match) int {
		if a.Tokens != b.Tokens {
			return b.Tokens - a.Tokens
		}
		return a.HolderRank - b.HolderRank
	})
	if len(out) == 0 {
		out = nil
	}
	ix.met.lookups.Inc()
	if len(out) > 0 {
		ix.met.hits.Inc()
	}
	if promptTokens > 0 {
		ix.met.matched.Observe(float64(best) / float64(promptTokens))
	}
	ix.met.latency.Observe(time.Since(start).Seconds())
	return out
}

// EndpointMatch is how much of a prompt one endpoint holds.
type EndpointMatch struct {
	Matched    int // contiguous prefix, in tokens
	HolderRank int // the instance's Match.HolderRank; -1 when it holds nothing
}

// MatchEndpoints looks tokens up and aligns the result with endpoints ("ip:port"),
// mapping instances to endpoints by IP. Endpoints that share one IP, and endpoints given
// by host name, cannot be told apart by an instance's IP: they get no credit, and each is
// logged once as a configuration error.
func (ix *Index) MatchEndpoints(tokens []uint32, endpoints []string) []EndpointMatch {
	out := make([]EndpointMatch, len(endpoints))
	for i := range out {
		out[i].HolderRank = -1
	}
	matches := ix.Lookup(tokens)
	if len(matches) == 0 {
		return out
	}
	byIP := make(map[string]int, len(endpoints))
	ips := make([]string, len(endpoints))
	for i, e := range endpoints {
		ip := canonicalIP(e)
		ips[i] = ip
		if _, err := netip.ParseAddr(ip); err != nil {
			ix.logEndpointOnce(e, "lmcache: an endpoint given by host name cannot be matched to an LMCache instance (instances report their IP): list endpoints by IP; it gets no cache credit")
			ips[i] = ""
			continue
		}
		byIP[ip]++
	}
	for _, m := range matches {
		for i, ip := range ips {
			if ip != m.IP {
				continue
			}
			if byIP[ip] > 1 {
				ix.logEndpointOnce(endpoints[i], "lmcache: several endpoints share one IP, so an LMCache instance's IP does not say which of them it is: give each engine its own IP; they get no cache credit")
				continue
			}
			out[i] = EndpointMatch{Matched: m.Tokens, HolderRank: m.HolderRank}
		}
	}
	return out
}

func (ix *Index) logEndpointOnce(endpoint, msg string) {
	if _, seen := ix.endpointLogged.LoadOrStore(endpoint, true); !seen {
		ix.log.Error(msg, "endpoint", endpoint)
	}
}

// Routed tells the index's MissDetector (if any) that a prompt with these token ids was
// sent to endpoint ("ip:port"). It has the shape of the picker's decision observer.
func (ix *Index) Routed(endpoint string, tokens []uint32) {
	if ix.det == nil || len(tokens) == 0 {
		return
	}
	ix.det.Sent(endpoint, ix.hasher.ChunkKeys(tokens))
}

func isUsableIP(s string) bool {
	a, err := netip.ParseAddr(s)
	return err == nil && !a.IsUnspecified()
}

func containsFunc[T any](s []T, f func(T) bool) bool {
	for _, x := range s {
		if f(x) {
			return true
		}
	}
	return false
}

// holdersOf appends the slots holding key, in admission order, to dst, and returns the
// key's use stamp.
func (ix *Index) holdersOf(key int64, dst []uint32) ([]uint32, uint32) {
	sh := ix.shardOf(key)
	sh.mu.RLock()
	h := sh.m[key]
	dst = h.appendTo(dst)
	sh.mu.RUnlock()
	return dst, h.used
}

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
	err = ix.applyLocked(msg, now, peer)
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
func (ix *Index) ApplyFrames(frames [][]byte, peer string, now time.Time) int {
	msgs := make([]Message, 0, len(frames))
	for _, f := range frames {
		m, err := Decode(f)
		if err != nil {
			ix.noteInvalid(err)
			continue
		}
		msgs = append(msgs, m)
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

func (ix *Index) applyLocked(msg Message, now time.Time, peer string) error {
	if peer != "" {
		peer = canonicalIP(peer)
		if reason, why := ix.authorize(msg, peer); reason != "" {
			ix.refuse(reason, why, peer, now)
			if msg != nil {
				ix.met.message(msg.Tag(), outcomeIgnored)
			}
			return fmt.Errorf("%w: %s", ErrRefused, why)
		}
	}
	outcome := outcomeApplied
	dirty := false
	switch m := msg.(type) {
	case RegisterMsg:
		dirty = ix.register(m, now, peer)
	case HeartbeatMsg:
		dirty = ix.heartbeat(m, now, peer)
	case DeRegisterMsg:
		w := ix.worker(m.InstanceID, m.WorkerID)
		if w == nil {
			outcome = outcomeIgnored
			break
		}
		ix.log.Info("lmcache: worker deregistered", "instance", m.InstanceID, "worker", m.WorkerID, "ip", w.inst.ip)
		ix.removeWorker(w)
		dirty = false // removeWorker published the view
	case KVAdmitMsg:
		w, d := ix.touch(m.InstanceID, m.WorkerID, now, peer)
		ok, d2 := ix.admit(w, m.Location, m.Key)
		dirty = d || d2
		if !ok {
			outcome = outcomeIgnored
		}
	case KVEvictMsg:
		w, d := ix.touch(m.InstanceID, m.WorkerID, now, peer)
		dirty = d
		if !ix.evict(w, m.Location, m.Key) {
			outcome = outcomeIgnored
		}
	case BatchedKVOperationMsg:
		w, d := ix.touch(m.InstanceID, m.WorkerID, now, peer)
		dirty = d
		for _, op := range m.Operations {
			if op.Op == OpEvict {
				ix.evict(w, m.Location, op.Key)
				continue
			}
			_, d2 := ix.admit(w, m.Location, op.Key)
			dirty = dirty || d2
		}
	case FullSyncBatchMsg:
		w, d := ix.touch(m.InstanceID, m.WorkerID, now, peer)
		dirty = d
		sk := syncKey{m.InstanceID, m.WorkerID, m.Location}
		fs := ix.syncs[sk]
		if fs == nil || fs.id != m.SyncID {
			fs = &fullSync{id: m.SyncID, keys: map[int64]struct{}{}}
			ix.syncs[sk] = fs
		}
		for _, k := range m.Keys {
			_, d2 := ix.admit(w, m.Location, k)
			dirty = dirty || d2
			if ix.maxKeys > 0 && int64(len(fs.keys)) >= ix.maxKeys {
				fs.overflow = true // over the budget: the sync cannot be trusted to evict
				continue
			}
			fs.keys[k] = struct{}{}
		}
	case FullSyncEndMsg:
		w, d := ix.touch(m.InstanceID, m.WorkerID, now, peer)
		dirty = d
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
	if dirty {
		ix.publish()
	}
	return nil
}

// worker returns a known worker or nil.
func (ix *Index) worker(instanceID string, workerID int) *worker {
	if inst := ix.instances[instanceID]; inst != nil {
		return inst.workers[workerID]
	}
	return nil
}

// touch returns the worker, creating it (and its instance) on first sight, and records
// activity at now. An instance without an IP adopts peer (see ApplyFrames). It reports
// whether the registry snapshot must be republished.
func (ix *Index) touch(instanceID string, workerID int, now time.Time, peer string) (*worker, bool) {
	inst := ix.instanceFor(instanceID, peer)
	dirty := false
	w := inst.workers[workerID]
	if w == nil {
		w = &worker{inst: inst, id: workerID, slots: map[string]*slot{}}
		inst.workers[workerID] = w
	}
	inst.lastSeen = now
	if inst.superseded {
		switch c := ix.ipClaims[inst.ip]; {
		case c == nil:
			// The instance that replaced it is gone and it is still talking: the IP is its own again.
			ix.log.Info("lmcache: a superseded instance is the only one left on its IP and takes it back", "ip", inst.ip, "instance", inst.id)
			ix.claim(inst, inst.ip)
			dirty = true
		case c != inst && !inst.conflict:
			inst.conflict = true
			dirty = true
			ix.log.Error("lmcache: two live LMCache instances report one IP; neither gets cache credit until one stops: give every engine its own pod IP, or a unique lmcache_instance_id per engine",
				"ip", inst.ip, "instances", []string{c.id, inst.id})
		}
	}
	if inst.ip == "" && peer != "" {
		if ip := canonicalIP(peer); isUsableIP(ip) && ix.ipClaims[ip] == nil {
			if !ix.suppressed("adopt", now) {
				ix.log.Info("lmcache: an instance that never registered is mapped to the IP its connection comes from (logged once a minute)", "instance", instanceID, "ip", ip)
			}
			dirty = ix.claimNew(inst, ip) || dirty
		}
	}
	if inst.ip == "" && !inst.loggedNoIP {
		inst.loggedNoIP = true
		if ix.suppressed("no-ip", now) {
			return w, dirty
		}
		ix.log.Warn("lmcache: messages from an instance that has not registered, and whose connection IP is unknown or already claimed by another instance: its chunks get no credit until it registers or sends a heartbeat",
			"instance", instanceID, "worker", workerID, "peer", peer)
	}
	return w, dirty
}

// claimNew is claim for an instance that had no IP, credited at once in place when no
// other instance has ever been on ip (nothing else changes). It reports whether the view
// must be published in full.
func (ix *Index) claimNew(inst *instance, ip string) bool {
	ip = canonicalIP(ip)
	if ip == "" {
		return false
	}
	if inst.ip != "" || ix.onIP[ip] > 0 || inst.superseded {
		return ix.claim(inst, ip)
	}
	ix.claim(inst, ip)
	inst.iv = &instView{id: inst.id, ip: inst.ip}
	for _, w := range inst.workers {
		for _, s := range w.slots {
			if !ix.addSlot(s.id, inst.iv) {
				return true
			}
		}
	}
	return false
}

// claim makes inst the owner of ip; the previous owner is superseded (loses credit).
func (ix *Index) claim(inst *instance, ip string) bool {
	ip = canonicalIP(ip)
	if ip == "" || (ix.ipClaims[ip] == inst && inst.ip == ip) {
		return false
	}
	if inst.ip != "" && inst.ip != ip && ix.ipClaims[inst.ip] == inst {
		delete(ix.ipClaims, inst.ip)
	}
	if inst.ip != ip {
		ix.leaveIP(inst)
		ix.onIP[ip]++
	}
	inst.ip = ip
	if prev := ix.ipClaims[ip]; prev != nil && prev != inst {
		prev.superseded, prev.supersededBy, prev.conflict = true, inst.id, false
		n := 0
		for _, w := range prev.workers {
			n += w.keyCount()
			ix.dropSlots(w)
		}
		ix.trust.swept.Add(float64(n))
		ix.log.Info("lmcache: a newer instance claims an IP; the older one's chunks are dropped", "ip", ip, "new", inst.id, "old", prev.id, "keys", n)
	}
	ix.ipClaims[ip] = inst
	inst.superseded, inst.supersededBy, inst.conflict = false, "", false
	return true
}

func (ix *Index) register(m RegisterMsg, now time.Time, peer string) bool {
	if w := ix.worker(m.InstanceID, m.WorkerID); w != nil {
		n := 0
		for _, s := range w.slots {
			n += len(s.keys)
		}
		ix.log.Info("lmcache: known worker registered again (restart): dropping its chunks", "instance", m.InstanceID, "worker", m.WorkerID, "keys", n)
		ix.dropSlots(w)
	} else {
		ix.log.Info("lmcache: worker registered", "instance", m.InstanceID, "worker", m.WorkerID, "ip", m.IP, "port", m.Port)
	}
	dirty := ix.claimNew(ix.instanceFor(m.InstanceID, peer), m.IP)
	w, d := ix.touch(m.InstanceID, m.WorkerID, now, "")
	w.port = m.Port
	return dirty || d
}

// instanceFor returns the instance, creating it as first seen from peer.
func (ix *Index) instanceFor(id, peer string) *instance {
	inst := ix.instances[id]
	if inst == nil {
		inst = &instance{id: id, peer: peer, workers: map[int]*worker{}}
		ix.instances[id] = inst
		if peer != "" {
			ix.perIP[peer]++
		}
	}
	return inst
}

func (ix *Index) heartbeat(m HeartbeatMsg, now time.Time, peer string) bool {
	known := ix.worker(m.InstanceID, m.WorkerID) != nil
	dirty := false
	if !known {
		ix.log.Info("lmcache: heartbeat from an unknown worker registers it", "instance", m.InstanceID, "worker", m.WorkerID, "ip", m.IP)
		dirty = ix.claimNew(ix.instanceFor(m.InstanceID, peer), m.IP)
	} else if inst := ix.instances[m.InstanceID]; m.IP != "" && canonicalIP(m.IP) != inst.ip {
		dirty = ix.claim(inst, m.IP)
	}
	w, d := ix.touch(m.InstanceID, m.WorkerID, now, "")
	if !w.lastHeartbeat.IsZero() && now.After(w.lastHeartbeat) {
		w.hbInterval = now.Sub(w.lastHeartbeat)
		w.inst.hbIntervalMax = 0
		for _, o := range w.inst.workers {
			w.inst.hbIntervalMax = max(w.inst.hbIntervalMax, o.hbInterval)
		}
	}
	w.lastHeartbeat = now
	w.inst.heartbeats = true
	w.port = m.Port
	return dirty || d
}

// admit records that w holds key at loc; it reports whether the key was new for that slot
// and whether the snapshot must be republished (a new slot).
func (ix *Index) admit(w *worker, loc string, key int64) (added, dirty bool) {
	if w.inst.superseded {
		// Its IP belongs to a newer instance: its chunks were swept and are not kept.
		ix.met.op(false, false)
		return false, false
	}
	s := w.slots[loc]
	if s == nil {
		s = &slot{id: ix.nextSlot, w: w, loc: loc, keys: map[int64]struct{}{}}
		ix.nextSlot++
		w.slots[loc] = s
		ix.slotByID[s.id] = s
		if iv := w.inst.iv; iv != nil && !ix.addSlot(s.id, iv) {
			dirty = true // the view is full: rebuild it, twice as large
		}
	}
	tick := ix.tick.Add(1)
	if _, ok := s.keys[key]; ok {
		ix.met.op(false, false)
		sh := ix.shardOf(key)
		sh.mu.Lock()
		if h, ok := sh.m[key]; ok {
			h.used = tick
			sh.m[key] = h
		}
		sh.mu.Unlock()
		return false, dirty
	}
	s.keys[key] = struct{}{}
	sh := ix.shardOf(key)
	sh.mu.Lock()
	h := sh.m[key]
	if h.len() == 0 {
		ix.nkeys.Add(1)
	}
	h, _ = h.add(s.id)
	h.used = tick
	sh.m[key] = h
	sh.mu.Unlock()
	ix.met.op(false, true)
	if ix.det != nil && w.inst.ip != "" {
		ix.det.Admitted(w.inst.ip, key)
	}
	return true, dirty
}

// evict records that w dropped key from loc; it reports whether w held it there.
func (ix *Index) evict(w *worker, loc string, key int64) bool {
	s := w.slots[loc]
	if s == nil {
		ix.met.op(true, false)
		return false
	}
	if _, ok := s.keys[key]; !ok {
		ix.met.op(true, false)
		return false
	}
	delete(s.keys, key)
	ix.unhold(key, s.id)
	ix.met.op(true, true)
	return true
}

func (ix *Index) unhold(key int64, id uint32) {
	sh := ix.shardOf(key)
	sh.mu.Lock()
	h, ok := sh.m[key].remove(id)
	if ok {
		if h.len() == 0 {
			delete(sh.m, key)
			ix.nkeys.Add(-1)
		} else {
			sh.m[key] = h
		}
	}
	sh.mu.Unlock()
}

// endSync makes the keys sent under the sync the worker's whole key set at the location.
// When the worker's count disagrees with what arrived (a lost batch), nothing is evicted.
func (ix *Index) endSync(w *worker, m FullSyncEndMsg) bool {
	sk := syncKey{m.InstanceID, m.WorkerID, m.Location}
	fs := ix.syncs[sk]
	if fs == nil || fs.id != m.SyncID {
		return false
	}
	delete(ix.syncs, sk)
	if fs.overflow || len(fs.keys) != m.ActualTotalKeys {
		ix.log.Warn("lmcache: full sync ended with a different key count than received (a batch was lost); keeping the union of old and synced keys",
			"instance", m.InstanceID, "worker", m.WorkerID, "location", m.Location, "sent", m.ActualTotalKeys, "received", len(fs.keys))
		return true
	}
	if s := w.slots[m.Location]; s != nil {
		for k := range s.keys {
			if _, ok := fs.keys[k]; !ok {
				ix.evict(w, m.Location, k)
			}
		}
	}
	return true
}

// dropSlots forgets every key of w. The slots are retired (new admits get new slot ids),
// and the snapshot is published before the keys are purged, so lookups stop crediting
// them at once.
func (ix *Index) dropSlots(w *worker) {
	old := w.slots
	w.slots = map[string]*slot{}
	for sk := range ix.syncs {
		if sk.instance == w.inst.id && sk.worker == w.id {
			delete(ix.syncs, sk)
		}
	}
	ix.publish()
	for _, s := range old {
		delete(ix.slotByID, s.id)
		for k := range s.keys {
			ix.unhold(k, s.id)
		}
	}
}

// removeWorker forgets w and, when it was the last, its instance.
func (ix *Index) removeWorker(w *worker) {
	inst := w.inst
	delete(inst.workers, w.id)
	if len(inst.workers) == 0 {
		ix.forget(inst)
	}
	ix.dropSlots(w)
}

// Sweep drops every heartbeating instance silent for longer than its timeout at now, with
// its keys, and returns how many it dropped. The Server calls it periodically; virtual-time
// callers call it with their clock.
func (ix *Index) Sweep(now time.Time) int {
	if ix.hbTimeout < 0 {
		return 0
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer ix.refreshGauges()
	var dead []*instance
	for _, inst := range ix.instances {
		if !inst.heartbeats {
			continue
		}
		if silent := now.Sub(inst.lastSeen); silent > ix.timeoutOf(inst) {
			dead = append(dead, inst)
		}
	}
	sort.Slice(dead, func(i, j int) bool { return dead[i].id < dead[j].id })
	for _, inst := range dead {
		ix.log.Warn("lmcache: instance stopped sending heartbeats; dropping it and its chunks",
			"instance", inst.id, "ip", inst.ip, "silent", now.Sub(inst.lastSeen).String(), "timeout", ix.timeoutOf(inst).String())
		for _, w := range inst.workers {
			ix.removeWorker(w)
		}
	}
	return len(dead)
}

func (ix *Index) timeoutOf(inst *instance) time.Duration {
	if ix.hbTimeout > 0 {
		return ix.hbTimeout
	}
	if inst.hbIntervalMax == 0 {
		return autoTimeoutUnknown
	}
	return max(autoTimeoutMin, autoTimeoutMultiple*inst.hbIntervalMax)
}

// publish rebuilds the registry snapshot lookups read and the instance gauges.
func (ix *Index) publish() {
	conflicted := ix.conflictedIPs()
	v := &view{slots: make([]atomic.Pointer[instView], max(64, 2*int(ix.nextSlot)))}
	counts := map[InstanceState]int{}
	for _, inst := range ix.instances {
		st := ix.state(inst, conflicted)
		counts[st]++
		inst.iv = nil
		if st != StateActive {
			continue
		}
		inst.iv = &instView{id: inst.id, ip: inst.ip}
		for _, w := range inst.workers {
			for _, s := range w.slots {
				v.slots[s.id].Store(inst.iv)
			}
		}
	}
	ix.view.Store(v)
	ix.setGauges(counts, len(conflicted))
}

// refreshGauges recounts the instance gauges (the in-place additions do not).
func (ix *Index) refreshGauges() {
	conflicted := ix.conflictedIPs()
	counts := map[InstanceState]int{}
	for _, inst := range ix.instances {
		counts[ix.state(inst, conflicted)]++
	}
	ix.setGauges(counts, len(conflicted))
}

func (ix *Index) setGauges(counts map[InstanceState]int, conflicted int) {
	for _, s := range []InstanceState{StateActive, StateNoIP, StateSuperseded, StateConflict} {
		ix.met.instances.WithLabelValues(string(s)).Set(float64(counts[s]))
	}
	ix.met.conflicts.Set(float64(conflicted))
}

// conflictedIPs returns the IPs where an instance kept talking after another claimed its
// IP, while that other one is still registered.
func (ix *Index) conflictedIPs() map[string]bool {
	out := map[string]bool{}
	for _, inst := range ix.instances {
		if c := ix.ipClaims[inst.ip]; inst.conflict && c != nil && c != inst {
			out[inst.ip] = true
		}
	}
	return out
}

// InstanceState says whether an instance's chunks are credited.
type InstanceState string

// The instance states.
const (
	StateActive     InstanceState = "active"     // credited
	StateNoIP       InstanceState = "no_ip"      // sent KV events but never registered: IP unknown
	StateSuperseded InstanceState = "superseded" // a newer instance registered with its IP
	StateConflict   InstanceState = "conflict"   // two live instances report its IP
)

func (ix *Index) state(inst *instance, conflicted map[string]bool) InstanceState {
	switch {
	case inst.ip == "":
		return StateNoIP
	case conflicted[inst.ip]:
		return StateConflict
	case inst.superseded:
		return StateSuperseded
	}
	return StateActive
}

// InstanceInfo describes one known instance.
type InstanceInfo struct {
	ID           string
	IP           string
	State        InstanceState
	SupersededBy string // the instance that claimed IP after this one, if superseded
	Workers      int
	Keys         int // chunk keys held, summed over workers and locations
	Heartbeats   bool
	LastSeen     time.Time
}

// Instances returns every known instance, ordered by IP then ID.
func (ix *Index) Instances() []InstanceInfo {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	conflicted := ix.conflictedIPs()
	out := make([]InstanceInfo, 0, len(ix.instances))
	for _, inst := range ix.instances {
		info := InstanceInfo{ID: inst.id, IP: inst.ip, State: ix.state(inst, conflicted), SupersededBy: inst.supersededBy,
			Workers: len(inst.workers), Heartbeats: inst.heartbeats, LastSeen: inst.lastSeen}
		for _, w := range inst.workers {
			for _, s := range w.slots {
				info.Keys += len(s.keys)
			}
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].IP != out[j].IP {
			return out[i].IP < out[j].IP
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// InstancesByIP groups Instances by IP ("" for instances that never registered). An IP
// with an instance in StateConflict is served by two live instances: a configuration error
// the caller should surface.
func (ix *Index) InstancesByIP() map[string][]InstanceInfo {
	out := map[string][]InstanceInfo{}
	for _, info := range ix.Instances() {
		out[info.IP] = append(out[info.IP], info)
	}
	return out
}

// Keys returns the number of distinct chunk keys held by at least one worker.
func (ix *Index) Keys() int { return int(ix.nkeys.Load()) }
