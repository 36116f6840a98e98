package lmcache

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// unhex decodes hex written with spaces and "quoted" ASCII runs, as the spec prints them.
func unhex(t testing.TB, s string) []byte {
	t.Helper()
	var out []byte
	for _, f := range strings.Fields(s) {
		if strings.HasPrefix(f, `"`) && strings.HasSuffix(f, `"`) && len(f) >= 2 {
			out = append(out, f[1:len(f)-1]...)
			continue
		}
		b, err := hex.DecodeString(f)
		if err != nil {
			t.Fatalf("bad hex %q: %v", f, err)
		}
		out = append(out, b...)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// Byte vectors produced by msgspec 0.19.0 (spec/lmcache-controller.md).
const (
	specAdmit = `85 a4 74 79 70 65 aa 4b 56 41 64 6d 69 74 4d 73 67 ab 69 6e 73 74 61 6e 63 65 5f 69 64 a6 76 6c
6c 6d 2d 30 a9 77 6f 72 6b 65 72 5f 69 64 00 a3 6b 65 79 d3 b1 b7 bc 81 62 37 a1 c6 a8 6c 6f 63
61 74 69 6f 6e af 4c 6f 63 61 6c 43 50 55 42 61 63 6b 65 6e 64`
	specRegister = `86 a4 74 79 70 65 ab 52 65 67 69 73 74 65 72 4d 73 67 ab 69 6e 73 74 61 6e 63 65 5f 69 64 a6 76
6c 6c 6d 2d 30 a9 77 6f 72 6b 65 72 5f 69 64 00 a2 69 70 a8 31 30 2e 30 2e 30 2e 37 a4 70 6f 72
74 cd 1f 41 af 64 69 73 74 72 69 62 75 74 65 64 5f 75 72 6c af 6c 6f 63 61 6c 68 6f 73 74 3a 33
30 30 38 31`
	specRegisterRet  = `82 a4 "type" ae "RegisterRetMsg" ac "extra_config" 80`
	specHeartbeatRet = `82 a4 "type" af "HeartbeatRetMsg" a8 "commands" 90`
)

func specEvict(t testing.TB) []byte {
	b := unhex(t, specAdmit)
	return bytes.Replace(b, unhex(t, `aa "KVAdmitMsg"`), unhex(t, `aa 4b 56 45 76 69 63 74 4d 73 67`), 1)
}

func TestEncodeMatchesMsgspecBytes(t *testing.T) {
	tests := []struct {
		name string
		msg  Message
		want string
	}{
		{"KVAdmitMsg 0.3.9", KVAdmitMsg{InstanceID: "vllm-0", Key: -5640832744373640762, Location: "LocalCPUBackend"}, specAdmit},
		{"RegisterMsg 0.3.9", RegisterMsg{InstanceID: "vllm-0", IP: "10.0.0.7", Port: 8001, DistributedURL: ptr("localhost:30081")}, specRegister},
		{"RegisterRetMsg empty", RegisterRetMsg{}, specRegisterRet},
		{"HeartbeatRetMsg", HeartbeatRetMsg{}, specHeartbeatRet},
		// Built by hand from msgspec's rules: None is c0, positive ints use the unsigned forms.
		{"RegisterMsg newer, peer_init_url None", RegisterMsg{InstanceID: "vllm-0", IP: "10.0.0.7", Port: 8001},
			`86 a4 "type" ab "RegisterMsg" ab "instance_id" a6 "vllm-0" a9 "worker_id" 00 a2 "ip" a8 "10.0.0.7" a4 "port" cd 1f 41 ad "peer_init_url" c0`},
		{"HeartbeatMsg newer, peer_init_url set", HeartbeatMsg{InstanceID: "a", WorkerID: 1, IP: "1.2.3.4", Port: 70000, PeerInitURL: ptr("p:1")},
			`86 a4 "type" ac "HeartbeatMsg" ab "instance_id" a1 "a" a9 "worker_id" 01 a2 "ip" a7 "1.2.3.4" a4 "port" ce 00 01 11 70 ad "peer_init_url" a3 "p:1"`},
		{"KVAdmitMsg newer with seq_num", KVAdmitMsg{InstanceID: "i", WorkerID: 200, Key: 3067829022414786342, Location: "L", SeqNum: ptr(int64(-33))},
			`86 a4 "type" aa "KVAdmitMsg" ab "instance_id" a1 "i" a9 "worker_id" cc c8 a3 "key" cf 2a 93 1e 3d e8 aa cf 26 a8 "location" a1 "L" a7 "seq_num" d0 df`},
		{"RegisterRetMsg with heartbeat_url", RegisterRetMsg{ExtraConfig: map[string]string{"heartbeat_url": "10.0.0.1:9010"}},
			`82 a4 "type" ae "RegisterRetMsg" ac "extra_config" 81 ad "heartbeat_url" ad "10.0.0.1:9010"`},
		{"ErrorMsg with a str8 text", ErrorMsg{Error: strings.Repeat("x", 40)},
			`82 a4 "type" a8 "ErrorMsg" a5 "error" d9 28 "` + strings.Repeat("x", 40) + `"`},
		{"BatchedKVOperationMsg", BatchedKVOperationMsg{InstanceID: "i", Location: "L", Operations: []KVOp{{Op: OpAdmit, Key: -1, SeqNum: 0}, {Op: OpEvict, Key: 1 << 40, SeqNum: 1}}},
			`85 a4 "type" b5 "BatchedKVOperationMsg" ab "instance_id" a1 "i" a9 "worker_id" 00 a8 "location" a1 "L" aa "operations" 92
			 83 a7 "op_type" a5 "admit" a3 "key" ff a7 "seq_num" 00
			 83 a7 "op_type" a5 "evict" a3 "key" cf 00 00 01 00 00 00 00 00 a7 "seq_num" 01`},
		{"FullSyncBatchMsg", FullSyncBatchMsg{InstanceID: "i", Location: "L", SyncID: "s", BatchID: 2, Keys: []int64{-200, 65535}},
			`87 a4 "type" b0 "FullSyncBatchMsg" ab "instance_id" a1 "i" a9 "worker_id" 00 a8 "location" a1 "L" a7 "sync_id" a1 "s" a8 "batch_id" 02 a4 "keys" 92 d1 ff 38 cd ff ff`},
		{"FullSyncEndMsg", FullSyncEndMsg{InstanceID: "i", Location: "L", SyncID: "s", ActualTotalKeys: 128},
			`86 a4 "type" ae "FullSyncEndMsg" ab "instance_id" a1 "i" a9 "worker_id" 00 a8 "location" a1 "L" a7 "sync_id" a1 "s" b1 "actual_total_keys" cc 80`},
		{"DeRegisterMsg", DeRegisterMsg{InstanceID: "i", WorkerID: 3, IP: "::1", Port: 1},
			`85 a4 "type" ad "DeRegisterMsg" ab "instance_id" a1 "i" a9 "worker_id" 03 a2 "ip" a3 "::1" a4 "port" 01`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Encode(tc.msg)
			if err != nil {
				t.Fatal(err)
			}
			if want := unhex(t, tc.want); !bytes.Equal(got, want) {
				t.Fatalf("Encode(%+v)\n got % x\nwant % x", tc.msg, got, want)
			}
		})
	}
	t.Run("KVEvictMsg 0.3.9", func(t *testing.T) {
		got, err := Encode(KVEvictMsg{InstanceID: "vllm-0", Key: -5640832744373640762, Location: "LocalCPUBackend"})
		if err != nil {
			t.Fatal(err)
		}
		if want := specEvict(t); !bytes.Equal(got, want) || len(got) != 85 {
			t.Fatalf("got % x\nwant % x", got, want)
		}
	})
}

func TestEncodeRefusesForeignTypes(t *testing.T) {
	type other struct{ Message }
	for _, m := range []Message{nil, other{}} {
		if _, err := Encode(m); err == nil {
			t.Errorf("Encode(%#v) succeeded; want an error", m)
		}
	}
}

func TestDecodeTolerance(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte
		want  Message
	}{
		{"spec KVAdmitMsg", unhex(t, specAdmit), KVAdmitMsg{InstanceID: "vllm-0", Key: -5640832744373640762, Location: "LocalCPUBackend"}},
		{"spec KVEvictMsg", specEvict(t), KVEvictMsg{InstanceID: "vllm-0", Key: -5640832744373640762, Location: "LocalCPUBackend"}},
		{"spec RegisterMsg", unhex(t, specRegister), RegisterMsg{InstanceID: "vllm-0", IP: "10.0.0.7", Port: 8001, DistributedURL: ptr("localhost:30081")}},
		{"spec RegisterRetMsg", unhex(t, specRegisterRet), RegisterRetMsg{ExtraConfig: map[string]string{}}},
		{"spec HeartbeatRetMsg", unhex(t, specHeartbeatRet), HeartbeatRetMsg{}},
		{"HeartbeatRetMsg with a command is skipped",
			unhex(t, `82 a4 "type" af "HeartbeatRetMsg" a8 "commands" 91 83 a4 "type" a9 "full_sync" a6 "reason" a1 "r" a4 "args" 80`), HeartbeatRetMsg{}},
		{"key as uint64 keeps its bits", unhex(t, `83 a4 "type" aa "KVAdmitMsg" ab "instance_id" a1 "i" a3 "key" cf ff ff ff ff ff ff ff fe`),
			KVAdmitMsg{InstanceID: "i", Key: -2}},
		{"narrow integer widths", unhex(t, `84 a4 "type" aa "KVEvictMsg" ab "instance_id" a1 "i" a9 "worker_id" d0 02 a3 "key" d2 ff ff ff fe`),
			KVEvictMsg{InstanceID: "i", WorkerID: 2, Key: -2}},
		{"wide encoding of a small worker id", unhex(t, `84 a4 "type" aa "KVAdmitMsg" ab "instance_id" a1 "i" a3 "key" 05 a9 "worker_id" cf 00 00 00 00 00 00 00 07`),
			KVAdmitMsg{InstanceID: "i", WorkerID: 7, Key: 5}},
		{"type last, unknown keys and nested values skipped",
			unhex(t, `85 a7 "unknown" 82 a1 "a" 91 c3 a1 "b" c0 ab "instance_id" a1 "i" a3 "key" 07 a8 "location" c0 a4 "type" aa "KVAdmitMsg"`),
			KVAdmitMsg{InstanceID: "i", Key: 7}},
		{"register without worker_id, port or URLs", unhex(t, `82 a4 "type" ab "RegisterMsg" ab "instance_id" a1 "i"`), RegisterMsg{InstanceID: "i"}},
		{"register with peer_init_url nil", unhex(t, `83 a4 "type" ab "RegisterMsg" ab "instance_id" a1 "i" ad "peer_init_url" c0`), RegisterMsg{InstanceID: "i"}},
		{"str8 and map16 forms", unhex(t, `de 00 02 a4 "type" d9 0c "HeartbeatMsg" ab "instance_id" d9 01 "x"`), HeartbeatMsg{InstanceID: "x"}},
		{"JSON KVAdmitMsg with a uint64 key", []byte(`{"type":"KVAdmitMsg","instance_id":"i","worker_id":1,"key":18446744073709551614,"location":"LocalCPUBackend","seq_num":4,"extra":[1,2]}`),
			KVAdmitMsg{InstanceID: "i", WorkerID: 1, Key: -2, Location: "LocalCPUBackend", SeqNum: ptr(int64(4))}},
		{"JSON RegisterMsg newer", []byte(`{"type":"RegisterMsg","instance_id":"i","worker_id":0,"ip":"10.0.0.9","port":8001,"peer_init_url":null}`),
			RegisterMsg{InstanceID: "i", IP: "10.0.0.9", Port: 8001}},
		{"JSON BatchedKVOperationMsg", []byte(`{"type":"BatchedKVOperationMsg","instance_id":"i","worker_id":0,"location":"L","operations":[{"op_type":"admit","key":-5,"seq_num":1},{"op_type":"evict","key":5}]}`),
			BatchedKVOperationMsg{InstanceID: "i", Location: "L", Operations: []KVOp{{Op: OpAdmit, Key: -5, SeqNum: 1}, {Op: OpEvict, Key: 5}}}},
		{"JSON FullSyncBatchMsg", []byte(`{"type":"FullSyncBatchMsg","instance_id":"i","worker_id":0,"location":"L","sync_id":"s","batch_id":0,"keys":[1,-1]}`),
			FullSyncBatchMsg{InstanceID: "i", Location: "L", SyncID: "s", Keys: []int64{1, -1}}},
		{"JSON RegisterRetMsg", []byte(`{"type":"RegisterRetMsg","extra_config":{"heartbeat_url":"h:1"}}`), RegisterRetMsg{ExtraConfig: map[string]string{"heartbeat_url": "h:1"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(tc.frame)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("Decode mismatch (-want +got):\n%s", d)
			}
		})
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name  string
		frame []byte
		kind  string
	}{
		{"empty frame", nil, KindMalformed},
		{"msgpack nil", []byte{0xc0}, KindMalformed},
		{"never-used byte", []byte{0xc1}, KindMalformed},
		{"array instead of map", unhex(t, `92 01 02`), KindMalformed},
		{"truncated", unhex(t, specAdmit)[:60], KindMalformed},
		{"no type", unhex(t, `81 ab "instance_id" a1 "i"`), KindMalformed},
		{"type not a string", unhex(t, `81 a4 "type" 01`), KindMalformed},
		{"non-string map key", unhex(t, `81 01 02`), KindMalformed},
		{"unknown type", unhex(t, `81 a4 "type" b1 "FullSyncStartMsg1"`), KindUnknownType},
		{"orchestrator message", unhex(t, `82 a4 "type" a9 "LookupMsg" a6 "tokens" 90`), KindUnknownType},
		{"admit without key", unhex(t, `82 a4 "type" aa "KVAdmitMsg" ab "instance_id" a1 "i"`), KindMissingField},
		{"admit with nil key", unhex(t, `83 a4 "type" aa "KVAdmitMsg" ab "instance_id" a1 "i" a3 "key" c0`), KindMissingField},
		{"register without instance_id", unhex(t, `81 a4 "type" ab "RegisterMsg"`), KindMissingField},
		{"batched op without key", unhex(t, `83 a4 "type" b5 "BatchedKVOperationMsg" ab "instance_id" a1 "i" aa "operations" 91 81 a7 "op_type" a5 "admit"`), KindMissingField},
		{"key as string", unhex(t, `83 a4 "type" aa "KVAdmitMsg" ab "instance_id" a1 "i" a3 "key" a1 "1"`), KindBadField},
		{"key as float", unhex(t, `83 a4 "type" aa "KVAdmitMsg" ab "instance_id" a1 "i" a3 "key" cb 3f f0 00 00 00 00 00 00`), KindBadField},
		{"worker id beyond int64", unhex(t, `84 a4 "type" aa "KVAdmitMsg" ab "instance_id" a1 "i" a3 "key" 01 a9 "worker_id" cf ff ff ff ff ff ff ff ff`), KindBadField},
		{"port out of range", unhex(t, `83 a4 "type" ab "RegisterMsg" ab "instance_id" a1 "i" a4 "port" cf 00 00 00 01 00 00 00 00`), KindBadField},
		{"bad op_type", unhex(t, `83 a4 "type" b5 "BatchedKVOperationMsg" ab "instance_id" a1 "i" aa "operations" 91 82 a7 "op_type" a4 "move" a3 "key" 01`), KindBadField},
		{"bad JSON", []byte(`{"type":`), KindMalformed},
		{"JSON key as string", []byte(`{"type":"KVAdmitMsg","instance_id":"i","key":"1"}`), KindBadField},
		{"JSON key fractional", []byte(`{"type":"KVAdmitMsg","instance_id":"i","key":1.5}`), KindBadField},
		{"JSON unknown type", []byte(`{"type":"Nope"}`), KindUnknownType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.frame)
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Decode = %#v, %v; want a *DecodeError", m, err)
			}
			if de.Kind != tc.kind {
				t.Fatalf("kind = %s (%v), want %s", de.Kind, err, tc.kind)
			}
		})
	}
}

