package trace

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"hash/maphash"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/internal/errcheck"
)

func TestReadRefusesWhatIsNotATrace(t *testing.T) {
	ok := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`
	cases := []struct {
		name, in, want string
	}{
		{"empty", "", "the trace is empty"},
		{"only blank lines", "\n\n  \n", "the trace is empty"},
		{"not JSON", "hello", "line 1"},
		{"unknown key", `{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [1], "text": "x"}`, `unknown field "text"`},
		{"missing timestamp", `{"input_length": 5, "output_length": 5, "hash_ids": [1]}`, `missing key "timestamp"`},
		{"missing input", `{"timestamp": 0, "output_length": 5, "hash_ids": [1]}`, `missing key "input_length"`},
		{"missing output", `{"timestamp": 0, "input_length": 5, "hash_ids": [1]}`, `missing key "output_length"`},
		{"missing ids", `{"timestamp": 0, "input_length": 5, "output_length": 5}`, `missing key "hash_ids"`},
		{"negative timestamp", `{"timestamp": -1, "input_length": 5, "output_length": 5, "hash_ids": [1]}`, "timestamp -1"},
		{"zero input", `{"timestamp": 0, "input_length": 0, "output_length": 5, "hash_ids": [1]}`, "input_length 0"},
		{"zero output", `{"timestamp": 0, "input_length": 5, "output_length": 0, "hash_ids": [1]}`, "output_length 0"},
		{"no ids", `{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": []}`, "hash_ids is empty"},
		{"more tokens than blocks", `{"timestamp": 0, "input_length": 513, "output_length": 5, "hash_ids": [1]}`, "more than its 1 hash_ids hold"},
		{"empty last block", `{"timestamp": 0, "input_length": 512, "output_length": 5, "hash_ids": [1, 2]}`, "leaves its last of 2 hash_ids empty"},
		{"negative id", `{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [-3]}`, "hash_ids[0] = -3"},
		{"fractional length", `{"timestamp": 0, "input_length": 5.5, "output_length": 5, "hash_ids": [1]}`, "line 1"},
		{"two values", ok + ok, "more than one JSON value"},
		{"out of order", ok + "\n" + strings.Replace(ok, `"timestamp": 0`, `"timestamp": 9`, 1) + "\n" + ok, "line 3: timestamp 0 ms is before the line before's 9 ms"},
		{"line too long", strings.Repeat("x", maxLineBytes+1), "longer than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Read: got error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestReadTakesPlainAndGzip(t *testing.T) {
	in := "{\"timestamp\": 1.5, \"input_length\": 600, \"output_length\": 7, \"hash_ids\": [4, 9]}\n\n" +
		"{\"timestamp\": 20, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [4]}\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(in))
	zw.Close()
	for name, src := range map[string][]byte{"plain": []byte(in), "gzip": gz.Bytes()} {
		t.Run(name, func(t *testing.T) {
			recs, err := Read(bytes.NewReader(src))
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 2 {
				t.Fatalf("got %d records, want 2", len(recs))
			}
			r := recs[0]
			if r.Line != 1 || r.At != 1500*time.Microsecond || r.InputTokens != 600 || r.OutputTokens != 7 || len(r.Blocks) != 2 || r.Blocks[1] != 9 {
				t.Fatalf("first record %+v", r)
			}
			if recs[1].Line != 3 || recs[1].At != 20*time.Millisecond {
				t.Fatalf("second record %+v: want line 3 (the blank line counts) at 20ms", recs[1])
			}
		})
	}
}

func TestOpenNamesTheTraceAfterItsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent-trace.jsonl")
	os.WriteFile(path, []byte(`{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [1]}`), 0o600)
	tr, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Name != "agent-trace" || len(tr.Records) != 1 {
		t.Fatalf("got %q with %d records", tr.Name, len(tr.Records))
	}
	if _, err := Open(filepath.Join(t.TempDir(), "missing.jsonl")); err == nil {
		t.Fatal("a missing file gave no error")
	}
	if _, err := Load("mooncake-nothing"); err == nil {
		t.Fatal("an unknown name gave no error")
	}
}

func recs(specs ...[3]int) []Record {
	var out []Record
	for i, s := range specs {
		blocks := make([]int64, (s[1]+BlockTokens-1)/BlockTokens)
		for j := range blocks {
			blocks[j] = int64(100*i + j)
		}
		out = append(out, Record{Line: i + 1, At: time.Duration(s[0]) * time.Millisecond, InputTokens: s[1], OutputTokens: s[2], Blocks: blocks})
	}
	return out
}

func TestSelect(t *testing.T) {
	in := recs([3]int{0, 1000, 10}, [3]int{1000, 3000, 10}, [3]int{2000, 500, 3000}, [3]int{3000, 200, 20})
	cases := []struct {
		name      string
		o         Options
		lines     []int
		sendAt    []time.Duration
		inputs    []int
		capped    int
		dropped   int
		wantError string
	}{
		{name: "all at pace", o: Options{Speedup: 1}, lines: []int{1, 2, 3, 4}, sendAt: []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second}, inputs: []int{1000, 3000, 500, 200}},
		{name: "twice as fast", o: Options{Speedup: 2}, lines: []int{1, 2, 3, 4}, sendAt: []time.Duration{0, 500 * time.Millisecond, time.Second, 1500 * time.Millisecond}, inputs: []int{1000, 3000, 500, 200}},
		{name: "window counts from its start", o: Options{Speedup: 1, Window: Window{From: time.Second, To: 3 * time.Second}}, lines: []int{2, 3}, sendAt: []time.Duration{0, time.Second}, inputs: []int{3000, 500}},
		{name: "request cap", o: Options{Speedup: 1, MaxRequests: 2}, lines: []int{1, 2}, sendAt: []time.Duration{0, time.Second}, inputs: []int{1000, 3000}},
		{name: "context caps the prompt's tail", o: Options{Speedup: 1, Context: 2010}, lines: []int{1, 2, 4}, sendAt: []time.Duration{0, time.Second, 3 * time.Second}, inputs: []int{1000, 2000, 200}, capped: 1, dropped: 1},
		{name: "context drops", o: Options{Speedup: 1, Context: 2010, OverLong: Drop}, lines: []int{1, 4}, sendAt: []time.Duration{0, 3 * time.Second}, inputs: []int{1000, 200}, dropped: 2},
		{name: "zero speed-up", o: Options{}, wantError: "speed-up 0"},
		{name: "inverted window", o: Options{Speedup: 1, Window: Window{From: 2 * time.Second, To: time.Second}}, wantError: "window"},
		{name: "negative cap", o: Options{Speedup: 1, MaxRequests: -1}, wantError: "request cap -1"},
		{name: "empty window", o: Options{Speedup: 1, Window: Window{From: time.Hour}}, wantError: "no request in the window"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sel, err := Select(in, c.o)
			if errcheck.Done(t, err, c.wantError) {
				return
			}
			if len(sel.Requests) != len(c.lines) || sel.Capped != c.capped || sel.Dropped != c.dropped {
				t.Fatalf("got %d requests, %d capped, %d dropped; want %d, %d, %d", len(sel.Requests), sel.Capped, sel.Dropped, len(c.lines), c.capped, c.dropped)
			}
			for i, q := range sel.Requests {
				if q.Line != c.lines[i] || q.SendAt != c.sendAt[i] || q.InputTokens != c.inputs[i] {
					t.Errorf("request %d: line %d at %v with %d tokens; want line %d at %v with %d", i, q.Line, q.SendAt, q.InputTokens, c.lines[i], c.sendAt[i], c.inputs[i])
				}
				if want := (q.InputTokens + BlockTokens - 1) / BlockTokens; len(q.Blocks) != want {
					t.Errorf("request %d: %d blocks for %d tokens, want %d", i, len(q.Blocks), q.InputTokens, want)
				}
			}
		})
	}
}

