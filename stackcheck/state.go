package stackcheck

import "github.com/loadaware/loadaware-epp/cachealarm"

// PickerState is the JSON body of the picker's GET /admin/state: what a check needs of
// the picker that its metrics cannot show.
type PickerState struct {
	Endpoints   []string `json:"endpoints"`
	CacheSource string   `json:"cache_source"` // lmcache, vllm-events or both
	// Tokenizer describes the picker's tokenizer; empty: none (text and chat prompts are
	// routed on load alone).
	Tokenizer  string          `json:"tokenizer"`
	FromEngine bool            `json:"tokenizer_from_engine,omitempty"`
	LMCache    *LMCacheState   `json:"lmcache,omitempty"`
	KVEvents   *KVEventsState  `json:"kv_events,omitempty"`
	Alarm      *AlarmState     `json:"cache_alarm,omitempty"`
	Replicas   *ReplicasConfig `json:"replicas,omitempty"`
}

// LMCacheState is the embedded LMCache controller.
type LMCacheState struct {
	HashSeed  string `json:"hash_seed"`
	ChunkSize int    `json:"chunk_size"`
	KeyFormat string `json:"key_format"`
	// PullPort and ReplyPort are the bound controller ports (0: off).
	PullPort  int        `json:"pull_port"`
	ReplyPort int        `json:"reply_port"`
	Instances []Instance `json:"instances"`
}

// Instance is one LMCache instance the controller knows.
type Instance struct {
	ID         string  `json:"id"`
	IP         string  `json:"ip"`
	State      string  `json:"state"` // "active" when credited
	Keys       int     `json:"keys"`
	Heartbeats bool    `json:"heartbeats"`
	LastSeen   float64 `json:"last_seen_seconds_ago"`
}

// KVEventsState is the vLLM KV events source.
type KVEventsState struct {
	Port       int      `json:"port"`
	ReplayPort int      `json:"replay_port"`
	Ranks      int      `json:"ranks"`
	Streams    []Stream `json:"streams"`
}

// Stream is what the picker has received of one endpoint's KV events.
type Stream struct {
	Endpoint  string  `json:"endpoint"`
	Seq       int64   `json:"seq"`     // the last batch's sequence number
	Batches   int64   `json:"batches"` // batches received
	LastBatch float64 `json:"last_batch_seconds_ago"`
}

// AlarmState is the cache-signal-dead alarm.
type AlarmState struct {
	WindowSeconds float64            `json:"window_seconds"`
	Endpoints     []cachealarm.State `json:"endpoints"`
}

// ReplicasConfig says that the picker shares state with replicas over NATS.
type ReplicasConfig struct {
	Subject string `json:"subject"`
}

// Lookup is the JSON answer of the picker's POST /admin/lookup: its token ids for a
// prompt (a body as vLLM's /tokenize takes it) and how much of it each endpoint holds.
type Lookup struct {
	Tokens  []uint32       `json:"tokens"`
	Matched map[string]int `json:"matched"`
	Error   string         `json:"error,omitempty"` // why there are no ids (then Tokens is empty)
}