func TestDecodeEveryPrefixOfAValidFrameFails(t *testing.T) {
	for _, frame := range [][]byte{unhex(t, specAdmit), unhex(t, specRegister), mustEncode(t, BatchedKVOperationMsg{InstanceID: "i", Operations: []KVOp{{Op: OpAdmit, Key: 1}}})} {
		for n := 0; n < len(frame); n++ {
			if m, err := Decode(frame[:n]); err == nil {
				t.Fatalf("Decode of %d-byte prefix = %#v, want an error", n, m)
			}
		}
	}
}

func mustEncode(t testing.TB, m Message) []byte {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// randomMessage builds a message of every encodable type with random contents.
func randomMessage(r *rand.Rand) Message {
	str := func() string {
		b := make([]byte, r.IntN(40))
		for i := range b {
			b[i] = byte('a' + r.IntN(26))
		}
		return string(b)
	}
	i64 := func() int64 {
		switch r.IntN(4) {
		case 0:
			return int64(r.Uint64())
		case 1:
			return int64(r.IntN(300)) - 150
		case 2:
			return int64(r.Uint32()) - 1<<31
		}
		return r.Int64N(1 << 20)
	}
	small := func() int { return int(r.Int32N(1<<31-1)) - r.IntN(2)*(1<<30) }
	optStr := func() *string {
		if r.IntN(2) == 0 {
			return nil
		}
		return ptr(str())
	}
	switch r.IntN(11) {
	case 0:
		m := RegisterMsg{InstanceID: str(), WorkerID: small(), IP: str(), Port: small(), PeerInitURL: optStr()}
		if r.IntN(2) == 0 {
			m.DistributedURL, m.PeerInitURL = ptr(str()), nil
		}
		return m
	case 1:
		return HeartbeatMsg{InstanceID: str(), WorkerID: small(), IP: str(), Port: small(), PeerInitURL: optStr()}
	case 2:
		return DeRegisterMsg{InstanceID: str(), WorkerID: small(), IP: str(), Port: small()}
	case 3, 4:
		m := KVAdmitMsg{InstanceID: str(), WorkerID: small(), Key: i64(), Location: str()}
		if r.IntN(2) == 0 {
			m.SeqNum = ptr(i64())
		}
		if r.IntN(2) == 0 {
			return KVEvictMsg(m)
		}
		return m
	case 5:
		ops := make([]KVOp, r.IntN(60))
		for i := range ops {
			ops[i] = KVOp{Op: []OpType{OpAdmit, OpEvict}[r.IntN(2)], Key: i64(), SeqNum: i64()}
		}
		return BatchedKVOperationMsg{InstanceID: str(), WorkerID: small(), Location: str(), Operations: ops}
	case 6:
		keys := make([]int64, r.IntN(300))
		for i := range keys {
			keys[i] = i64()
		}
		return FullSyncBatchMsg{InstanceID: str(), WorkerID: small(), Location: str(), SyncID: str(), BatchID: small(), Keys: keys}
	case 7:
		return FullSyncEndMsg{InstanceID: str(), WorkerID: small(), Location: str(), SyncID: str(), ActualTotalKeys: small()}
	case 8:
		extra := map[string]string{}
		for range r.IntN(4) {
			extra[str()] = str()
		}
		return RegisterRetMsg{ExtraConfig: extra}
	case 9:
		return HeartbeatRetMsg{}
	}
	return ErrorMsg{Error: str()}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 3000; i++ {
		m := randomMessage(r)
		b := mustEncode(t, m)
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("Decode(Encode(%#v)): %v", m, err)
		}
		if d := cmp.Diff(m, got); d != "" {
			t.Fatalf("round trip mismatch (-sent +decoded):\n%s", d)
		}
	}
}

