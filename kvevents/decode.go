package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/tinylib/msgp/msgp"
)

// The kinds of DecodeError (they label a metric).
const (
	ErrKindFrames    = "frames"    // not [topic, seq, payload] (or a replay reply)
	ErrKindMalformed = "malformed" // not msgpack, truncated, or a length past the frame
	ErrKindBadField  = "bad_field" // a field of the wrong type or out of range
)

// DecodeError says why a frame or payload could not be decoded.
type DecodeError struct {
	Kind string // one of the ErrKind* constants
	Err  error
}

func (e *DecodeError) Error() string { return fmt.Sprintf("kvevents: decode (%s): %v", e.Kind, e.Err) }

func (e *DecodeError) Unwrap() error { return e.Err }

func malformed(format string, a ...any) error {
	return &DecodeError{Kind: ErrKindMalformed, Err: fmt.Errorf(format, a...)}
}

func badField(name string, err error) error {
	kind := ErrKindBadField
	if errors.Is(err, msgp.ErrShortBytes) {
		kind = ErrKindMalformed // truncated, not mistyped
	}
	return &DecodeError{Kind: kind, Err: fmt.Errorf("field %s: %w", name, err)}
}

// EndOfReplay is the sequence number of a replay's end marker.
const EndOfReplay = -1

// Message is one multipart message split into its parts.
type Message struct {
	Topic   []byte
	Seq     int64
	Payload []byte
}

// SplitLive splits a live PUB message: [topic, seq (8 bytes big-endian), payload].
func SplitLive(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, &DecodeError{Kind: ErrKindFrames, Err: fmt.Errorf("%d frames, want [topic, seq, payload]", len(frames))}
	}
	return split(frames[0], frames[1], frames[2])
}

// SplitReplay splits a replay reply as a DEALER receives it: ["", seq, payload] from
// vLLM before the topic was added to replies (vllm#45177), ["", topic, seq, payload]
// since. The end marker has seq EndOfReplay and an empty payload.
func SplitReplay(frames [][]byte) (Message, error) {
	if len(frames) < 1 || len(frames[0]) != 0 {
		return Message{}, &DecodeError{Kind: ErrKindFrames, Err: errors.New("replay reply without the empty delimiter frame")}
	}
	switch len(frames) {
	case 3:
		return split(nil, frames[1], frames[2])
	case 4:
		return split(frames[1], frames[2], frames[3])
	}
	return Message{}, &DecodeError{Kind: ErrKindFrames, Err: fmt.Errorf("replay reply of %d frames, want 3 or 4", len(frames))}
}

func split(topic, seq, payload []byte) (Message, error) {
	if len(seq) != 8 {
		return Message{}, &DecodeError{Kind: ErrKindFrames, Err: fmt.Errorf("sequence frame of %d bytes, want 8", len(seq))}
	}
	return Message{Topic: topic, Seq: int64(binary.BigEndian.Uint64(seq)), Payload: payload}, nil
}

// Limits bound what one payload may make the decoder allocate.
const (
	maxEvents      = 1 << 16
	maxBlocksEvent = 1 << 16
	maxTokensEvent = 1 << 22
)

