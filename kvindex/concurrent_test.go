package kvindex

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// TestTableReadersDuringWrites runs readers against a ctable while one writer puts and
// deletes keys (a small key space, keys 0 and 1 included: long probe runs, many
// deletions, so the array is copied often). Each value written to key k is k<<32 | s,
// s the key's operation count; each get must return a state the key had during the
// call: present with a value of its own written in that time, or absent when a
// deletion happened in that time.
func TestTableReadersDuringWrites(t *testing.T) {
	const keys, ops = 48, 300000
	var tb ctable
	var started, done [keys]atomic.Int64 // the last operation on each key begun, finished
	var deleted [keys][]atomic.Bool      // whether operation s on key k was a deletion
	for k := range deleted {
		deleted[k] = make([]atomic.Bool, ops+1)
		deleted[k][0].Store(true) // state 0: absent
	}
	var stop atomic.Bool
	var reads atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for r := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			for !stop.Load() {
				k := rng.Uint64N(keys)
				lo := done[k].Load()
				v, ok := tb.get(k)
				hi := started[k].Load()
				if err := checkState(k, v, ok, lo, hi, deleted[k]); err != nil {
					errs <- err
					return
				}
				reads.Add(1)
			}
		})
	}
	rng := rand.New(rand.NewPCG(7, 7))
	var seq [keys]int64
	for range ops {
		k := rng.Uint64N(keys)
		seq[k]++
		s := seq[k]
		del := rng.IntN(3) == 0
		deleted[k][s].Store(del)
		started[k].Store(s)
		if del {
			tb.del(k)
		} else {
			tb.put(k, k<<32|uint64(s))
		}
		done[k].Store(s)
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if reads.Load() == 0 {
		t.Fatal("no read ran during the writes")
	}
	t.Logf("%d reads during %d writes", reads.Load(), ops)
}

// checkState reports whether (v, ok) read from key k is one of its states lo..hi.
func checkState(k, v uint64, ok bool, lo, hi int64, deleted []atomic.Bool) error {
	if !ok {
		for s := lo; s <= hi; s++ {
			if deleted[s].Load() {
				return nil
			}
		}
		return fmt.Errorf("key %d absent, but present in all of its states %d..%d", k, lo, hi)
	}
	s := int64(v & (1<<32 - 1))
	if v>>32 != k || s < lo || s > hi || deleted[s].Load() {
		return fmt.Errorf("key %d: value %#x, not one of its states %d..%d", k, v, lo, hi)
	}
	return nil
}