// FuzzDecode checks that no frame panics the decoder and that whatever decodes re-encodes
// to bytes that decode to the same message.
func FuzzDecode(f *testing.F) {
	f.Add(unhex(f, specAdmit))
	f.Add(unhex(f, specRegister))
	f.Add(unhex(f, specRegisterRet))
	f.Add(unhex(f, specHeartbeatRet))
	f.Add([]byte(`{"type":"KVAdmitMsg","instance_id":"i","key":1}`))
	r := rand.New(rand.NewPCG(3, 4))
	for range 8 {
		f.Add(mustEncode(f, randomMessage(r)))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		m, err := Decode(frame)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *DecodeError", err)
			}
			return
		}
		b1, err := Encode(m)
		if err != nil {
			t.Fatalf("decoded %#v but cannot encode it: %v", m, err)
		}
		m2, err := Decode(b1)
		if err != nil {
			t.Fatalf("re-encoded %#v does not decode: %v", m, err)
		}
		b2, err := Encode(m2)
		if err != nil || !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not stable: % x vs % x (%v)", b1, b2, err)
		}
	})
}

func BenchmarkDecodeAdmit(b *testing.B) {
	frame := unhex(b, specAdmit)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeAdmit(b *testing.B) {
	m := KVAdmitMsg{InstanceID: "vllm-0", Key: -5640832744373640762, Location: "LocalCPUBackend"}
	buf := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		var err error
		if buf, err = AppendEncode(buf[:0], m); err != nil {
			b.Fatal(err)
		}
	}
}
