package workload

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/loadaware/loadaware-epp/bench/internal/errcheck"
)

func TestParseFile(t *testing.T) {
	cases := []struct {
		name, in, want string
		check          func(File) bool
	}{
		{name: "yaml sets flags", in: "name: x\nsource: somewhere\nprofile: groups\nprefixes: 150\nprompts-per-group: 5\nprefix-tokens: 6000\nsuffix-tokens: 1200\nmax-tokens: 1000\nrate: 2.5\nburst-every: 0s\n",
			check: func(f File) bool {
				c := f.Config
				return f.Name == "x" && f.Source == "somewhere" && c.Profile == ProfileGroups && c.Prefixes == 150 && c.PromptsPerGroup == 5 && c.PrefixTokens == 6000 && c.SuffixTokens == 1200 && c.MaxTokens == 1000 && c.Rate == 2.5
			}},
		{name: "json works too", in: `{"rate": 3, "requests": 40, "think-time": "2s", "profile": "chat"}`,
			check: func(f File) bool {
				return f.Config.Rate == 3 && f.Config.Requests == 40 && f.Config.ThinkTime == 2*time.Second
			}},
		{name: "unset keys keep the base", in: `{"rate": 3}`, check: func(f File) bool { return f.Config.Prefixes == DefaultConfig().Prefixes }},
		{name: "unknown key", in: "rate: 3\nqps: 4\n", want: `unknown key "qps"`},
		{name: "a flag's own refusal", in: "rate: fast\n", want: `key "rate"`},
		{name: "a list", in: "rate: [1, 2]\n", want: "a list or an object"},
		{name: "null", in: "rate: null\n", want: "null"},
		{name: "not an object", in: "- 1\n- 2\n", want: "want an object"},
		{name: "invalid result", in: "requests: 0\n", want: "-requests 0"},
		{name: "not yaml", in: "rate: [\n", want: "not JSON or YAML"},
		{name: "ladder as a list", in: "ladder: [3, 10, 15.5]\n", check: func(f File) bool {
			return len(f.Ladder) == 3 && f.Ladder[0] == 3 && f.Ladder[2] == 15.5
		}},
		{name: "ladder as a string", in: "ladder: 3, 10\n", check: func(f File) bool { return len(f.Ladder) == 2 && f.Ladder[1] == 10 }},
		{name: "no ladder", in: "rate: 3\n", check: func(f File) bool { return f.Ladder == nil && f.Fleet.Engines == 0 && f.Fleet.Slowdowns == nil }},
		{name: "ladder not ascending", in: "ladder: [3, 3]\n", want: "must ascend"},
		{name: "ladder with zero", in: "ladder: [0, 3]\n", want: "positive finite"},
		{name: "ladder empty", in: "ladder: []\n", want: "empty"},
		{name: "ladder of words", in: "ladder: [fast]\n", want: `"fast" is not a number`},
		{name: "ladder of lists", in: "ladder: [[1]]\n", want: "a list of numbers"},
		{name: "fleet", in: "engines: 4\nslowdowns: [1, 1.3, 1, 1.3]\nkv-pool-tokens: 50000\n", check: func(f File) bool {
			return f.Fleet.Engines == 4 && len(f.Fleet.Slowdowns) == 4 && f.Fleet.Slowdowns[1] == 1.3 && f.Fleet.KVPoolTokens == 50000
		}},
		{name: "slowdowns as a string", in: "slowdowns: 1, 1.5\n", check: func(f File) bool { return len(f.Fleet.Slowdowns) == 2 && f.Fleet.Slowdowns[1] == 1.5 }},
		{name: "engines zero", in: "engines: 0\n", want: "1..250"},
		{name: "engines fraction", in: "engines: 2.5\n", want: "whole number"},
		{name: "engines too many", in: "engines: 251\n", want: "1..250"},
		{name: "slowdown negative", in: "slowdowns: [1, -1]\n", want: "positive and finite"},
		{name: "more slowdowns than engines", in: "engines: 1\nslowdowns: [1, 1.3]\n", want: "2 factors for 1 engines"},
		{name: "kv pool zero", in: "kv-pool-tokens: 0\n", want: "at least 1"},
		{name: "unknown key lists fleet keys", in: "gpus: 2\n", want: "engines, slowdowns, kv-pool-tokens"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseFile(strings.NewReader(c.in), DefaultConfig())
			if errcheck.Done(t, err, c.want) {
				return
			}
			if !c.check(f) {
				t.Fatalf("parsed %+v", f)
			}
		})
	}
}