func TestWindowsCoverTheSpanOnce(t *testing.T) {
	in := recs([3]int{100, 5, 5}, [3]int{400, 5, 5}, [3]int{700, 5, 5}, [3]int{1000, 5, 5})
	ws, err := Windows(in, 3)
	if err != nil {
		t.Fatal(err)
	}
	if ws[0].From != in[0].At || ws[2].To <= in[3].At {
		t.Fatalf("windows %v do not cover [%v, %v]", ws, in[0].At, in[3].At)
	}
	seen := 0
	for i, w := range ws {
		if i > 0 && w.From != ws[i-1].To {
			t.Fatalf("window %d starts at %v, the one before ends at %v", i, w.From, ws[i-1].To)
		}
		sel, err := Select(in, Options{Window: w, Speedup: 1})
		if err == nil {
			seen += len(sel.Requests)
		}
	}
	if seen != len(in) {
		t.Fatalf("the windows hold %d requests, the trace %d", seen, len(in))
	}
	if _, err := Windows(in, 0); err == nil {
		t.Fatal("0 windows gave no error")
	}
}

func TestReuseCeiling(t *testing.T) {
	q := func(n int, blocks ...int64) Request { return Request{InputTokens: n, Blocks: blocks} }
	cases := []struct {
		name           string
		reqs           []Request
		reusable       int64
		reusableBlocks int64
	}{
		{"nothing shared", []Request{q(600, 1, 2), q(600, 3, 4)}, 0, 0},
		{"a whole prefix again", []Request{q(1024, 1, 2), q(1100, 1, 2, 3)}, 1024, 2},
		{"a run ends at the first new block", []Request{q(1536, 1, 2, 3), q(1536, 1, 9, 3)}, 512, 1},
		{"a partial block credits what was held", []Request{q(700, 1, 2), q(1024, 1, 2)}, 700, 1},
		{"a longer partial block counts what the earlier held", []Request{q(600, 1, 2), q(900, 1, 2)}, 600, 1},
		{"the same request twice", []Request{q(800, 5, 6), q(800, 5, 6)}, 800, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			u := ReuseCeiling(c.reqs)
			if u.Reusable != c.reusable || u.ReusableBlocks != c.reusableBlocks {
				t.Fatalf("reusable %d tokens, %d blocks; want %d, %d", u.Reusable, u.ReusableBlocks, c.reusable, c.reusableBlocks)
			}
		})
	}
}