// Decode decodes a KVEventBatch payload in any layout vLLM has used: the batch as a
// positional array [ts, events, dp_rank] (every release so far) or a map with those
// field names; each event as a tagged array ["BlockStored", fields...] (through v0.23) or
// a map {"type": "BlockStored", field: value} (since vllm#42892); trailing fields left
// at their defaults may be absent in either form. Hashes may be signed or unsigned
// integers or bytes. Events of an unknown tag are skipped and counted in Skipped;
// anything else that does not decode returns a *DecodeError.
func Decode(payload []byte) (kvindex.Batch, error) {
	b := kvindex.Batch{DPRank: -1}
	if len(payload) == 0 {
		return b, malformed("empty payload")
	}
	var err error
	switch msgp.NextType(payload) {
	case msgp.ArrayType:
		var n uint32
		n, payload, err = msgp.ReadArrayHeaderBytes(payload)
		if err != nil {
			return b, malformed("batch header: %v", err)
		}
		if n < 2 || n > 3 {
			return b, malformed("batch array of %d elements, want [ts, events, dp_rank]", n)
		}
		if b.TS, payload, err = readFloat(payload); err != nil {
			return b, badField("ts", err)
		}
		if payload, err = readEvents(&b, payload); err != nil {
			return b, err
		}
		if n == 3 {
			if b.DPRank, payload, err = readOptInt(payload, -1); err != nil {
				return b, badField("data_parallel_rank", err)
			}
		}
	case msgp.MapType:
		var n uint32
		n, payload, err = msgp.ReadMapHeaderBytes(payload)
		if err != nil {
			return b, malformed("batch header: %v", err)
		}
		seen := false
		for i := uint32(0); i < n; i++ {
			var k []byte
			if k, payload, err = msgp.ReadMapKeyZC(payload); err != nil {
				return b, malformed("batch key: %v", err)
			}
			switch string(k) {
			case "ts":
				if b.TS, payload, err = readFloat(payload); err != nil {
					return b, badField("ts", err)
				}
			case "events":
				seen = true
				if payload, err = readEvents(&b, payload); err != nil {
					return b, err
				}
			case "data_parallel_rank":
				if b.DPRank, payload, err = readOptInt(payload, -1); err != nil {
					return b, badField("data_parallel_rank", err)
				}
			default:
				if payload, err = msgp.Skip(payload); err != nil {
					return b, malformed("batch field %q: %v", k, err)
				}
			}
		}
		if !seen {
			return b, badField("events", errors.New("missing"))
		}
	default:
		return b, malformed("payload is a msgpack %s, want an array or map", msgp.NextType(payload))
	}
	if len(payload) != 0 {
		return b, malformed("%d bytes after the batch", len(payload))
	}
	return b, nil
}

func readEvents(b *kvindex.Batch, p []byte) ([]byte, error) {
	n, p, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil {
		return p, badField("events", err)
	}
	if n > maxEvents || int(n) > len(p) {
		return p, malformed("%d events in %d bytes", n, len(p))
	}
	b.Events = make([]kvindex.Event, 0, n)
	for i := uint32(0); i < n; i++ {
		var ev kvindex.Event
		var known bool
		if ev, known, p, err = readEvent(p); err != nil {
			return p, err
		}
		if !known {
			b.Skipped++
			continue
		}
		b.Events = append(b.Events, ev)
	}
	return p, nil
}

// Positional field names, in the order vLLM declares them (see the package tests for
// the PR that added each).
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality", "ownership"}
	removedFields = []string{"block_hashes", "medium", "group_idx", "locality", "ownership"}
)

func parseTag(t []byte) kvindex.Kind {
	switch string(t) {
	case "BlockStored":
		return kvindex.BlockStored
	case "BlockRemoved":
		return kvindex.BlockRemoved
	case "AllBlocksCleared":
		return kvindex.AllBlocksCleared
	}
	return 0
}

// readEvent reads one tagged event; known is false for an unknown tag (skipped whole).
func readEvent(p []byte) (ev kvindex.Event, known bool, rest []byte, err error) {
	var xk extraKeys
	switch msgp.NextType(p) {
	case msgp.ArrayType:
		var n uint32
		if n, p, err = msgp.ReadArrayHeaderBytes(p); err != nil || n == 0 {
			return ev, false, p, malformed("event header: want [tag, fields...] (%v)", err)
		}
		var tag []byte
		if tag, p, err = msgp.ReadStringZC(p); err != nil {
			return ev, false, p, badField("event tag", err)
		}
		ev.Kind = parseTag(tag)
		var names []string
		switch ev.Kind {
		case kvindex.BlockStored:
			names = storedFields
		case kvindex.BlockRemoved:
			names = removedFields
		}
		for i := uint32(1); i < n; i++ {
			if ev.Kind == 0 || int(i-1) >= len(names) {
				// Unknown tag, or a field added after the newest we know: skip it.
				if p, err = msgp.Skip(p); err != nil {
					return ev, false, p, malformed("event %q field %d: %v", tag, i, err)
				}
				continue
			}
			if p, err = readField(&ev, &xk, names[i-1], p); err != nil {
				return ev, false, p, err
			}
		}
	case msgp.MapType:
		var n uint32
		if n, p, err = msgp.ReadMapHeaderBytes(p); err != nil {
			return ev, false, p, malformed("event header: %v", err)
		}
		hasTag := false
		for i := uint32(0); i < n; i++ {
			var k []byte
			if k, p, err = msgp.ReadMapKeyZC(p); err != nil {
				return ev, false, p, malformed("event key: %v", err)
			}
			if string(k) == "type" {
				var tag []byte
				if tag, p, err = msgp.ReadStringZC(p); err != nil {
					return ev, false, p, badField("type", err)
				}
				ev.Kind, hasTag = parseTag(tag), true
				continue
			}
			// Fields are read into ev whatever the tag (the tag may come last); an
			// unknown field name is skipped.
			if p, err = readField(&ev, &xk, string(k), p); err != nil {
				return ev, false, p, err
			}
		}
		if !hasTag {
			return ev, false, p, badField("type", errors.New("missing from a map-encoded event"))
		}
	default:
		return ev, false, p, malformed("event is a msgpack %s, want an array or map", msgp.NextType(p))
	}
	if ev.Kind == 0 {
		return kvindex.Event{}, false, p, nil
	}
	xk.resolve(&ev)
	return ev, true, p, nil
}

