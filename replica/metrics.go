package replica

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	sent, sentBytes *prometheus.CounterVec // by kind
	received        *prometheus.CounterVec // by kind, outcome
	receivedBytes   prometheus.Counter
	peers           prometheus.Gauge
	expired         prometheus.Counter
	corrections     *prometheus.CounterVec // by kind
	scrapes         *prometheus.CounterVec // by outcome
	warm            *prometheus.CounterVec // by outcome
	warmSeconds     prometheus.Gauge
	served          prometheus.Counter
	connected       prometheus.Gauge
	saves           *prometheus.CounterVec // by outcome
	discarded       prometheus.Counter
}

// Outcomes of a received peer message.
const (
	outApplied = "applied"
	outStale   = "stale"   // a frame already in the snapshot taken, or older than the sender's state
	outGap     = "gap"     // applied, but the messages before it from its origin were lost
	outInvalid = "invalid" // could not be decoded
	outOther   = "other"   // a kind this subject does not carry
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loadaware_replica_messages_sent_total",
			Help: "Messages this replica published to its peers, by kind (frames, delta, state, snapshot, kvsnapshot)."}, []string{"kind"}),
		sentBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loadaware_replica_bytes_sent_total",
			Help: "Payload bytes this replica published to its peers, by kind."}, []string{"kind"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loadaware_replica_messages_received_total",
			Help: "Peer messages received, by kind and outcome (applied, stale, gap, invalid, other)."}, []string{"kind", "outcome"}),
		receivedBytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "loadaware_replica_bytes_received_total",
			Help: "Payload bytes of the peer messages received."}),
		peers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "loadaware_replica_peers",
			Help: "Other replicas heard from within the peer timeout."}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{Name: "loadaware_replica_peers_expired_total",
			Help: "Peers dropped from the load view after the peer timeout without a message (their bookings with them)."}),
		corrections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loadaware_replica_load_corrections_total",
			Help: "Endpoint load views corrected by the engines' scraped counts: ceiling (peers' bookings above what the engine runs), fallback (NATS unreachable: the engine's count stands in for the peers)."}, []string{"kind"}),
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loadaware_replica_scrapes_total",
			Help: "Scrapes of the engines' vllm:num_requests_running and _waiting, by outcome (ok, error)."}, []string{"outcome"}),
		warm: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loadaware_replica_warm_starts_total",
			Help: "Warm starts, by outcome: snapshot (index taken from a peer), no-peer (none answered: started empty), timeout, gap (the stream after the snapshot missed frames), peers-heard (no LMCache index to take: the KV events streams are taken from the peers one by one)."}, []string{"outcome"}),
		warmSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "loadaware_replica_warm_start_seconds",
			Help: "Time from start to the index being warm (snapshot applied, or no peer)."}),
		served: prometheus.NewCounter(prometheus.CounterOpts{Name: "loadaware_replica_snapshots_served_total",
			Help: "Index snapshots sent to starting peers."}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "loadaware_replica_nats_connected",
			Help: "1 while the NATS connection is up."}),
		saves: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "loadaware_replica_state_file_saves_total",
			Help: "Writes of --state-file, by outcome (ok, error)."}, []string{"outcome"}),
		discarded: prometheus.NewCounter(prometheus.CounterOpts{Name: "loadaware_replica_restored_instances_discarded_total",
			Help: "LMCache instances restored from --state-file or a snapshot and dropped because their engine now speaks as another instance id."}),
	}
	for _, k := range []string{"frames", "delta", "state", "snapshot", "kvsnapshot"} {
		m.sent.WithLabelValues(k)
		m.sentBytes.WithLabelValues(k)
	}
	for _, k := range []string{"ceiling", "fallback"} {
		m.corrections.WithLabelValues(k)
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.sent, m.sentBytes, m.received, m.receivedBytes, m.peers, m.expired,
		m.corrections, m.scrapes, m.warm, m.warmSeconds, m.served, m.connected, m.saves, m.discarded} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