// TestMatchDuringChurnCreditsOnlyWhatWasHeld runs lookups while a writer stores,
// removes, clears and drops the blocks of a 64-block prompt on endpoints whose holdings
// are bounded, and drops and re-adds endpoints so that their slots are handed to others
// (a lookup that went on reading a slot given to another stream would credit that
// stream's blocks). Endpoint p<i> only ever holds the first lim(i) blocks, in one tier; the filler
// endpoints never hold the prompt, but their slots are those the prompt's holders had.
// Every answer must be a credit the endpoint could have had: a multiple of its tier's
// block credit, at most lim(i) blocks, nothing for the fillers, and holder ranks only
// (and all) for the endpoints credited. Once the writer is done, the answer must be
// exactly the one the writer's own record of the holdings gives.
func TestMatchDuringChurnCreditsOnlyWhatWasHeld(t *testing.T) {
	const holders, fillers = 8, 4
	ops := 20000
	if testing.Short() {
		ops = 4000
	}
	credits := Credits{GPU: 1, CPU: 0.5}
	ix, err := NewIndex(IndexConfig{Credits: credits, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	var asked []string
	for i := range holders {
		asked = append(asked, fmt.Sprintf("p%d", i))
	}
	for i := range fillers {
		asked = append(asked, fmt.Sprintf("f%d", i))
	}
	// Even holders hold in GPU (4 tokens a block), odd ones in CPU (2), with few blocks
	// where a block is cheap, so a block credited to the wrong slot shows.
	lim := func(i int) int { return []int{64, 1, 48, 2, 64, 1, 32, 3}[i] }
	prompt := seq32(64*bs, 5000)
	medium := func(i int) string { return []string{"GPU", "CPU"}[i%2] }
	perBlock := func(i int) int { return bs * (2 - i%2) / 2 }
	check := func(got []Match) error {
		var ranks []int
		for i, m := range got {
			switch {
			case i >= holders && m.Matched != 0:
				return fmt.Errorf("filler %s credited %d tokens: %+v", asked[i], m.Matched, got)
			case i < holders && (m.Matched%perBlock(i) != 0 || m.Matched > lim(i)*perBlock(i)):
				return fmt.Errorf("%s credited %d tokens, not a multiple of %d up to %d: %+v", asked[i], m.Matched, perBlock(i), lim(i)*perBlock(i), got)
			case (m.Matched > 0) != (m.HolderRank >= 0):
				return fmt.Errorf("%s: matched %d with holder rank %d: %+v", asked[i], m.Matched, m.HolderRank, got)
			}
			if m.HolderRank >= 0 {
				ranks = append(ranks, m.HolderRank)
			}
		}
		slices.Sort(ranks)
		for r := range ranks {
			if ranks[r] != r {
				return fmt.Errorf("holder ranks %v are not 0..%d: %+v", ranks, len(ranks)-1, got)
			}
		}
		return nil
	}

	var stop atomic.Bool
	var lookups atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				if err := check(ix.Match(prompt, asked)); err != nil {
					errs <- err
					return
				}
				lookups.Add(1)
			}
		})
	}

	// The writer's record: which prompt blocks each holder holds, and the order of its
	// block 0's store (0: none).
	held := make([][]bool, holders)
	for i := range held {
		held[i] = make([]bool, lim(i))
	}
	order := make([]uint64, holders)
	var stamp uint64
	rng := rand.New(rand.NewPCG(11, 3))
	base := uint64(1000) // engine hashes: a new range for every store, as engines reuse none
	for op := range ops {
		i := rng.IntN(holders + fillers)
		ep := asked[i]
		if i >= holders {
			switch rng.IntN(8) {
			case 0:
				ix.Drop(ep, "left")
			default: // chains of other tokens: they grow the tables and fill freed slots
				n := 4 + rng.IntN(28)
				ev := Event{Kind: BlockStored, BlockSize: bs, Medium: medium(i), Tokens: seq32(n*bs, uint32(1_000_000+op*1000))}
				for j := range n {
					ev.Hashes = append(ev.Hashes, base+uint64(j))
				}
				base += uint64(n)
				ix.Apply(ep, batch(ev))
				if rng.IntN(2) == 0 {
					ix.Apply(ep, batch(removed(medium(i), ev.Hashes[rng.IntN(n):]...)))
				}
			}
			continue
		}
		switch rng.IntN(10) {
		case 0:
			ix.Drop(ep, "left")
			clear(held[i])
			order[i] = 0
		case 1:
			ix.Apply(ep, batch(Event{Kind: AllBlocksCleared}))
			clear(held[i])
			order[i] = 0
		case 2, 3, 4:
			ix.Apply(ep, batch(removed(medium(i), holderHashes(i, held[i], rng)...)))
		default:
			// Store blocks [0, n) of the prompt, in one event or two.
			n := 1 + rng.IntN(lim(i))
			ev := Event{Kind: BlockStored, BlockSize: bs, Medium: medium(i), Tokens: prompt[:n*bs]}
			for j := range n {
				ev.Hashes = append(ev.Hashes, hashOf(i, j))
			}
			if cut := rng.IntN(n); cut > 0 {
				second := Event{Kind: BlockStored, BlockSize: bs, Medium: medium(i), Tokens: prompt[cut*bs : n*bs],
					Hashes: ev.Hashes[cut:], Parent: ev.Hashes[cut-1], HasParent: true}
				ev.Tokens, ev.Hashes = ev.Tokens[:cut*bs], ev.Hashes[:cut]
				ix.Apply(ep, batch(ev, second))
			} else {
				ix.Apply(ep, batch(ev))
			}
			if !held[i][0] {
				stamp++
				order[i] = stamp
			}
			for j := range n {
				held[i][j] = true
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if lookups.Load() == 0 {
		t.Fatal("no lookup ran during the churn")
	}

	want := make([]Match, len(asked))
	var byOrder []int
	for i := range want {
		want[i].HolderRank, want[i].Rank = -1, -1
		if i >= holders {
			continue
		}
		for j := 0; j < lim(i) && held[i][j]; j++ {
			want[i].Matched += perBlock(i)
		}
		if want[i].Matched > 0 {
			byOrder = append(byOrder, i)
			want[i].Rank = 0
		}
	}
	slices.SortFunc(byOrder, func(a, b int) int { return cmpU64(order[a], order[b]) })
	for r, i := range byOrder {
		want[i].HolderRank = r
	}
	if got := ix.Match(prompt, asked); !slices.Equal(got, want) {
		t.Errorf("after the churn: Match = %+v, want %+v", got, want)
	}
	t.Logf("%d lookups during %d operations", lookups.Load(), ops)
}

// hashOf is holder i's engine hash of prompt block j (the same on every store, as an
// engine's hash of the same content is).
func hashOf(i, j int) uint64 { return uint64(1<<40 + i<<8 + j) }

// holderHashes picks some of the blocks holder i holds (and marks them no longer held),
// plus one it does not hold, and returns their engine hashes.
func holderHashes(i int, held []bool, rng *rand.Rand) []uint64 {
	var hs []uint64
	for j := range held {
		if held[j] && rng.IntN(2) == 0 {
			hs = append(hs, hashOf(i, j))
			held[j] = false
		}
	}
	return append(hs, hashOf(i, len(held)+1))
}