func TestTokenMapIsAFixedRunPerBlock(t *testing.T) {
	m := TokenMap{Base: 10000, Size: 128}
	a := m.AppendTokens(nil, []int64{7, 8}, 600)
	b := m.AppendTokens(nil, []int64{7, 9}, 1024)
	if len(a) != 600 || len(b) != 1024 {
		t.Fatalf("lengths %d, %d", len(a), len(b))
	}
	if !slices.Equal(a[:512], b[:512]) {
		t.Fatal("the same first block gave different tokens")
	}
	if slices.Equal(a[512:600], b[512:600]) {
		t.Fatal("different second blocks gave the same tokens")
	}
	for _, id := range a {
		if id < m.Base || id >= m.Base+m.Size {
			t.Fatalf("token %d outside [%d, %d)", id, m.Base, m.Base+m.Size)
		}
	}
}

// TestEmbeddedConversationReplaysItsOwnReuse checks the carried conversation
// trace against the facts its source states, and that the prompts built from
// it share exactly the blocks its ids share: the reuse counted from the ids
// equals the reuse counted by hashing the built prompts' token runs.
func TestEmbeddedConversationReplaysItsOwnReuse(t *testing.T) {
	tr, err := Embedded("mooncake-conversation")
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Records) != 5719 || tr.Records[len(tr.Records)-1].At >= 1800*time.Second {
		t.Fatalf("%d records ending at %v; want the first half: 5,719 before 1,800 s", len(tr.Records), tr.Records[len(tr.Records)-1].At)
	}
	o := Options{Speedup: 1}
	if raceEnabled {
		o.MaxRequests = 500 // the race detector makes the whole trace's hashing take a minute
	}
	sel, err := Select(tr.Records, o)
	if err != nil {
		t.Fatal(err)
	}
	fromIDs := ReuseCeiling(sel.Requests)

	// The same count from the prompts themselves: each whole 512-token block is
	// known by the hash of everything before and in it.
	seed := maphash.MakeSeed()
	seen := make(map[uint64]bool)
	var reusable, blocks int64
	m := TokenMap{Base: 10000, Size: 128}
	var toks []uint32
	buf := make([]byte, 8+4*BlockTokens)
	for _, q := range sel.Requests {
		toks = m.AppendTokens(toks[:0], q.Blocks, q.InputTokens)
		var h uint64
		open := true
		for j := 0; (j+1)*BlockTokens <= len(toks); j++ {
			binary.LittleEndian.PutUint64(buf, h)
			for i, x := range toks[j*BlockTokens : (j+1)*BlockTokens] {
				binary.LittleEndian.PutUint32(buf[8+4*i:], x)
			}
			h = maphash.Bytes(seed, buf)
			blocks++
			if open && seen[h] {
				reusable++
			} else {
				open = false
			}
			seen[h] = true
		}
	}
	if blocks != fromIDs.Blocks || reusable != fromIDs.ReusableBlocks {
		t.Fatalf("from the prompts: %d of %d whole blocks reusable; from the ids: %d of %d", reusable, blocks, fromIDs.ReusableBlocks, fromIDs.Blocks)
	}
	t.Logf("conversation first half: %d requests, reusable %.4f of tokens, %d of %d whole blocks", len(sel.Requests), fromIDs.Fraction(), fromIDs.ReusableBlocks, fromIDs.Blocks)
}

func FuzzRead(f *testing.F) {
	f.Add([]byte(`{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`))
	f.Add([]byte("{\"timestamp\": 3, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [0]}\n{\"timestamp\": 2}"))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Read(bytes.NewReader(b))
		if err != nil {
			return
		}
		var last time.Duration
		for _, r := range got {
			if r.InputTokens < 1 || r.OutputTokens < 1 || r.At < last || r.InputTokens > len(r.Blocks)*BlockTokens || r.InputTokens <= (len(r.Blocks)-1)*BlockTokens {
				t.Fatalf("Read accepted a record that breaks its contract: %+v", r)
			}
			last = r.At
		}
	})
}
