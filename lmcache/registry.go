package lmcache

import (
	"context"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"
)

// The registry: instances, their workers and slots, and which instance each IP's credit
// goes to. Every change marks the IPs (or the instance) it touched; settle then recomputes
// the credit of the instances on those IPs only, and edits the lookup view in place.

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
	state         InstanceState // as of the last settle ("" until first counted)
	iv            *instView     // its entry in the view while credited, else nil
}

type worker struct {
	inst          *instance
	id            int
	port          int
	slots         map[string]*slot // by location
	lastHeartbeat time.Time
	hbInterval    time.Duration
}

// slot is one (worker, location): the unit a key's holder list names. Slot ids are never
// reused, so a lookup reading an older view cannot credit a newer slot's keys to an older
// instance.
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

// credit is the writers' bookkeeping of who is credited.
type credit struct {
	byIP       map[string]map[*instance]struct{} // the instances whose IP is each IP
	conflicted map[string]bool                   // IPs two live instances report
	counts     map[InstanceState]int
	dirtyIPs   map[string]struct{} // IPs whose instances' credit may have changed
	dirtyInsts []*instance         // instances without an IP whose state may have changed
	recount    bool                // an instance was forgotten: the gauges are stale
	free       []int32             // dense numbers given back by instances that lost credit
	next       int32               // the next dense number never given out
}

func newCredit() credit {
	return credit{byIP: map[string]map[*instance]struct{}{}, conflicted: map[string]bool{},
		counts: map[InstanceState]int{}, dirtyIPs: map[string]struct{}{}}
}

// view is the registry as lookups read it: the credited instance of each slot id (nil for
// slots of instances without credit and for retired slots). Writers store its entries in
// place as credit changes; when a slot id passes its end, a view twice as large replaces
// it, its entries copied (amortised constant time per slot).
type view struct {
	slots []atomic.Pointer[instView]
}

func (v *view) get(id uint32) *instView {
	if int(id) < len(v.slots) {
		return v.slots[id].Load()
	}
	return nil
}

// instView is a credited instance as lookups see it. It does not change while the
// instance keeps its credit; losing credit retires it (a new one is made if credit comes
// back).
type instView struct {
	id, ip string
	n      int32 // dense number among the credited instances (reused after one loses credit), for lookups' scratch
}

// setSlot credits slot id to iv (nil: to nobody).
func (ix *Index) setSlot(id uint32, iv *instView) {
	v := ix.view.Load()
	if int(id) >= len(v.slots) {
		if iv == nil {
			return
		}
		nv := &view{slots: make([]atomic.Pointer[instView], max(64, 2*int(ix.nextSlot)))}
		for i := range v.slots {
			nv.slots[i].Store(v.slots[i].Load())
		}
		ix.view.Store(nv)
		v = nv
	}
	v.slots[id].Store(iv)
}

// dirtyIP marks ip's instances for settle.
func (ix *Index) dirtyIP(ip string) {
	if ip != "" {
		ix.credit.dirtyIPs[ip] = struct{}{}
	}
}

// settle brings the credit of every instance marked since the last settle up to date:
// the conflict state of their IPs, their view entries and the instance gauges. Writers
// call it before they release ix.mu.
func (ix *Index) settle() {
	c := &ix.credit
	if len(c.dirtyIPs) == 0 && len(c.dirtyInsts) == 0 && !c.recount {
		return
	}
	for ip := range c.dirtyIPs {
		owner, conflicted := ix.ipClaims[ip], false
		for inst := range c.byIP[ip] {
			if inst.conflict && owner != nil && owner != inst {
				conflicted = true
				break
			}
		}
		if conflicted {
			c.conflicted[ip] = true
		} else {
			delete(c.conflicted, ip)
		}
		for inst := range c.byIP[ip] {
			ix.recredit(inst)
		}
	}
	for _, inst := range c.dirtyInsts {
		if ix.instances[inst.id] == inst {
			ix.recredit(inst)
		}
	}
	clear(c.dirtyIPs)
	c.dirtyInsts = c.dirtyInsts[:0]
	c.recount = false
	ix.setGauges()
}

// recredit recomputes inst's state and gives it credit, or takes it away.
func (ix *Index) recredit(inst *instance) {
	c := &ix.credit
	st := ix.state(inst)
	if st != inst.state {
		if inst.state != "" {
			c.counts[inst.state]--
		}
		c.counts[st]++
		inst.state = st
	}
	switch {
	case st == StateActive && (inst.iv == nil || inst.iv.ip != inst.ip):
		ix.uncredit(inst)
		inst.iv = &instView{id: inst.id, ip: inst.ip, n: ix.takeNumber()}
		for _, w := range inst.workers {
			for _, s := range w.slots {
				ix.setSlot(s.id, inst.iv)
			}
		}
	case st != StateActive:
		ix.uncredit(inst)
	}
}

