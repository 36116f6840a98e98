package lmcache

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The trust model (docs/security.md): a message that arrived over the network carries the
// IP its connection came from (the ZMTP front's peer property; the front admitted that IP first). It is
// applied only when it is about an instance on that IP, so an engine can change what the
// index says about itself and nothing else. Messages given to Apply, or to ApplyFrames
// with no peer, come from inside the process (tests, the simulator) and are trusted.

// DefaultMaxInstancesPerIP bounds the LMCache instances known on one IP: an engine
// restarting makes a new instance id (the old one is superseded and swept), and a few
// engines may share a node IP; more than this is junk.
const DefaultMaxInstancesPerIP = 8

// Reasons a message from the network is refused (label "reason" of
// loadaware_lmcache_refused_messages_total).
const (
	RefusedIPMismatch        = "ip-mismatch"        // a register/heartbeat claims an IP other than its connection's
	RefusedInstanceElsewhere = "instance-elsewhere" // the instance id is registered from another IP
	RefusedInstancesPerIP    = "instances-per-ip"   // the peer IP already has MaxInstancesPerIP instances
	RefusedNoPeer            = "no-peer-address"    // no peer property with the front's key: not through the front
)

var refusedReasons = []string{RefusedIPMismatch, RefusedInstanceElsewhere, RefusedInstancesPerIP, RefusedNoPeer}

type trustMetrics struct {
	refused  *prometheus.CounterVec
	byReason map[string]prometheus.Counter // refused's children, resolved once
	evicted  prometheus.Counter
	swept    prometheus.Counter
}

func newTrustMetrics(reg prometheus.Registerer) (*trustMetrics, error) {
	m := &trustMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loadaware_lmcache_refused_messages_total",
			Help: "LMCache messages not applied because their connection's IP may not speak for the instance they name, by reason (ip-mismatch, instance-elsewhere: two addresses claim one instance id, instances-per-ip, no-peer-address).",
		}, []string{"reason"}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_index_evicted_keys_total",
			Help: "Chunk keys dropped, least recently used first, to keep the index under its key budget (--lmcache-max-keys).",
		}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loadaware_lmcache_swept_keys_total",
			Help: "Chunk keys dropped because their instance was superseded (a newer instance registered on its IP) or its IP left the fleet.",
		}),
	}
	m.byReason = make(map[string]prometheus.Counter, len(refusedReasons))
	for _, r := range refusedReasons {
		m.byReason[r] = m.refused.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.refused, m.evicted, m.swept} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("lmcache: register trust metrics: %w", err)
			}
		}
	}
	return m, nil
}

// InstanceOf returns the instance id a worker message names and the IP it claims (for
// RegisterMsg and HeartbeatMsg; "" for the others); ok is false for messages that name no
// instance.
func InstanceOf(msg Message) (id, claimedIP string, ok bool) {
	switch m := msg.(type) {
	case RegisterMsg:
		return m.InstanceID, m.IP, true
	case HeartbeatMsg:
		return m.InstanceID, m.IP, true
	case DeRegisterMsg:
		return m.InstanceID, "", true
	case KVAdmitMsg:
		return m.InstanceID, "", true
	case KVEvictMsg:
		return m.InstanceID, "", true
	case BatchedKVOperationMsg:
		return m.InstanceID, "", true
	case FullSyncBatchMsg:
		return m.InstanceID, "", true
	case FullSyncEndMsg:
		return m.InstanceID, "", true
	}
	return "", "", false
}

// refusal is why a message may not be applied: its reason ("" when it may) and what the
// log line's sentence needs, kept unformatted so that refusing costs no allocation; why
// formats it, only when the line is logged.
type refusal struct {
	reason            string
	id, claimed, home string
	peer              string
	instancesOnPeer   int
}

// why is the log line's sentence for r.
func (r refusal) why() string {
	switch r.reason {
	case RefusedIPMismatch:
		return fmt.Sprintf("instance %q claims IP %s but its connection comes from %s: an engine may only register its own IP", r.id, r.claimed, r.peer)
	case RefusedInstanceElsewhere:
		return fmt.Sprintf("instance id %q belongs to %s but %s sent a message for it: two engines share one lmcache_instance_id (give each its own), or an engine speaks for another", r.id, r.home, r.peer)
	case RefusedInstancesPerIP:
		return fmt.Sprintf("%s already has %d LMCache instances (the limit): instance %q is not admitted; an engine restarting supersedes its old instance, so this many at once is junk", r.peer, r.instancesOnPeer, r.id)
	case RefusedNoPeer:
		return "the message did not come through the ZMTP front (no peer property with the front's key: a process that can reach libzmq's socket behind the front wrote to it directly)"
	}
	return r.reason
}

// refusedErrs is the error applyLocked returns for each reason: built once, each wrapping
// ErrRefused; the refused message's particulars go to the log line (refuse), not here.
var refusedErrs = func() map[string]error {
	m := make(map[string]error, len(refusedReasons))
	for _, r := range refusedReasons {
		m[r] = fmt.Errorf("%w: %s (the instance and peer are logged; see loadaware_lmcache_refused_messages_total)", ErrRefused, r)
	}
	return m
}()

