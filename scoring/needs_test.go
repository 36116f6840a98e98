package scoring

import "testing"

// TestNeedsOfEveryPolicy pins what each policy declares it reads: the picker tokenizes,
// looks up, hashes and copies the prompt on these answers alone.
func TestNeedsOfEveryPolicy(t *testing.T) {
	want := map[string]Needs{
		"loadaware":           NeedsCache | NeedsBeta,
		"kvaware":             NeedsCache,
		"roundrobin":          0,
		"leastload":           0,
		"session":             0,
		"sglang-cache-aware":  NeedsCache,
		"aibrix-prefix-cache": NeedsCache,
		"gie-default":         NeedsCache | NeedsEngineMetrics,
		"dynamo-kv":           NeedsCache | NeedsInFlightSizes,
		"llmd-precise":        NeedsCache | NeedsEngineMetrics,
		"prefixaware":         NeedsPrompt,
		"latencyaware":        NeedsCache | NeedsPrefixKey | NeedsBeta,
		"llmd-sticky":         NeedsCache | NeedsInFlightSizes,
		"ttftaware":           NeedsCache | NeedsPrefixKey | NeedsUncached | NeedsEngineMetrics | NeedsTokens,
	}
	for _, name := range Names {
		p, err := New(name, DefaultParams(), NewState())
		if err != nil {
			t.Fatal(err)
		}
		w, ok := want[name]
		if !ok {
			t.Errorf("policy %q has no expected needs here: add it", name)
			continue
		}
		if got := p.Needs(); got != w {
			t.Errorf("%s.Needs() = %b, want %b", name, got, w)
		}
	}
}

// TestOptionalInterfaces pins which policies rank requests without token ids their own
// way, rank from a fleet's leaders, and explain terms of their own.
func TestOptionalInterfaces(t *testing.T) {
	for _, name := range Names {
		p, err := New(name, DefaultParams(), NewState())
		if err != nil {
			t.Fatal(err)
		}
		_, tokenless := p.(TokenlessRanker)
		_, leaders := p.(LeaderRanker)
		_, terms := p.(TermsExplainer)
		if want := name == "loadaware"; tokenless != want || leaders != want {
			t.Errorf("%s: TokenlessRanker %v, LeaderRanker %v; want %v for both", name, tokenless, leaders, want)
		}
		if want := name == "latencyaware" || name == "ttftaware"; terms != want {
			t.Errorf("%s: TermsExplainer %v, want %v", name, terms, want)
		}
	}
}

func TestDescribe(t *testing.T) {
	for _, name := range Names {
		if p := Describe(name); p == nil || p.Name() != name {
			t.Errorf("Describe(%q) = %v, want the policy of that name", name, p)
		}
	}
	if p := Describe("fastest"); p != nil {
		t.Errorf("Describe of an unknown name = %v, want nil", p)
	}
}
