package kvevents

import (
	"encoding/binary"

	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/tinylib/msgp/msgp"
)

// Layout selects how Encode writes a batch, covering the layouts vLLM releases have used.
type Layout struct {
	MapBatch    bool // the batch as a map (the code-index copy's declaration) instead of [ts, events, dp_rank]
	MapEvents   bool // events as {"type": ..., field: ...} (since vllm#42892) instead of tagged arrays
	BytesHashes bool // hashes as 32-byte digests (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) instead of ints
	// StoredFields and RemovedFields are how many fields of BlockStored and BlockRemoved
	// the release declares (a prefix of the order Decode knows); 0: all of them.
	StoredFields, RemovedFields int
	// NoDPRank writes the batch as [ts, events], before data_parallel_rank (vllm#18925).
	NoDPRank bool
}

// Fields vLLM declares without a default, so msgspec writes them even when None:
// BlockStored's first seven (through lora_name), BlockRemoved's first two.
const storedRequired, removedRequired = 7, 2

// Encode writes b the way vLLM's msgspec encoder does in the given layout, with
// omit_defaults: trailing fields at their default are left out. A bytes hash is 24 zero
// bytes followed by the 8 bytes of the hash, so it folds back to the same value.
func Encode(b kvindex.Batch, l Layout) []byte {
	var p []byte
	switch {
	case l.MapBatch:
		p = msgp.AppendMapHeader(p, 3)
		p = msgp.AppendString(p, "ts")
		p = msgp.AppendFloat64(p, b.TS)
		p = msgp.AppendString(p, "events")
	case l.NoDPRank:
		p = msgp.AppendArrayHeader(p, 2)
		p = msgp.AppendFloat64(p, b.TS)
	default:
		p = msgp.AppendArrayHeader(p, 3)
		p = msgp.AppendFloat64(p, b.TS)
	}
	p = msgp.AppendArrayHeader(p, uint32(len(b.Events)))
	for i := range b.Events {
		p = appendEvent(p, &b.Events[i], l)
	}
	if l.NoDPRank && !l.MapBatch {
		return p
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

func appendEvent(p []byte, ev *kvindex.Event, l Layout) []byte {
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
	required := 0
	switch ev.Kind {
	case kvindex.BlockStored:
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
			{"extra_keys", ev.LoRAName != "" || ev.Salt != "", func(p []byte) []byte {
				// vLLM's order within a block's tuple: the LoRA name, then the salt (block 0).
				p = msgp.AppendArrayHeader(p, uint32(len(ev.Hashes)))
				for i := range ev.Hashes {
					var ks []string
					if ev.LoRAName != "" {
						ks = append(ks, ev.LoRAName)
					}
					if i == 0 && ev.Salt != "" {
						ks = append(ks, ev.Salt)
					}
					if ks == nil {
						p = msgp.AppendNil(p)
						continue
					}
					p = msgp.AppendArrayHeader(p, uint32(len(ks)))
					for _, k := range ks {
						p = msgp.AppendString(p, k)
					}
				}
				return p
			}},
			{"group_idx", ev.Group != 0, optInt(int64(ev.Group))},
			{"kv_cache_spec_kind", ev.SpecKind != "", optStr(ev.SpecKind)},
			{"kv_cache_spec_sliding_window", ev.SlidingWindow != 0, optInt(int64(ev.SlidingWindow))},
			{"locality", ev.Locality != "", optStr(ev.Locality)},
			{"ownership", ev.Ownership != "", optStr(ev.Ownership)},
		}
		fs, required = declared(fs, l.StoredFields), storedRequired
	case kvindex.BlockRemoved:
		fs = []field{
			{"block_hashes", true, hashes},
			{"medium", ev.Medium != "", optStr(ev.Medium)},
			{"group_idx", ev.Group != 0, optInt(int64(ev.Group))},
			{"locality", ev.Locality != "", optStr(ev.Locality)},
			{"ownership", ev.Ownership != "", optStr(ev.Ownership)},
		}
		fs, required = declared(fs, l.RemovedFields), removedRequired
	}
	for i := range min(required, len(fs)) {
		fs[i].set = true
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

// SeqFrame is the 8-byte big-endian sequence frame of a live message, a replay reply or
// a replay request.
func SeqFrame(seq int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(seq)) }

// declared is the first n fields of fs (all when n is 0): what a release declares.
func declared(fs []field, n int) []field {
	if n <= 0 || n >= len(fs) {
		return fs
	}
	return fs[:n]
}