func readField(ev *kvindex.Event, xk *extraKeys, name string, p []byte) ([]byte, error) {
	var err error
	switch name {
	case "block_hashes":
		ev.Hashes, p, err = readHashes(p)
	case "parent_block_hash":
		if msgp.IsNil(p) {
			p, err = msgp.ReadNilBytes(p)
		} else {
			ev.Parent, p, err = readHash(p)
			ev.HasParent = err == nil
		}
	case "token_ids":
		ev.Tokens, p, err = readTokens(p)
	case "block_size":
		ev.BlockSize, p, err = readOptInt(p, 0)
		if err == nil && ev.BlockSize < 0 {
			err = fmt.Errorf("negative block size %d", ev.BlockSize)
		}
	case "lora_id":
		var id int
		id, p, err = readOptInt(p, 0)
		ev.LoRAID = int64(id)
	case "medium":
		ev.Medium, p, err = readOptStr(p)
	case "lora_name":
		ev.LoRAName, p, err = readOptStr(p)
	case "extra_keys":
		p, err = xk.read(p)
	case "group_idx":
		ev.Group, p, err = readOptInt(p, 0)
	case "kv_cache_spec_kind":
		ev.SpecKind, p, err = readOptStr(p)
	case "kv_cache_spec_sliding_window":
		ev.SlidingWindow, p, err = readOptInt(p, 0)
	case "locality":
		ev.Locality, p, err = readOptStr(p)
	case "ownership":
		ev.Ownership, p, err = readOptStr(p)
	default:
		if p, err = msgp.Skip(p); err != nil {
			return p, malformed("field %q: %v", name, err)
		}
		return p, nil
	}
	if err != nil {
		return p, badField(name, err)
	}
	return p, nil
}

// readHash reads an ExternalBlockHash: an int of either sign or bytes.
func readHash(p []byte) (uint64, []byte, error) {
	switch msgp.NextType(p) {
	case msgp.IntType:
		v, rest, err := msgp.ReadInt64Bytes(p)
		return uint64(v), rest, err
	case msgp.UintType:
		return msgp.ReadUint64Bytes(p)
	case msgp.BinType:
		b, rest, err := msgp.ReadBytesZC(p)
		if err != nil {
			return 0, rest, err
		}
		return foldBytes(b), rest, nil
	}
	return 0, p, fmt.Errorf("hash is a msgpack %s, want int or bytes", msgp.NextType(p))
}

// foldBytes is int.from_bytes(b, "big") & (2**64-1): the last 8 bytes, big-endian.
func foldBytes(b []byte) uint64 {
	var v uint64
	if len(b) > 8 {
		b = b[len(b)-8:]
	}
	for _, c := range b {
		v = v<<8 | uint64(c)
	}
	return v
}

func readHashes(p []byte) ([]uint64, []byte, error) {
	n, p, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil {
		return nil, p, err
	}
	if n > maxBlocksEvent || int(n) > len(p) {
		return nil, p, fmt.Errorf("%d hashes in %d bytes", n, len(p))
	}
	out := make([]uint64, n)
	for i := range out {
		if out[i], p, err = readHash(p); err != nil {
			return nil, p, fmt.Errorf("hash %d: %w", i, err)
		}
	}
	return out, p, nil
}

func readTokens(p []byte) ([]uint32, []byte, error) {
	n, p, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil {
		return nil, p, err
	}
	if n > maxTokensEvent || int(n) > len(p) {
		return nil, p, fmt.Errorf("%d token ids in %d bytes", n, len(p))
	}
	out := make([]uint32, n)
	for i := range out {
		var v int64
		if v, p, err = msgp.ReadInt64Bytes(p); err != nil {
			return nil, p, fmt.Errorf("token %d: %w", i, err)
		}
		if v < 0 || v > math.MaxUint32 {
			return nil, p, fmt.Errorf("token %d: id %d out of range", i, v)
		}
		out[i] = uint32(v)
	}
	return out, p, nil
}