// TestShippedProfilesLoad reads every profile file the project ships: each
// names its source and generates a seed.
func TestShippedProfilesLoad(t *testing.T) {
	paths, err := filepath.Glob("profiles/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no shipped profiles found (%v)", err)
	}
	for _, p := range paths {
		f, err := LoadFile(p, DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		if f.Source == "" || f.Name+".yaml" != filepath.Base(p) {
			t.Fatalf("%s: name %q, source %q: a shipped profile is named after its file and cites its source", p, f.Name, f.Source)
		}
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
	}
}

func FuzzParseFile(f *testing.F) {
	f.Add([]byte("rate: 3\nprofile: groups\n"))
	f.Add([]byte(`{"requests": 1, "max-tokens": 1}`))
	f.Add([]byte("name: [x]\n"))
	f.Add([]byte("ladder: [3, 10]\nengines: 4\nslowdowns: 1, 1.3\nkv-pool-tokens: 9\n"))
	f.Add([]byte(`{"ladder": "1,2", "slowdowns": [1, 2, 3], "engines": 2}`))
	f.Add([]byte("profile: conversations\nprefixes: 1\nprefix-tokens: 250\nturn-count: fixed mean=1\noutput-tokens: exponential min=500 max=32000 mean=8000\nrate: 0.05\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseFile(strings.NewReader(string(b)), DefaultConfig())
		if err == nil {
			if verr := got.Config.Validate(); verr != nil {
				t.Fatalf("ParseFile accepted a config that does not validate: %v", verr)
			}
			if got.Ladder != nil && checkLadder(got.Ladder) != nil {
				t.Fatalf("ParseFile accepted the ladder %v", got.Ladder)
			}
			fl := got.Fleet
			if fl.Engines < 0 || fl.Engines > MaxEngines || fl.KVPoolTokens < 0 || (fl.Engines > 0 && len(fl.Slowdowns) > fl.Engines) {
				t.Fatalf("ParseFile accepted the fleet %+v", fl)
			}
			for _, x := range fl.Slowdowns {
				if !(x > 0) || math.IsInf(x, 0) {
					t.Fatalf("ParseFile accepted the slowdown %v", x)
				}
			}
		}
	})
}

