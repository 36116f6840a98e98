package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/loadaware/loadaware-epp/kvindex"
	"github.com/tinylib/msgp/msgp"
)

// mp builds msgpack by hand, value by value, so the conformance frames below follow the
// documented layouts and not this package's encoder.
type mp []byte

func (m mp) arr(n int) mp    { return msgp.AppendArrayHeader(m, uint32(n)) }
func (m mp) mapN(n int) mp   { return msgp.AppendMapHeader(m, uint32(n)) }
func (m mp) str(s string) mp { return msgp.AppendString(m, s) }
func (m mp) i(v int64) mp    { return msgp.AppendInt64(m, v) }
func (m mp) u(v uint64) mp   { return msgp.AppendUint64(m, v) }
func (m mp) f(v float64) mp  { return msgp.AppendFloat64(m, v) }
func (m mp) nil() mp         { return msgp.AppendNil(m) }
func (m mp) bin(b []byte) mp { return msgp.AppendBytes(m, b) }
func (m mp) raw(b []byte) mp { return append(m, b...) }
func (m mp) ints(vs ...int64) mp {
	m = m.arr(len(vs))
	for _, v := range vs {
		m = m.i(v)
	}
	return m
}

// digest is a 32-byte sha256-sized hash whose last 8 bytes are v.
func digest(v uint64) []byte {
	d := bytes.Repeat([]byte{0xab}, 32)
	binary.BigEndian.PutUint64(d[24:], v)
	return d
}

func toks(n int, from uint32) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(from) + int64(i)
	}
	return out
}

func u32(vs []int64) []uint32 {
	out := make([]uint32, len(vs))
	for i, v := range vs {
		out[i] = uint32(v)
	}
	return out
}