// extraKeys is what the decoder keeps of an event's extra_keys ([tuple|None]|None, one
// entry per block) until the event's lora_name is known (a map may name it later). vLLM
// builds a block's tuple from the LoRA name (every block), multimodal items, the
// cache_salt (block 0 only) and prompt embeds' hashes (kv_cache_utils.py
// generate_block_hash_extra_keys).
type extraKeys struct {
	first  []string // block 0's string keys (at most 3 kept: more is opaque anyway)
	later  []string // the distinct string keys of later blocks (at most 2 kept)
	opaque bool     // a key a router cannot compute: not a string, or one string too many
}

func (x *extraKeys) read(p []byte) ([]byte, error) {
	if msgp.IsNil(p) {
		return msgp.ReadNilBytes(p)
	}
	n, p, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil {
		return p, err
	}
	if int(n) > len(p) {
		return p, fmt.Errorf("%d entries in %d bytes", n, len(p))
	}
	for i := uint32(0); i < n; i++ {
		switch {
		case msgp.IsNil(p):
			p, err = msgp.ReadNilBytes(p)
		case msgp.NextType(p) == msgp.ArrayType:
			var m uint32
			if m, p, err = msgp.ReadArrayHeaderBytes(p); err != nil {
				break
			}
			for j := uint32(0); j < m && err == nil; j++ {
				if msgp.NextType(p) != msgp.StrType {
					x.opaque = true
					p, err = msgp.Skip(p)
					continue
				}
				var k []byte
				if k, p, err = msgp.ReadStringZC(p); err != nil {
					break
				}
				x.add(i == 0, k)
			}
		default:
			err = fmt.Errorf("entry %d is a msgpack %s, want a tuple or None", i, msgp.NextType(p))
		}
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

func (x *extraKeys) add(first bool, k []byte) {
	switch {
	case first && len(x.first) < 3:
		x.first = append(x.first, string(k))
	case first:
		x.opaque = true
	case slices.Contains(x.later, string(k)):
	case len(x.later) < 2:
		x.later = append(x.later, string(k))
	default:
		x.opaque = true
	}
}

// resolve sets ev.Salt and ev.ExtraKeys: each block's keys may be the event's
// lora_name, and block 0's one more string, its cache_salt; anything else is opaque.
func (x *extraKeys) resolve(ev *kvindex.Event) {
	opaque := x.opaque
	first := x.first
	if i := slices.Index(first, ev.LoRAName); i >= 0 && ev.LoRAName != "" {
		first = slices.Delete(slices.Clone(first), i, i+1)
	}
	switch len(first) {
	case 0:
	case 1:
		ev.Salt = first[0]
	default:
		opaque = true
	}
	for _, k := range x.later {
		if k != ev.LoRAName {
			opaque = true
		}
	}
	ev.ExtraKeys = opaque
}

func readFloat(p []byte) (float64, []byte, error) {
	switch msgp.NextType(p) {
	case msgp.Float64Type:
		return msgp.ReadFloat64Bytes(p)
	case msgp.Float32Type:
		f, rest, err := msgp.ReadFloat32Bytes(p)
		return float64(f), rest, err
	case msgp.IntType, msgp.UintType:
		v, rest, err := msgp.ReadInt64Bytes(p)
		return float64(v), rest, err
	}
	return 0, p, fmt.Errorf("a msgpack %s, want a number", msgp.NextType(p))
}

// readOptInt reads an int or None (def); values must fit an int32.
func readOptInt(p []byte, def int) (int, []byte, error) {
	if msgp.IsNil(p) {
		p, err := msgp.ReadNilBytes(p)
		return def, p, err
	}
	v, p, err := msgp.ReadInt64Bytes(p)
	if err != nil {
		return def, p, err
	}
	if v < math.MinInt32 || v > math.MaxInt32 {
		return def, p, fmt.Errorf("%d out of range", v)
	}
	return int(v), p, nil
}

func readOptStr(p []byte) (string, []byte, error) {
	if msgp.IsNil(p) {
		p, err := msgp.ReadNilBytes(p)
		return "", p, err
	}
	s, p, err := msgp.ReadStringZC(p)
	return string(s), p, err
}
