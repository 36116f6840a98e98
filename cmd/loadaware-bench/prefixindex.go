package main

import (
	"container/list"
	"context"
	"encoding/binary"
	"hash/fnv"
	"sync"

	"github.com/loadaware/loadaware-epp/picker"
)

// prefixIndex is the demo's cache view: a router-side approximation of what each simple engine
// holds, fed by the picker's own decisions (picker.Observer). The simple engines publish no
// KV-cache events, so without it loadaware would see no cache at all and fall back to the QPS
// route. It mirrors the engines' model: per endpoint, an LRU of `capacity` prompt prefixes keyed
// by the first keyTokens tokens; the match is the common token prefix with the latest prompt
// stored under the key.
type prefixIndex struct {
	keyTokens int
	capacity  int

	mu  sync.Mutex
	seq uint64
	eps map[string]*endpointLRU
}

type endpointLRU struct {
	order *list.List               // *held, most recent first
	byKey map[uint64]*list.Element // prefix key -> element
}

type held struct {
	key    uint64
	tokens []uint32
	since  uint64 // when the endpoint first stored this key (for HolderRank)
}

func newPrefixIndex(keyTokens, capacity int) *prefixIndex {
	return &prefixIndex{keyTokens: keyTokens, capacity: capacity, eps: map[string]*endpointLRU{}}
}

func (x *prefixIndex) key(tokens []uint32) uint64 {
	h := fnv.New64a()
	var b [4]byte
	for _, t := range tokens[:min(len(tokens), x.keyTokens)] {
		binary.LittleEndian.PutUint32(b[:], t)
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}

// Routed implements picker.Observer: endpoint now holds the prompt's prefix.
func (x *prefixIndex) Routed(endpoint string, tokens []uint32) {
	if len(tokens) == 0 {
		return
	}
	k := x.key(tokens)
	x.mu.Lock()
	defer x.mu.Unlock()
	e := x.eps[endpoint]
	if e == nil {
		e = &endpointLRU{order: list.New(), byKey: map[uint64]*list.Element{}}
		x.eps[endpoint] = e
	}
	if el, ok := e.byKey[k]; ok {
		el.Value.(*held).tokens = tokens
		e.order.MoveToFront(el)
		return
	}
	x.seq++
	e.byKey[k] = e.order.PushFront(&held{key: k, tokens: tokens, since: x.seq})
	if e.order.Len() > x.capacity {
		old := e.order.Back()
		e.order.Remove(old)
		delete(e.byKey, old.Value.(*held).key)
	}
}

// Match implements picker.CacheView.
func (x *prefixIndex) Match(_ context.Context, tokens []uint32, endpoints []string) ([]picker.CacheMatch, error) {
	out := make([]picker.CacheMatch, len(endpoints))
	since := make([]uint64, len(endpoints))
	k := x.key(tokens)
	x.mu.Lock()
	for i, ep := range endpoints {
		out[i].HolderRank = -1
		e := x.eps[ep]
		if e == nil {
			continue
		}
		if el, ok := e.byKey[k]; ok {
			h := el.Value.(*held)
			out[i].Matched = commonPrefix(h.tokens, tokens)
			since[i] = h.since
		}
	}
	x.mu.Unlock()
	for i := range out {
		if out[i].Matched == 0 {
			continue
		}
		rank := 0
		for j := range out {
			if out[j].Matched > 0 && since[j] < since[i] {
				rank++
			}
		}
		out[i].HolderRank = rank
	}
	return out, nil
}

func commonPrefix(a, b []uint32) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