// TestDecodeConformance decodes one frame per layout vLLM has published, each built from
// the layout documented for that release. Field order of BlockStored and the PR that
// added each field are from vllm#42892's enumeration and vllm/distributed/kv_events.py:
// block_hashes, parent_block_hash, token_ids, block_size, lora_id (#16750, v0.8/0.9),
// medium (#19737), lora_name (#27577), extra_keys (#33304), group_idx (#37688),
// kv_cache_spec_kind and kv_cache_spec_sliding_window (#40984). Trailing fields equal to
// their defaults are omitted (msgspec omit_defaults).
func TestDecodeConformance(t *testing.T) {
	t4 := toks(4, 100)
	t8 := toks(8, 100)
	tests := []struct {
		name    string
		payload mp
		want    kvindex.Batch
	}{{
		// v0.8/v0.9 (#16750): KVEventBatch(ts, events) before data_parallel_rank (#18925);
		// BlockStored ends at lora_id.
		name:    "v0.8 array batch without dp rank, five-field BlockStored",
		payload: mp{}.arr(2).f(1.5).arr(1).arr(6).str("BlockStored").ints(11, 12).nil().ints(t8...).i(4).nil(),
		want:    kvindex.Batch{TS: 1.5, DPRank: -1, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{11, 12}, Tokens: u32(t8), BlockSize: 4}}},
	}, {
		// v0.9.1+ (#18925, #19737): dp rank in the batch, medium in BlockStored.
		name:    "v0.9 array batch with dp rank 0, medium GPU",
		payload: mp{}.arr(3).f(2).arr(1).arr(7).str("BlockStored").ints(21).i(20).ints(t4...).i(4).nil().str("GPU").i(0),
		want:    kvindex.Batch{TS: 2, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{21}, Parent: 20, HasParent: true, Tokens: u32(t4), BlockSize: 4, Medium: "GPU"}}},
	}, {
		// v0.11+ (#27577): lora_name appended; a LoRA block carries it.
		name:    "v0.11 array event with lora_name",
		payload: mp{}.arr(3).f(3).arr(1).arr(8).str("BlockStored").ints(31).nil().ints(t4...).i(4).i(1).str("GPU").str("sql-lora").i(1),
		want:    kvindex.Batch{TS: 3, DPRank: 1, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{31}, Tokens: u32(t4), BlockSize: 4, LoRAID: 1, Medium: "GPU", LoRAName: "sql-lora"}}},
	}, {
		// #33304: extra_keys, one entry per block; None for a plain block.
		name:    "extra_keys all None is a plain block",
		payload: mp{}.arr(3).f(4).arr(1).arr(9).str("BlockStored").ints(41, 42).nil().ints(t8...).i(4).nil().str("GPU").nil().arr(2).nil().nil().nil(),
		want:    kvindex.Batch{TS: 4, DPRank: -1, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{41, 42}, Tokens: u32(t8), BlockSize: 4, Medium: "GPU"}}},
	}, {
		name:    "extra_keys with a cache_salt tuple on block 0",
		payload: mp{}.arr(3).f(4).arr(1).arr(9).str("BlockStored").ints(41, 42).nil().ints(t8...).i(4).nil().str("GPU").nil().arr(2).arr(1).str("salt").nil().i(0),
		want:    kvindex.Batch{TS: 4, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{41, 42}, Tokens: u32(t8), BlockSize: 4, Medium: "GPU", Salt: "salt"}}},
	}, {
		// A LoRA block: the adapter's name on every block, the salt after it on block 0.
		name:    "extra_keys with the lora_name on every block and a salt",
		payload: mp{}.arr(3).f(4).arr(1).arr(9).str("BlockStored").ints(41, 42).nil().ints(t8...).i(4).i(3).str("GPU").str("sql").arr(2).arr(2).str("sql").str("s1").arr(1).str("sql").i(0),
		want:    kvindex.Batch{TS: 4, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{41, 42}, Tokens: u32(t8), BlockSize: 4, LoRAID: 3, Medium: "GPU", LoRAName: "sql", Salt: "s1"}}},
	}, {
		// A multimodal item's key, (identifier, offset), is not a string: opaque.
		name:    "extra_keys with a multimodal item are opaque",
		payload: mp{}.arr(3).f(4).arr(1).arr(9).str("BlockStored").ints(41).nil().ints(t4...).i(4).nil().str("GPU").nil().arr(1).arr(1).arr(2).str("img-hash").i(0).i(0),
		want:    kvindex.Batch{TS: 4, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{41}, Tokens: u32(t4), BlockSize: 4, Medium: "GPU", ExtraKeys: true}}},
	}, {
		// Two strings on block 0 besides the LoRA name (a salt and an image id): opaque.
		name:    "extra_keys with two unknown strings on block 0 are opaque",
		payload: mp{}.arr(3).f(4).arr(1).arr(9).str("BlockStored").ints(41).nil().ints(t4...).i(4).nil().str("GPU").nil().arr(1).arr(2).str("s1").str("img").i(0),
		want:    kvindex.Batch{TS: 4, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{41}, Tokens: u32(t4), BlockSize: 4, Medium: "GPU", ExtraKeys: true}}},
	}, {
		// A string on a later block that is not the LoRA name: opaque.
		name:    "extra_keys with a string on block 1 other than the adapter are opaque",
		payload: mp{}.arr(3).f(4).arr(1).arr(9).str("BlockStored").ints(41, 42).nil().ints(t8...).i(4).nil().str("GPU").nil().arr(2).nil().arr(1).str("img").i(0),
		want:    kvindex.Batch{TS: 4, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{41, 42}, Tokens: u32(t8), BlockSize: 4, Medium: "GPU", ExtraKeys: true}}},
	}, {
		// vllm#48281 (v0.26) locality and vllm#52067 ownership, by name in a map event.
		name: "locality and ownership in map events",
		payload: mp{}.arr(3).f(4).arr(2).
			mapN(8).str("type").str("BlockStored").str("block_hashes").ints(41).str("parent_block_hash").nil().str("token_ids").ints(t4...).str("block_size").i(4).
			str("medium").str("STORAGE").str("locality").str("REMOTE").str("ownership").str("fs-tier").
			mapN(4).str("type").str("BlockRemoved").str("block_hashes").ints(41).str("medium").str("STORAGE").str("locality").str("REMOTE").i(0),
		want: kvindex.Batch{TS: 4, DPRank: 0, Events: []kvindex.Event{
			{Kind: kvindex.BlockStored, Hashes: []uint64{41}, Tokens: u32(t4), BlockSize: 4, Medium: "STORAGE", Locality: "REMOTE", Ownership: "fs-tier"},
			{Kind: kvindex.BlockRemoved, Hashes: []uint64{41}, Medium: "STORAGE", Locality: "REMOTE"}}},
	}, {
		// #37688 and #40984: HMA group and cache spec, every field present.
		name: "all eleven fields, sliding-window group 1",
		payload: mp{}.arr(3).f(5).arr(1).arr(12).str("BlockStored").ints(51).nil().ints(t4...).i(4).nil().str("GPU").nil().nil().
			i(1).str("sliding_window").i(4096).i(0),
		want: kvindex.Batch{TS: 5, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{51}, Tokens: u32(t4), BlockSize: 4, Medium: "GPU", Group: 1, SpecKind: "sliding_window", SlidingWindow: 4096}}},
	}, {
		// dynamo#3180: the int form may arrive signed (negative) or as uint64.
		name:    "v0.23 signed negative and unsigned large int hashes",
		payload: mp{}.arr(3).f(6).arr(1).arr(5).str("BlockStored").arr(2).i(-2).u(math.MaxUint64 - 2).nil().ints(t8...).i(4).nil(),
		want:    kvindex.Batch{TS: 6, DPRank: -1, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{math.MaxUint64 - 1, math.MaxUint64 - 2}, Tokens: u32(t8), BlockSize: 4}}},
	}, {
		// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0: raw 32-byte digests; folded to their
		// last 8 bytes, as int.from_bytes(h, "big") & (2**64-1) would give.
		name:    "bytes hashes fold to the int form",
		payload: mp{}.arr(3).f(7).arr(1).arr(7).str("BlockStored").arr(1).bin(digest(71)).bin(digest(70)).ints(t4...).i(4).nil().str("GPU").i(0),
		want:    kvindex.Batch{TS: 7, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockStored, Hashes: []uint64{71}, Parent: 70, HasParent: true, Tokens: u32(t4), BlockSize: 4, Medium: "GPU"}}},
	}, {
		// vllm#42892 (map events) as captured from v0.26.0 in kthena#1535:
		// [ts, [{...}], 0]; defaults omitted as missing keys; key order is free.
		name: "v0.26 map events in an array batch",
		payload: mp{}.arr(3).f(8).arr(2).
			mapN(5).str("block_hashes").ints(81).str("type").str("BlockStored").str("parent_block_hash").nil().str("token_ids").ints(t4...).str("block_size").i(4).
			mapN(3).str("type").str("BlockRemoved").str("block_hashes").ints(80).str("medium").str("CPU").i(2),
		want: kvindex.Batch{TS: 8, DPRank: 2, Events: []kvindex.Event{
			{Kind: kvindex.BlockStored, Hashes: []uint64{81}, Tokens: u32(t4), BlockSize: 4},
			{Kind: kvindex.BlockRemoved, Hashes: []uint64{80}, Medium: "CPU"}}},
	}, {
		// The code-index copy of kv_events.py at 0181ea31 declares EventBatch without
		// array_like: a map batch. Unknown batch keys are skipped.
		name:    "map batch with map events and an unknown key",
		payload: mp{}.mapN(4).str("ts").f(9).str("future").ints(1, 2).str("events").arr(1).mapN(1).str("type").str("AllBlocksCleared").str("data_parallel_rank").nil(),
		want:    kvindex.Batch{TS: 9, DPRank: -1, Events: []kvindex.Event{{Kind: kvindex.AllBlocksCleared}}},
	}, {
		name:    "array BlockRemoved with group and AllBlocksCleared",
		payload: mp{}.arr(3).i(10).arr(2).arr(4).str("BlockRemoved").arr(1).bin(digest(5)).str("GPU").i(0).arr(1).str("AllBlocksCleared").i(0),
		want:    kvindex.Batch{TS: 10, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockRemoved, Hashes: []uint64{5}, Medium: "GPU"}, {Kind: kvindex.AllBlocksCleared}}},
	}, {
		name:    "unknown tags are skipped, array and map",
		payload: mp{}.arr(3).f(11).arr(3).arr(2).str("BlockPinned").ints(1).mapN(2).str("type").str("Hint").str("x").i(1).arr(1).str("AllBlocksCleared").i(0),
		want:    kvindex.Batch{TS: 11, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.AllBlocksCleared}}, Skipped: 2},
	}, {
		name:    "a field after the newest known one is skipped",
		payload: mp{}.arr(3).f(12).arr(1).arr(7).str("BlockRemoved").ints(3).str("GPU").i(0).nil().nil().str("new-field").i(0),
		want:    kvindex.Batch{TS: 12, DPRank: 0, Events: []kvindex.Event{{Kind: kvindex.BlockRemoved, Hashes: []uint64{3}, Medium: "GPU"}}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.payload)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decode (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDecodeRejects feeds frames that must not decode; each returns a *DecodeError of the
// expected kind (the subscriber counts it and goes on).
func TestDecodeRejects(t *testing.T) {
	good := mp{}.arr(3).f(1).arr(1).arr(5).str("BlockStored").ints(1).nil().ints(1, 2).i(2).nil().i(0)
	tests := []struct {
		name    string
		payload []byte
		kind    string
	}{
		{"empty", nil, ErrKindMalformed},
		{"truncated", good[:len(good)-3], ErrKindMalformed},
		{"trailing bytes", mp{}.raw(good).i(1), ErrKindMalformed},
		{"a string, not a batch", mp{}.str("hello"), ErrKindMalformed},
		{"batch of one element", mp{}.arr(1).f(1), ErrKindMalformed},
		{"ts not a number", mp{}.arr(3).str("now").arr(0).nil(), ErrKindBadField},
		{"events not an array", mp{}.arr(3).f(1).i(5).nil(), ErrKindBadField},
		{"huge event count", mp{}.arr(3).f(1).raw([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}), ErrKindMalformed},
		{"huge token count", mp{}.arr(3).f(1).arr(1).arr(4).str("BlockStored").ints(1).nil().raw([]byte{0xdd, 0x7f, 0xff, 0xff, 0xff}), ErrKindBadField},
		{"hash a string", mp{}.arr(3).f(1).arr(1).arr(2).str("BlockRemoved").arr(1).str("h"), ErrKindBadField},
		{"token id negative", mp{}.arr(3).f(1).arr(1).arr(4).str("BlockStored").ints(1).nil().ints(-1), ErrKindBadField},
		{"token id too large", mp{}.arr(3).f(1).arr(1).arr(4).str("BlockStored").ints(1).nil().ints(1 << 33), ErrKindBadField},
		{"block size negative", mp{}.arr(3).f(1).arr(1).arr(5).str("BlockStored").ints(1).nil().ints(1).i(-4), ErrKindBadField},
		{"tag not a string", mp{}.arr(3).f(1).arr(1).arr(1).i(7), ErrKindBadField},
		{"map event without type", mp{}.arr(3).f(1).arr(1).mapN(1).str("block_hashes").ints(1), ErrKindBadField},
		{"event a number", mp{}.arr(3).f(1).arr(1).i(1), ErrKindMalformed},
		{"map batch without events", mp{}.mapN(1).str("ts").f(1), ErrKindBadField},
		{"medium a number", mp{}.arr(3).f(1).arr(1).arr(3).str("BlockRemoved").ints(1).i(3), ErrKindBadField},
		{"extra_keys entry a number", mp{}.arr(3).f(1).arr(1).arr(9).str("BlockStored").ints(1).nil().ints(1).i(1).nil().nil().nil().arr(1).i(1), ErrKindBadField},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.payload)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode = %v, want a *DecodeError", err)
			}
			if de.Kind != tc.kind {
				t.Errorf("kind %q, want %q (%v)", de.Kind, tc.kind, err)
			}
		})
	}
}

