package lmcache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// refModel is the obviously-correct reference the index is checked against: per key, the
// list of (instance, worker, location, generation) holders in admission order.
type refModel struct {
	holders    map[int64][]refSlot
	workers    map[[2]int]int // (instance, worker) -> generation; present = known
	registered map[int]bool   // the instance has registered (has an IP) since it was created
	gen        int
}

type refSlot struct {
	inst, worker int
	loc          string
	gen          int
}

func newRefModel() *refModel {
	return &refModel{holders: map[int64][]refSlot{}, workers: map[[2]int]int{}, registered: map[int]bool{}}
}

func (m *refModel) instanceKnown(i int) bool {
	for k := range m.workers {
		if k[0] == i {
			return true
		}
	}
	return false
}

func (m *refModel) ensure(i, w int) int {
	if g, ok := m.workers[[2]int{i, w}]; ok {
		return g
	}
	if !m.instanceKnown(i) {
		m.registered[i] = false
	}
	m.gen++
	m.workers[[2]int{i, w}] = m.gen
	return m.gen
}

func (m *refModel) dropWorker(i, w int) {
	for k, hs := range m.holders {
		hs = slices.DeleteFunc(hs, func(s refSlot) bool { return s.inst == i && s.worker == w })
		if len(hs) == 0 {
			delete(m.holders, k)
		} else {
			m.holders[k] = hs
		}
	}
}

func (m *refModel) admit(i, w int, loc string, k int64) {
	s := refSlot{i, w, loc, m.ensure(i, w)}
	if !slices.Contains(m.holders[k], s) {
		m.holders[k] = append(m.holders[k], s)
	}
}

func (m *refModel) evict(i, w int, loc string, k int64) {
	s := refSlot{i, w, loc, m.ensure(i, w)}
	hs := slices.DeleteFunc(m.holders[k], func(x refSlot) bool { return x == s })
	if len(hs) == 0 {
		delete(m.holders, k)
	} else {
		m.holders[k] = hs
	}
}

func (m *refModel) register(i, w int) {
	if _, ok := m.workers[[2]int{i, w}]; ok {
		m.dropWorker(i, w)
		delete(m.workers, [2]int{i, w})
	}
	m.ensure(i, w)
	m.registered[i] = true
}

func (m *refModel) deregister(i, w int) {
	if _, ok := m.workers[[2]int{i, w}]; !ok {
		return
	}
	m.dropWorker(i, w)
	delete(m.workers, [2]int{i, w})
	if !m.instanceKnown(i) {
		delete(m.registered, i)
	}
}

func (m *refModel) lookup(keys []int64, n int) []Match {
	if len(keys) == 0 {
		return nil
	}
	var order []int
	for _, s := range m.holders[keys[0]] {
		if m.registered[s.inst] && !slices.Contains(order, s.inst) {
			order = append(order, s.inst)
		}
	}
	var out []Match
	for rank, inst := range order {
		chunks := 0
		for _, k := range keys {
			if !slices.ContainsFunc(m.holders[k], func(s refSlot) bool { return s.inst == inst }) {
				break
			}
			chunks++
		}
		out = append(out, Match{InstanceID: fmt.Sprint("i", inst), IP: fmt.Sprint("10.0.0.", inst), Tokens: min(chunks*256, n), HolderRank: rank})
	}
	sort.SliceStable(out, func(a, b int) bool {
		if out[a].Tokens != out[b].Tokens {
			return out[a].Tokens > out[b].Tokens
		}
		return out[a].HolderRank < out[b].HolderRank
	})
	return out
}

func TestIndexAgainstReferenceModel(t *testing.T) {
	// Prompts sharing prefixes, so holders overlap chunk by chunk.
	base := prompt(1, 1100)
	prompts := [][]uint32{
		base,
		append(slices.Clone(base[:512]), prompt(2, 400)...),
		append(slices.Clone(base[:256]), prompt(3, 700)...),
		prompt(4, 900),
	}
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 99))
			ix := newTestIndex(t, IndexConfig{})
			ref := newRefModel()
			var keys [][]int64
			var universe []int64
			for _, p := range prompts {
				k := ix.ChunkKeys(p)
				keys = append(keys, k)
				universe = append(universe, k...)
			}
			locs := []string{"LocalCPUBackend", "LocalDiskBackend"}
			for step := 0; step < 1000; step++ {
				i, w, loc := r.IntN(3), r.IntN(2), locs[r.IntN(2)]
				inst := fmt.Sprint("i", i)
				var msg Message
				switch x := r.IntN(100); {
				case x < 55:
					k := universe[r.IntN(len(universe))]
					ref.admit(i, w, loc, k)
					msg = KVAdmitMsg{InstanceID: inst, WorkerID: w, Key: k, Location: loc}
				case x < 85:
					k := universe[r.IntN(len(universe))]
					ref.evict(i, w, loc, k)
					msg = KVEvictMsg{InstanceID: inst, WorkerID: w, Key: k, Location: loc}
				case x < 96:
					ref.register(i, w)
					msg = RegisterMsg{InstanceID: inst, WorkerID: w, IP: fmt.Sprint("10.0.0.", i)}
				default:
					ref.deregister(i, w)
					msg = DeRegisterMsg{InstanceID: inst, WorkerID: w}
				}
				if err := ix.Apply(msg, t0); err != nil {
					t.Fatal(err)
				}
				for pi, p := range prompts {
					want, got := ref.lookup(keys[pi], len(p)), ix.Lookup(p)
					if d := cmp.Diff(want, got); d != "" {
						t.Fatalf("step %d (%#v), prompt %d: Lookup differs from the model (-model +index):\n%s", step, msg, pi, d)
					}
				}
				if live := liveKeys(t, ix); live != len(ref.holders) || ix.Keys() != live {
					t.Fatalf("step %d: index has %d live keys and says %d, model %d", step, live, ix.Keys(), len(ref.holders))
				}
				if step%50 == 49 { // purge the retired slots' keys: the table is then exactly the live keys
					ix.Sweep(t0)
					if ix.nkeys.Load() != int64(len(ref.holders)) || ix.Keys() != len(ref.holders) {
						t.Fatalf("step %d, swept: index table has %d keys and says %d, model %d", step, ix.nkeys.Load(), ix.Keys(), len(ref.holders))
					}
				}
			}
		})
	}
}