// uncredit takes inst's credit away, if it had any.
func (ix *Index) uncredit(inst *instance) {
	if inst.iv == nil {
		return
	}
	for _, w := range inst.workers {
		for _, s := range w.slots {
			ix.setSlot(s.id, nil)
		}
	}
	ix.credit.free = append(ix.credit.free, inst.iv.n)
	inst.iv = nil
}

// takeNumber returns a dense number for a newly credited instance. A number given back
// may be handed out again while a lookup still holds the old instance: lookups compare
// the instances themselves, so the worst a reuse does is deny the new instance credit in
// a lookup that raced with it.
func (ix *Index) takeNumber() int32 {
	c := &ix.credit
	if n := len(c.free); n > 0 {
		x := c.free[n-1]
		c.free = c.free[:n-1]
		return x
	}
	c.next++
	ix.numbers.Store(c.next)
	return c.next - 1
}

// joinIP counts inst among ip's instances.
func (ix *Index) joinIP(inst *instance, ip string) {
	set := ix.credit.byIP[ip]
	if set == nil {
		set = map[*instance]struct{}{}
		ix.credit.byIP[ip] = set
	}
	set[inst] = struct{}{}
	inst.ip = ip
	ix.dirtyIP(ip)
}

// leaveIP uncounts inst from its IP's instances.
func (ix *Index) leaveIP(inst *instance) {
	if inst.ip == "" {
		return
	}
	if set := ix.credit.byIP[inst.ip]; set != nil {
		delete(set, inst)
		if len(set) == 0 {
			delete(ix.credit.byIP, inst.ip)
		}
	}
	ix.dirtyIP(inst.ip)
}

// info logs msg at Info with attrs. Registrations log on every call; unlike Logger.Info's
// key-value arguments, which are boxed into interfaces (an allocation each for strings and
// most ints, and one for the slice), attributes cost no allocation unless the handler
// makes one, so a registration under the writer lock allocates only what it keeps.
func (ix *Index) info(msg string, attrs ...slog.Attr) {
	ix.log.LogAttrs(context.Background(), slog.LevelInfo, msg, attrs...)
}

// worker returns a known worker or nil.
func (ix *Index) worker(instanceID string, workerID int) *worker {
	if inst := ix.instances[instanceID]; inst != nil {
		return inst.workers[workerID]
	}
	return nil
}

// touch returns the worker, creating it (and its instance) on first sight, and records
// activity at now. An instance without an IP adopts peer (see ApplyFrames).
func (ix *Index) touch(instanceID string, workerID int, now time.Time, peer string) *worker {
	inst := ix.instanceFor(instanceID, peer)
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
		case c != inst && !inst.conflict:
			inst.conflict = true
			ix.dirtyIP(inst.ip)
			ix.log.Error("lmcache: two live LMCache instances report one IP; neither gets cache credit until one stops: give every engine its own pod IP, or a unique lmcache_instance_id per engine",
				"ip", inst.ip, "instances", []string{c.id, inst.id})
		}
	}
	if inst.ip == "" && peer != "" {
		if ip := canonicalIP(peer); isUsableIP(ip) && ix.ipClaims[ip] == nil {
			if !ix.suppressed("adopt", now) {
				ix.log.Info("lmcache: an instance that never registered is mapped to the IP its connection comes from (logged once a minute)", "instance", instanceID, "ip", ip)
			}
			ix.claim(inst, ip)
		}
	}
	if inst.ip == "" && !inst.loggedNoIP {
		inst.loggedNoIP = true
		if ix.suppressed("no-ip", now) {
			return w
		}
		ix.log.Warn("lmcache: messages from an instance that has not registered, and whose connection IP is unknown or already claimed by another instance: its chunks get no credit until it registers or sends a heartbeat",
			"instance", instanceID, "worker", workerID, "peer", peer)
	}
	return w
}

// claim makes inst the owner of ip; the previous owner is superseded (loses credit and
// its chunks).
func (ix *Index) claim(inst *instance, ip string) {
	ip = canonicalIP(ip)
	if ip == "" || (ix.ipClaims[ip] == inst && inst.ip == ip) {
		return
	}
	if inst.ip != "" && inst.ip != ip && ix.ipClaims[inst.ip] == inst {
		delete(ix.ipClaims, inst.ip)
	}
	if inst.ip != ip {
		ix.leaveIP(inst)
		ix.joinIP(inst, ip)
	}
	if prev := ix.ipClaims[ip]; prev != nil && prev != inst {
		prev.superseded, prev.supersededBy, prev.conflict = true, inst.id, false
		n := 0
		for _, w := range prev.workers {
			n += w.keyCount()
			ix.retireSlots(w)
		}
		ix.trust.swept.Add(float64(n))
		ix.info("lmcache: a newer instance claims an IP; the older one's chunks are dropped",
			slog.String("ip", ip), slog.String("new", inst.id), slog.String("old", prev.id), slog.Int("keys", n))
	}
	ix.ipClaims[ip] = inst
	inst.superseded, inst.supersededBy, inst.conflict = false, "", false
	ix.dirtyIP(ip)
}