func TestSplitFrames(t *testing.T) {
	seq := func(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
	tests := []struct {
		name   string
		frames [][]byte
		replay bool
		want   Message
		bad    bool
	}{
		{"live", [][]byte{[]byte("kv@a"), seq(7), []byte{0x90}}, false, Message{Topic: []byte("kv@a"), Seq: 7, Payload: []byte{0x90}}, false},
		{"live with two frames", [][]byte{seq(7), []byte{0x90}}, false, Message{}, true},
		{"live with a short seq", [][]byte{nil, []byte{1}, []byte{0x90}}, false, Message{}, true},
		{"replay before vllm#45177: no topic", [][]byte{{}, seq(3), []byte{0x90}}, true, Message{Seq: 3, Payload: []byte{0x90}}, false},
		{"replay since vllm#45177: with topic", [][]byte{{}, []byte("t"), seq(3), []byte{0x90}}, true, Message{Topic: []byte("t"), Seq: 3, Payload: []byte{0x90}}, false},
		{"replay end marker", [][]byte{{}, seq(EndOfReplay), {}}, true, Message{Seq: EndOfReplay, Payload: []byte{}}, false},
		{"replay without delimiter", [][]byte{[]byte("x"), seq(3), []byte{0x90}}, true, Message{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			split := SplitLive
			if tc.replay {
				split = SplitReplay
			}
			got, err := split(tc.frames)
			if (err != nil) != tc.bad {
				t.Fatalf("err = %v, want error: %v", err, tc.bad)
			}
			if diff := cmp.Diff(tc.want, got); !tc.bad && diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestEncodeRoundTrip checks that every layout Encode writes decodes to the batch given.
func TestEncodeRoundTrip(t *testing.T) {
	b := kvindex.Batch{TS: 42.5, DPRank: 3, Events: []kvindex.Event{
		{Kind: kvindex.BlockStored, Hashes: []uint64{1, math.MaxUint64}, Parent: 9, HasParent: true, Tokens: u32(toks(8, 1)), BlockSize: 4, Medium: "CPU", LoRAName: "x", LoRAID: 2},
		{Kind: kvindex.BlockStored, Hashes: []uint64{5}, Tokens: u32(toks(4, 1)), BlockSize: 4, Group: 1, SpecKind: "full_attention", SlidingWindow: 0},
		{Kind: kvindex.BlockRemoved, Hashes: []uint64{1}, Medium: "GPU"},
		{Kind: kvindex.AllBlocksCleared},
	}}
	for _, l := range []Layout{{}, {MapEvents: true}, {BytesHashes: true}, {MapBatch: true, MapEvents: true, BytesHashes: true}} {
		got, err := Decode(Encode(b, l))
		if err != nil {
			t.Fatalf("%+v: %v", l, err)
		}
		if diff := cmp.Diff(b, got); diff != "" {
			t.Errorf("%+v (-want +got):\n%s", l, diff)
		}
	}
}

// FuzzDecode checks that no input panics the decoder or makes it return both an error
// and events, and that a decoded batch survives a re-encode.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(mp{}.arr(3).f(1).arr(1).arr(5).str("BlockStored").ints(1).nil().ints(1, 2).i(2).nil().i(0)))
	f.Add([]byte(mp{}.arr(3).f(8).arr(1).mapN(3).str("type").str("BlockRemoved").str("block_hashes").arr(1).bin(digest(1)).str("medium").str("CPU").nil()))
	f.Add(Encode(kvindex.Batch{DPRank: -1, Events: []kvindex.Event{{Kind: kvindex.AllBlocksCleared}}}, Layout{MapBatch: true, MapEvents: true}))
	for _, r := range releases { // every release's layout (corpus_test.go)
		f.Add(Encode(r.batch(), r.layout()))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := Decode(payload)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *DecodeError", err)
			}
			return
		}
		again, err := Decode(Encode(b, Layout{MapEvents: true}))
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if len(again.Events) != len(b.Events) {
			t.Fatalf("re-encode kept %d of %d events", len(again.Events), len(b.Events))
		}
	})
}
