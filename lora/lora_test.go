package lora

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseInfo(t *testing.T) {
	tests := []struct {
		name    string
		labels  map[string]string
		want    Info
		wantErr string
	}{
		{"vLLM's idle engine", map[string]string{LabelMax: "4", LabelRunning: "", LabelWaiting: ""}, Info{MaxLoRA: 4}, ""},
		{"names split, trimmed, sorted, deduplicated", map[string]string{LabelMax: "2", LabelRunning: "sql, chat,sql", LabelWaiting: ",math,"},
			Info{MaxLoRA: 2, Running: []string{"chat", "sql"}, Waiting: []string{"math"}}, ""},
		{"missing labels read as empty", map[string]string{}, Info{}, ""},
		{"a bad max_lora", map[string]string{LabelMax: "many"}, Info{}, `max_lora label "many"`},
		{"a negative max_lora", map[string]string{LabelMax: "-1"}, Info{}, "not a count"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseInfo(tc.labels)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestLatest: the series set last wins; a malformed one is skipped.
func TestLatest(t *testing.T) {
	old := Series{Labels: map[string]string{LabelMax: "2", LabelRunning: "a"}, Value: 100}
	cur := Series{Labels: map[string]string{LabelMax: "2", LabelRunning: "b"}, Value: 200}
	bad := Series{Labels: map[string]string{LabelMax: "x"}, Value: 300}
	if got, ok := Latest([]Series{cur, old, bad}); !ok || !cmp.Equal(got.Running, []string{"b"}) {
		t.Fatalf("Latest = %+v, %v; want the series at 200", got, ok)
	}
	if _, ok := Latest([]Series{bad}); ok {
		t.Fatal("Latest of only a malformed series must report none")
	}
}

func TestState(t *testing.T) {
	full := Info{MaxLoRA: 2, Running: []string{"a", "b"}, Waiting: []string{"c"}}
	free := Info{MaxLoRA: 2, Running: []string{"a"}}
	tests := []struct {
		in      Info
		adapter string
		want    State
	}{
		{full, "a", Active}, {full, "c", Active}, {full, "d", SlotsFull},
		{free, "a", Active}, {free, "d", FreeSlot},
		{Info{Running: []string{"a"}}, "d", Unknown},
	}
	for _, tc := range tests {
		if got := tc.in.State(tc.adapter); got != tc.want {
			t.Errorf("%+v.State(%q) = %v, want %v", tc.in, tc.adapter, got, tc.want)
		}
	}
	var tb Table
	tb.Set("e1", full)
	tb.Set("e2", free)
	if tb.State("e1", "d") != SlotsFull || tb.State("e2", "d") != FreeSlot || tb.State("e3", "d") != Unknown {
		t.Fatal("Table.State disagrees with Info.State")
	}
}

// FuzzParseInfo: any labels parse or fail with an error, never a crash; a parsed Info's
// lists are sorted, unique, and hold no empty or padded name.
func FuzzParseInfo(f *testing.F) {
	f.Add("4", "a,b", "c")
	f.Add("", " , ", ",,")
	f.Add("-3", "x", "")
	f.Add("99999999999999999999", "a", "a")
	f.Fuzz(func(t *testing.T, max, running, waiting string) {
		in, err := ParseInfo(map[string]string{LabelMax: max, LabelRunning: running, LabelWaiting: waiting})
		if err != nil {
			return
		}
		for _, l := range [][]string{in.Running, in.Waiting} {
			for i, n := range l {
				if n == "" || strings.TrimSpace(n) != n || (i > 0 && l[i-1] >= n) {
					t.Fatalf("list %q: entry %d %q is empty, padded or out of order", l, i, n)
				}
			}
		}
		if in.MaxLoRA < 0 {
			t.Fatalf("MaxLoRA %d", in.MaxLoRA)
		}
	})
}