func (ix *Index) register(m RegisterMsg, now time.Time, peer string) {
	if w := ix.worker(m.InstanceID, m.WorkerID); w != nil {
		ix.info("lmcache: known worker registered again (restart): dropping its chunks",
			slog.String("instance", m.InstanceID), slog.Int("worker", m.WorkerID), slog.Int("keys", w.keyCount()))
		ix.retireSlots(w)
	} else {
		ix.info("lmcache: worker registered",
			slog.String("instance", m.InstanceID), slog.Int("worker", m.WorkerID), slog.String("ip", m.IP), slog.Int("port", m.Port))
	}
	ix.claim(ix.instanceFor(m.InstanceID, peer), m.IP)
	w := ix.touch(m.InstanceID, m.WorkerID, now, "")
	w.port = m.Port
}

// instanceFor returns the instance, creating it as first seen from peer.
func (ix *Index) instanceFor(id, peer string) *instance {
	inst := ix.instances[id]
	if inst == nil {
		inst = &instance{id: id, peer: peer, workers: map[int]*worker{}}
		ix.instances[id] = inst
		ix.credit.dirtyInsts = append(ix.credit.dirtyInsts, inst)
		if peer != "" {
			ix.perIP[peer]++
		}
	}
	return inst
}

func (ix *Index) heartbeat(m HeartbeatMsg, now time.Time, peer string) {
	if ix.worker(m.InstanceID, m.WorkerID) == nil {
		ix.info("lmcache: heartbeat from an unknown worker registers it",
			slog.String("instance", m.InstanceID), slog.Int("worker", m.WorkerID), slog.String("ip", m.IP))
		ix.claim(ix.instanceFor(m.InstanceID, peer), m.IP)
	} else if inst := ix.instances[m.InstanceID]; m.IP != "" && canonicalIP(m.IP) != inst.ip {
		ix.claim(inst, m.IP)
	}
	w := ix.touch(m.InstanceID, m.WorkerID, now, "")
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
}

// removeWorker forgets w and, when it was the last, its instance.
func (ix *Index) removeWorker(w *worker) {
	inst := w.inst
	delete(inst.workers, w.id)
	ix.dropSlots(w)
	if len(inst.workers) == 0 {
		ix.forget(inst)
	}
}

// forget removes inst from the registry (its workers must be gone).
func (ix *Index) forget(inst *instance) {
	if ix.instances[inst.id] != inst {
		return
	}
	delete(ix.instances, inst.id)
	if ix.ipClaims[inst.ip] == inst {
		delete(ix.ipClaims, inst.ip)
	}
	ix.uncredit(inst)
	if inst.state != "" {
		ix.credit.counts[inst.state]--
		inst.state = ""
		ix.credit.recount = true
	}
	ix.leaveIP(inst)
	if p := inst.peer; p != "" {
		if ix.perIP[p]--; ix.perIP[p] <= 0 {
			delete(ix.perIP, p)
		}
	}
}

// Sweep drops every heartbeating instance silent for longer than its timeout at now, with
// its keys, and returns how many it dropped. The Server calls it periodically; virtual-time
// callers call it with their clock.
//
// It also purges from the key table every key of the slots registrations retired since
// the last Sweep that the key traffic has not purged yet (see purge), heartbeat timeout or
// not.
func (ix *Index) Sweep(now time.Time) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.purge(-1)
	if ix.hbTimeout < 0 {
		return 0
	}
	defer ix.settle()
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

func (ix *Index) setGauges() {
	for _, s := range []InstanceState{StateActive, StateNoIP, StateSuperseded, StateConflict} {
		ix.met.instances.WithLabelValues(string(s)).Set(float64(ix.credit.counts[s]))
	}
	ix.met.conflicts.Set(float64(len(ix.credit.conflicted)))
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

// state is inst's state given the conflicts known (settle keeps them current).
func (ix *Index) state(inst *instance) InstanceState {
	switch {
	case inst.ip == "":
		return StateNoIP
	case ix.credit.conflicted[inst.ip]:
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
	out := make([]InstanceInfo, 0, len(ix.instances))
	for _, inst := range ix.instances {
		info := InstanceInfo{ID: inst.id, IP: inst.ip, State: ix.state(inst), SupersededBy: inst.supersededBy,
			Workers: len(inst.workers), Heartbeats: inst.heartbeats, LastSeen: inst.lastSeen}
		for _, w := range inst.workers {
			info.Keys += w.keyCount()
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

func (w *worker) keyCount() int {
	n := 0
	for _, s := range w.slots {
		n += len(s.keys)
	}
	return n
}
