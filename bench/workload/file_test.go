package workload

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := ParseFile(strings.NewReader(c.in), DefaultConfig())
			if c.want != "" {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("got error %v, want one containing %q", err, c.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
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
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := ParseFile(strings.NewReader(string(b)), DefaultConfig())
		if err == nil {
			if verr := got.Config.Validate(); verr != nil {
				t.Fatalf("ParseFile accepted a config that does not validate: %v", verr)
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
			for i, r := range reqs {
				groups[r.PrefixID] = true
				if r.MaxTokens != c.MaxTokens {
					t.Fatalf("request %d asks for %d tokens, the file %d", i, r.MaxTokens, c.MaxTokens)
				}
				switch c.Profile {
				case ProfileShared, ProfileGroups:
					if len(r.Tokens) != c.PrefixTokens+1+c.SuffixTokens {
						t.Fatalf("request %d has %d tokens, want %d + 1 + %d", i, len(r.Tokens), c.PrefixTokens, c.SuffixTokens)
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
