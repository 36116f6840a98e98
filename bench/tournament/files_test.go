package tournament

import (
	"slices"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

// A workload file's fleet keys reach the profile's fleet; unset keys keep
// the calibrated 2-engine fleet.
func TestFileProfileFleet(t *testing.T) {
	def := experiment.DefaultConfig()
	cases := []struct {
		name, file string
		engines    int
		slowdowns  []float64
		kvPool     int
	}{
		{"no fleet keys", "rate: 1\n", 2, []float64{1, 1.3}, def.Engine.KVPoolTokens},
		{"engines only", "engines: 4\n", 4, []float64{1, 1.3}, def.Engine.KVPoolTokens},
		{"one engine keeps the fast one", "engines: 1\n", 1, []float64{1}, def.Engine.KVPoolTokens},
		{"engines and slowdowns", "engines: 3\nslowdowns: [1, 1.5, 2]\n", 3, []float64{1, 1.5, 2}, def.Engine.KVPoolTokens},
		{"kv pool", "kv-pool-tokens: 40000\n", 2, []float64{1, 1.3}, 40000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := workload.ParseFile(strings.NewReader("name: x\n"+c.file), workload.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			p := FileProfile(f)
			if p.Fleet.Engines != c.engines || !slices.Equal(p.Fleet.Slowdowns, c.slowdowns) || p.Fleet.Engine.KVPoolTokens != c.kvPool {
				t.Fatalf("fleet: %d engines, slowdowns %v, KV pool %d; want %d, %v, %d", p.Fleet.Engines, p.Fleet.Slowdowns, p.Fleet.Engine.KVPoolTokens, c.engines, c.slowdowns, c.kvPool)
			}
			cfg := p.Fleet
			cfg.Arms, cfg.Seeds = []experiment.Arm{{Name: "kvaware", Policy: "kvaware"}}, []uint64{1}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("the profile's fleet does not validate: %v", err)
			}
		})
	}
}

// The fleet line of a conversations workload names its distributions, not
// one output length.
func TestFleetTextConversations(t *testing.T) {
	f, err := workload.Resolve("inference-perf-reasoning")
	if err != nil {
		t.Fatal(err)
	}
	got := FleetText(FileProfile(f))
	for _, want := range []string{"from 10 conversations", "answers exponential min=500 max=32000 mean=8000 std=6500 tokens", "turns fixed mean=1", "32768-token context"} {
		if !strings.Contains(got, want) {
			t.Errorf("fleet text %q has no %q", got, want)
		}
	}
	if strings.Contains(got, "output tokens") {
		t.Errorf("fleet text %q names one output length", got)
	}
}
