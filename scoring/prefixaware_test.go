package scoring

import (
	"strings"
	"testing"
)

func rankPrefix(p Policy, prompt string, addrs ...string) []Ranked {
	cs := make([]Candidate, len(addrs))
	for i, a := range addrs {
		cs[i] = Candidate{Addr: a, HolderRank: -1}
	}
	return p.Rank(Input{Prompt: prompt, Now: t0, Candidates: cs})
}

func TestPrefixAwareRemembersWhereItSentAPrefix(t *testing.T) {
	shared := strings.Repeat("s", 300)
	tests := []struct {
		name       string
		sent       map[string]string // prompt -> the only candidate it was routed to
		prompt     string
		want       []string // acceptable winners
		wantReason string
	}{
		{"nothing sent yet: any candidate", nil, shared, []string{"a:1", "b:1", "c:1"}, ReasonNoPrefix},
		{"the same prompt goes where it went", map[string]string{shared: "b:1"}, shared, []string{"b:1"}, ReasonPrefixMatch},
		{"a prompt sharing two chunks follows them", map[string]string{shared: "c:1"}, shared[:256] + "tail", []string{"c:1"}, ReasonPrefixMatch},
		{"the deepest match wins over a shallower one",
			map[string]string{shared[:128] + strings.Repeat("x", 200): "a:1", shared: "b:1"}, shared + "more", []string{"b:1"}, ReasonPrefixMatch},
		{"equal matches: one of the endpoints holding it",
			map[string]string{shared + "1": "a:1", shared + "2": "c:1"}, shared[:256], []string{"a:1", "c:1"}, ReasonPrefixMatch},
		{"a first chunk that differs matches nothing", map[string]string{shared: "b:1"}, "z" + shared, []string{"a:1", "b:1", "c:1"}, ReasonNoPrefix},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, "prefixaware", DefaultParams(), NewState())
			for prompt, addr := range tt.sent {
				rankPrefix(p, prompt, addr)
			}
			rs := rankPrefix(p, tt.prompt, "a:1", "b:1", "c:1")
			if len(rs) != 3 {
				t.Fatalf("ranked %d of 3", len(rs))
			}
			ok := false
			for _, w := range tt.want {
				ok = ok || rs[0].Addr == w
			}
			if !ok || rs[0].Reason != tt.wantReason {
				t.Fatalf("winner %s (%s), want one of %v (%s)", rs[0].Addr, rs[0].Reason, tt.want, tt.wantReason)
			}
			if tt.wantReason == ReasonPrefixMatch && len(tt.want) > 1 {
				return // several endpoints hold it: the next choice is random among them again
			}
			again := rankPrefix(p, tt.prompt, "a:1", "b:1", "c:1")
			if again[0].Addr != rs[0].Addr || again[0].Reason != ReasonPrefixMatch {
				t.Fatalf("the same prompt again went to %s (%s), want %s: the winner is inserted", again[0].Addr, again[0].Reason, rs[0].Addr)
			}
		})
	}
}

func TestPrefixAwareSkipsHoldersThatAreNotCandidates(t *testing.T) {
	p := mustNew(t, "prefixaware", DefaultParams(), NewState())
	prompt := strings.Repeat("q", 200)
	rankPrefix(p, prompt, "gone:1")
	rs := rankPrefix(p, prompt, "a:1", "b:1")
	if rs[0].Reason != ReasonNoPrefix {
		t.Fatalf("reason %s: the only holder left the candidates, want %s", rs[0].Reason, ReasonNoPrefix)
	}
}

func TestPrefixAwareRandomChoiceSpreadsAndReproduces(t *testing.T) {
	pick := func() string {
		p := mustNew(t, "prefixaware", DefaultParams(), NewState())
		var b strings.Builder
		for i := range 40 {
			b.WriteString(rankPrefix(p, strings.Repeat(string(rune('a'+i%26)), 130)+string(rune('A'+i)), "a:1", "b:1")[0].Addr)
		}
		return b.String()
	}
	first := pick()
	if first != pick() {
		t.Fatal("equal decision sequences made different choices: runs must reproduce")
	}
	if !strings.Contains(first, "a:1") || !strings.Contains(first, "b:1") {
		t.Fatalf("40 unmatched prompts all went to one endpoint (%s): the choice must be random", first)
	}
}

func TestPrefixTrieEvictsLeastRecentlyUsed(t *testing.T) {
	tr := newPrefixTrie(4)
	a, b := chunkKeys(strings.Repeat("a", 128*3)), chunkKeys(strings.Repeat("b", 128*2))
	tr.insert(a, "x:1")
	tr.insert(b, "y:1")
	if tr.lru.Len() != 4 || len(tr.nodes) != 4 {
		t.Fatalf("%d nodes (%d in the map), want the bound 4", tr.lru.Len(), len(tr.nodes))
	}
	cands := []Ranked{{Addr: "x:1"}, {Addr: "y:1"}}
	if got := tr.longest(b, cands); !got["y:1"] {
		t.Errorf("the most recent prompt was evicted: %v", got)
	}
	if got := tr.longest(a, cands); got != nil {
		t.Errorf("the oldest prompt's first chunk survived eviction: %v", got)
	}
}