// TestShippedProfilesGenerateTheirParameters generates one seed of every
// shipped profile and checks it against the parameters the file states:
// prompt lengths, group counts, output lengths and the arrival rate.
func TestShippedProfilesGenerateTheirParameters(t *testing.T) {
	paths, _ := filepath.Glob("profiles/*.yaml")
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			f, err := LoadFile(p, DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			c := f.Config
			reqs, err := Generate(c, nil, 1)
			if err != nil {
				t.Fatal(err)
			}
			groups := map[int]bool{}
			capped := 0
			for i, r := range reqs {
				groups[r.PrefixID] = true
				if r.MaxTokens != c.MaxTokens && c.Profile != ProfileConversations {
					t.Fatalf("request %d asks for %d tokens, the file %d", i, r.MaxTokens, c.MaxTokens)
				}
				switch c.Profile {
				case ProfileShared, ProfileGroups:
					if len(r.Tokens) != c.PrefixTokens+1+c.SuffixTokens {
						t.Fatalf("request %d has %d tokens, want %d + 1 + %d", i, len(r.Tokens), c.PrefixTokens, c.SuffixTokens)
					}
				case ProfileConversations:
					if len(r.Tokens)+r.MaxTokens > c.Context || r.MaxTokens < 1 || float64(r.MaxTokens) > c.OutputTokens.Max {
						t.Fatalf("request %d: %d prompt + %d answer tokens, context %d, answers up to %g", i, len(r.Tokens), r.MaxTokens, c.Context, c.OutputTokens.Max)
					}
					if r.Capped {
						capped++
					}
				case ProfileChat:
					if len(r.Tokens) < c.PrefixTokens+c.UserTokens || len(r.Tokens) > c.PrefixTokens+c.Turns*(c.UserTokens+c.MaxTokens)+2*c.Turns {
						t.Fatalf("request %d has %d tokens, outside a session's %d..%d", i, len(r.Tokens), c.PrefixTokens+c.UserTokens, c.PrefixTokens+c.Turns*(c.UserTokens+c.MaxTokens))
					}
				}
			}
			if len(groups) > c.Prefixes || (c.Profile == ProfileGroups && len(reqs) >= 2*c.Prefixes*c.PromptsPerGroup && len(groups) != c.Prefixes) {
				t.Fatalf("%d groups in the seed, the file has %d", len(groups), c.Prefixes)
			}
			if c.Profile == ProfileConversations && !strings.Contains(f.Notes, fmt.Sprintf("%d of the seed's %d requests", capped, len(reqs))) {
				t.Errorf("seed 1 cuts %d of %d requests to the context: the notes must say \"%d of the seed's %d requests\"", capped, len(reqs), capped, len(reqs))
			}
			span := (reqs[len(reqs)-1].SendAt - reqs[0].SendAt).Seconds()
			if rate := float64(len(reqs)-1) / span; rate < 0.75*c.Rate || rate > 1.25*c.Rate {
				t.Fatalf("arrivals at %.3f req/s, the file says %g", rate, c.Rate)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	if f, err := Resolve("published"); err != nil || f.Config != DefaultConfig() {
		t.Fatalf("published: %+v, %v", f, err)
	}
	names := ShippedProfiles()
	if len(names) < 6 {
		t.Fatalf("shipped profiles %v", names)
	}
	f, err := Resolve(names[0])
	if err != nil || f.Name != names[0] {
		t.Fatalf("%s: %+v, %v", names[0], f, err)
	}
	path := filepath.Join(t.TempDir(), "mine.yaml")
	os.WriteFile(path, []byte("rate: 2\n"), 0o600)
	if f, err := Resolve(path); err != nil || f.Name != "mine" || f.Config.Rate != 2 {
		t.Fatalf("a file: %+v, %v", f, err)
	}
	if _, err := Resolve("no-such-workload"); err == nil || !strings.Contains(err.Error(), names[0]) {
		t.Fatalf("an unknown name gave %v; want the shipped names listed", err)
	}
}

// The llm-d precise-prefix design of experiments ships whole: one file per
// workload cell of its factorial, num_groups {40, 60} x system_prompt_len
// {8,000, 5,000, 1,000}, each 32 prompts a group, 256-token questions and
// outputs, and the published 2-20 QPS ladder.
func TestLLMDPreciseDoECells(t *testing.T) {
	ladder := []float64{2, 5, 8, 10, 12, 15, 20}
	for _, g := range []int{40, 60} {
		for _, s := range []int{8000, 5000, 1000} {
			name := fmt.Sprintf("llmd-precise-doe-%dx%dk", g, s/1000)
			f, err := Resolve(name)
			if err != nil {
				t.Fatalf("cell %s: %v", name, err)
			}
			c := f.Config
			if f.Name != name || c.Profile != ProfileGroups || c.Prefixes != g || c.PromptsPerGroup != 32 || c.PrefixTokens != s || c.SuffixTokens != 256 || c.MaxTokens != 256 {
				t.Errorf("%s: %+v", name, c)
			}
			if !slices.Equal(f.Ladder, ladder) {
				t.Errorf("%s: ladder %v, want %v", name, f.Ladder, ladder)
			}
		}
	}
}
