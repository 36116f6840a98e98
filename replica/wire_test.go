package replica

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/loadaware/loadaware-epp/fleet"
)

var wireCases = []struct {
	name string
	m    Message
}{
	{"frames", Message{Kind: KindFrames, Origin: 7, Seq: 3, Peer: "10.0.0.1", Frames: [][]byte{[]byte("a"), {}, []byte("bcd")}}},
	{"frames none", Message{Kind: KindFrames, Origin: 7, Seq: 1, Peer: "::1", Frames: [][]byte{}}},
	{"delta book", Message{Kind: KindDelta, Origin: 1 << 63, Seq: 1 << 40, Addr: "10.0.0.1:8000", Op: OpBook}},
	{"delta book tagged", Message{Kind: KindDelta, Origin: 5, Seq: 2, Addr: "10.0.0.1:8000", Op: OpBook, Tag: 1<<64 - 1}},
	{"delta release", Message{Kind: KindDelta, Origin: 2, Seq: 9, Addr: "[::1]:8000", Op: OpReleaseDecode}},
	{"state", Message{Kind: KindState, Origin: 3, Seq: 4, Loads: []fleet.Load{{Addr: "10.0.0.1:8000", Prefill: 2, Decode: 5}, {Addr: "10.0.0.2:8000"}}}},
	{"snapshot end", Message{Kind: KindSnapEnd, Origin: 3, Chunks: 12, Seqs: map[uint64]uint64{1: 5, 99: 0}}},
}

func TestWireRoundTrip(t *testing.T) {
	for _, tc := range wireCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode(AppendEncode(nil, tc.m))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.m, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("round trip (-sent +decoded):\n%s", diff)
			}
		})
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := AppendEncode(nil, wireCases[0].m)
	tests := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "version: truncated"},
		{"other version", append([]byte{2}, good[1:]...), "version 2"},
		{"unknown kind", append([]byte{1, 9}, good[2:]...), "unknown kind 9"},
		{"truncated", good[:len(good)-1], "past the end"},
		{"trailing bytes", append(bytes.Clone(good), 0), "1 bytes after"},
		{"a tag on a release", append(AppendEncode(nil, Message{Kind: KindDelta, Addr: "x", Op: OpReleasePrefill}), 7), "1 bytes after"},
		{"truncated tag", append(AppendEncode(nil, Message{Kind: KindDelta, Addr: "x", Op: OpBook}), 0x80), "tag"},
		{"unknown delta op", AppendEncode(nil, Message{Kind: KindDelta, Addr: "x", Op: 9}), "unknown booking change 9"},
		{"frame count over the bytes", append(AppendEncode(nil, Message{Kind: KindFrames, Peer: "p"})[:11+2], 0xff, 0x01), "count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.b)
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Errorf("Decode: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// FuzzDecode: no input panics, and whatever decodes encodes back to the same bytes
// (KindSnapEnd aside: its map has no order).
func FuzzDecode(f *testing.F) {
	for _, tc := range wireCases {
		f.Add(AppendEncode(nil, tc.m))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil || m.Kind == KindSnapEnd {
			return
		}
		if again := AppendEncode(nil, m); !bytes.Equal(again, b) {
			m2, err := Decode(again)
			if err != nil || !cmp.Equal(m, m2, cmpopts.EquateEmpty()) {
				t.Fatalf("re-encoding differs: %x -> %x (%v)", b, again, err)
			}
		}
	})
}

func TestParseEngineLoad(t *testing.T) {
	tests := []struct {
		name, page string
		want       int
		err        bool
	}{
		{"running and waiting", "# HELP x\nvllm:num_requests_running 3\nvllm:num_requests_waiting 2\n", 5, false},
		{"labels summed", "vllm:num_requests_running{model_name=\"a\"} 1\nvllm:num_requests_running{model_name=\"b\"} 2.0 1700000000\n", 3, false},
		{"prefix of another name ignored", "vllm:num_requests_running_total 9\nvllm:num_requests_waiting 1\n", 1, false},
		{"neither exported", "up 1\n", 0, true},
		{"not a number", "vllm:num_requests_running x\n", 0, true},
		{"negative", "vllm:num_requests_waiting -1\n", 0, true},
		{"unterminated labels", "vllm:num_requests_running{a=\"b\" 1\n", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEngineLoad([]byte(tc.page))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("ParseEngineLoad = %d, %v; want %d, error %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func FuzzParseEngineLoad(f *testing.F) {
	f.Add([]byte("vllm:num_requests_running{a=\"}\"} 3\nvllm:num_requests_waiting 1e3\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := ParseEngineLoad(b); err == nil && n < 0 {
			t.Fatalf("negative load %d", n)
		}
	})
}