// authorize decides whether msg, received from peer (a canonical IP), may be applied:
// a refusal with reason "" when it may. Called with ix.mu held.
func (ix *Index) authorize(msg Message, peer string) refusal {
	id, claimed, ok := InstanceOf(msg)
	if !ok {
		return refusal{}
	}
	if claimed != "" && !ix.trustClaims.Load() && canonicalIP(claimed) != peer {
		return refusal{reason: RefusedIPMismatch, id: id, claimed: claimed, peer: peer}
	}
	inst := ix.instances[id]
	if inst != nil {
		if home := inst.owner(); home != "" && home != peer {
			return refusal{reason: RefusedInstanceElsewhere, id: id, home: home, peer: peer}
		}
		return refusal{}
	}
	if n := ix.perIP[peer]; n >= ix.maxPerIP {
		if !ix.dropTombstone(peer) {
			return refusal{reason: RefusedInstancesPerIP, id: id, peer: peer, instancesOnPeer: n}
		}
	}
	return refusal{}
}

// owner is the connection IP that speaks for an instance: the one that created it, else
// (created by a trusted caller) the IP it registered.
func (inst *instance) owner() string {
	if inst.peer != "" {
		return inst.peer
	}
	return inst.ip
}

// SetTrustClaims says whether a register or heartbeat may claim an IP other than its
// connection's. The Server sets it for allow-from any (engines behind NAT); with
// allow-from fleet (the default) the claim must match the connection.
func (ix *Index) SetTrustClaims(trust bool) { ix.trustClaims.Store(trust) }

// home is the IP an instance speaks from: the one it registered, else the connection
// that created it.
func (inst *instance) home() string {
	if inst.ip != "" {
		return inst.ip
	}
	return inst.peer
}

// dropTombstone forgets one superseded instance on ip (its keys are already swept), to
// make room for a new one. It reports whether there was one.
func (ix *Index) dropTombstone(ip string) bool {
	var oldest *instance
	for _, inst := range ix.instances {
		if inst.home() == ip && inst.superseded && (oldest == nil || inst.lastSeen.Before(oldest.lastSeen)) {
			oldest = inst
		}
	}
	if oldest == nil {
		return false
	}
	for _, w := range oldest.workers {
		ix.removeWorker(w)
	}
	ix.forget(oldest)
	return true
}

// suppressed reports whether a log line of this kind was already written in the last
// minute (and otherwise notes that it is being written now).
func (ix *Index) suppressed(kind string, now time.Time) bool {
	return ix.suppressedKey(logKey{kind: kind}, now)
}

// logKey is what a rate-limited log line is limited by: its kind, and the peer for a
// refusal.
type logKey struct{ kind, peer string }

// suppressedKey is suppressed for a kind and a peer.
func (ix *Index) suppressedKey(k logKey, now time.Time) bool {
	if last, seen := ix.refusedLog[k]; seen && now.Sub(last) < time.Minute {
		return true
	}
	if len(ix.refusedLog) >= 1024 {
		clear(ix.refusedLog)
	}
	ix.refusedLog[k] = now
	return false
}

// refuse counts a refused message and logs it at WARN, at most once a minute per reason
// and peer; its sentence is formatted only then.
func (ix *Index) refuse(r refusal, now time.Time) {
	ix.trust.byReason[r.reason].Inc()
	if ix.suppressedKey(logKey{r.reason, r.peer}, now) {
		return
	}
	ix.log.Warn("lmcache: refused a message (logged once a minute per reason and peer; see loadaware_lmcache_refused_messages_total)",
		"reason", r.reason, "peer", r.peer, "detail", r.why())
}

// RefuseUnknownPeer counts a network message whose connection address ZeroMQ did not
// give (it cannot be authenticated, so it is dropped).
func (ix *Index) RefuseUnknownPeer(now time.Time) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.refuse(refusal{reason: RefusedNoPeer}, now)
}

// RetainIPs drops every instance whose IP is not in ips (canonical IPs of the fleet),
// with its keys: an engine that left the fleet no longer speaks for its instance id, so
// an engine that takes the id over elsewhere (a pod rescheduled) is admitted.
func (ix *Index) RetainIPs(ips map[string]bool) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var gone []*instance
	for _, inst := range ix.instances {
		if h := inst.home(); h != "" && !ips[h] {
			gone = append(gone, inst)
		}
	}
	for _, inst := range gone {
		n := 0
		for _, w := range inst.workers {
			n += w.keyCount()
			ix.removeWorker(w)
		}
		ix.forget(inst)
		ix.trust.swept.Add(float64(n))
		ix.log.Info("lmcache: an instance's IP left the fleet; dropping it and its chunks", "instance", inst.id, "ip", inst.home(), "keys", n)
	}
	ix.settle()
	return len(gone)
}
