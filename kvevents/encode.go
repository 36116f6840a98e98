package kvevents

import (
	"encoding/binary"

	"github.com/tinylib/msgp/msgp"
)

// Layout selects how Encode writes a batch, covering the layouts vLLM releases have used.
type Layout struct {
	MapBatch    bool // the batch as a map (the code-index copy's declaration) instead of [ts, events, dp_rank]
	MapEvents   bool // events as {"type": ..., field: ...} (since vllm#42892) instead of tagged arrays
	BytesHashes bool // hashes as 32-byte digests (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) instead of ints
}

// Encode writes b the way vLLM's msgspec encoder does in the given layout, with
// omit_defaults: trailing fields at their default are left out. A bytes hash is 24 zero
// bytes followed by the 8 bytes of the hash, so it folds back to the same value.
func Encode(b Batch, l Layout) []byte {
	var p []byte
	if l.MapBatch {
		p = msgp.AppendMapHeader(p, 3)
		p = msgp.AppendString(p, "ts")
		p = msgp.AppendFloat64(p, b.TS)
		p = msgp.AppendString(p, "events")
	} else {
		p = msgp.AppendArrayHeader(p, 3)
		p = msgp.AppendFloat64(p, b.TS)
	}
	p = msgp.AppendArrayHeader(p, uint32(len(b.Events)))
	for i := range b.Events {
		p = appendEvent(p, &b.Events[i], l)
	}
	if l.MapBatch {
		p = msgp.AppendString(p, "data_parallel_rank")
	}
	if b.DPRank < 0 {
		p = msgp.AppendNil(p)
	} else {
		p = msgp.AppendInt64(p, int64(b.DPRank))
	}
	return p
}

type field struct {
	name string
	set  bool // differs from the default
	put  func([]byte) []byte
}

func appendEvent(p []byte, ev *Event, l Layout) []byte {
	hash := func(p []byte, h uint64) []byte {
		if l.BytesHashes {
			var d [32]byte
			binary.BigEndian.PutUint64(d[24:], h)
			return msgp.AppendBytes(p, d[:])
		}
		return msgp.AppendUint64(p, h)
	}
	hashes := func(p []byte) []byte {
		p = msgp.AppendArrayHeader(p, uint32(len(ev.Hashes)))
		for _, h := range ev.Hashes {
			p = hash(p, h)
		}
		return p
	}
	optStr := func(s string) func([]byte) []byte {
		return func(p []byte) []byte {
			if s == "" {
				return msgp.AppendNil(p)
			}
			return msgp.AppendString(p, s)
		}
	}
	optInt := func(v int64) func([]byte) []byte {
		return func(p []byte) []byte {
			if v == 0 {
				return msgp.AppendNil(p)
			}
			return msgp.AppendInt64(p, v)
		}
	}
	var fs []field
	switch ev.Kind {
	case BlockStored:
		fs = []field{
			{"block_hashes", true, hashes},
			{"parent_block_hash", true, func(p []byte) []byte {
				if !ev.HasParent {
					return msgp.AppendNil(p)
				}
				return hash(p, ev.Parent)
			}},
			{"token_ids", true, func(p []byte) []byte {
				p = msgp.AppendArrayHeader(p, uint32(len(ev.Tokens)))
				for _, t := range ev.Tokens {
					p = msgp.AppendUint64(p, uint64(t))
				}
				return p
			}},
			{"block_size", true, func(p []byte) []byte { return msgp.AppendInt64(p, int64(ev.BlockSize)) }},
			{"lora_id", ev.LoRAID != 0, optInt(ev.LoRAID)},
			{"medium", ev.Medium != "", optStr(ev.Medium)},
			{"lora_name", ev.LoRAName != "", optStr(ev.LoRAName)},
			{"extra_keys", false, msgp.AppendNil},
			{"group_idx", ev.Group != 0, optInt(int64(ev.Group))},
			{"kv_cache_spec_kind", ev.SpecKind != "", optStr(ev.SpecKind)},
			{"kv_cache_spec_sliding_window", ev.SlidingWindow != 0, optInt(int64(ev.SlidingWindow))},
		}
	case BlockRemoved:
		fs = []field{
			{"block_hashes", true, hashes},
			{"medium", ev.Medium != "", optStr(ev.Medium)},
			{"group_idx", ev.Group != 0, optInt(int64(ev.Group))},
		}
	}
	n := len(fs)
	for n > 0 && !fs[n-1].set {
		n--
	}
	if l.MapEvents {
		m := 1
		for _, f := range fs[:n] {
			if f.set {
				m++
			}
		}
		p = msgp.AppendMapHeader(p, uint32(m))
		p = msgp.AppendString(p, "type")
		p = msgp.AppendString(p, ev.Kind.String())
		for _, f := range fs[:n] {
			if f.set {
				p = msgp.AppendString(p, f.name)
				p = f.put(p)
			}
		}
		return p
	}
	p = msgp.AppendArrayHeader(p, uint32(n+1))
	p = msgp.AppendString(p, ev.Kind.String())
	for _, f := range fs[:n] {
		p = f.put(p)
	}
	return p
}
