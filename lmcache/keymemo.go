package lmcache

import (
	"bytes"
	"sync"
	"unsafe"
)

// keyMemo is the last prompt an Index lookup hashed, copied, with its chunk keys. A
// decision hashes its prompt once for the lookup and, when the picker tells the index
// where it routed it (Routed), the MissDetector needs the same keys: hashing 1,578 tokens
// again cost 5 µs of the request's CPU (decision 1194). The memo answers only for a prompt
// whose tokens equal the copy it holds, so a caller that reuses or changes its token
// slice between the two calls gets the keys of what it passes, never stale ones.
//
// It never waits: a store or a fetch that finds the memo busy (another decision at the
// same moment) skips it, and the fetch's caller hashes. Safe for concurrent use.
type keyMemo struct {
	mu     sync.Mutex
	tokens []uint32 // a copy of the prompt last stored; empty: none
	keys   []int64  // its chunk keys
}

// maxMemoTokens bounds the prompt the memo copies, and so the memory it keeps: 128 KiB
// of tokens and 1 KiB of keys at chunks of 256.
const maxMemoTokens = 1 << 15

// store remembers tokens and their chunk keys, unless the prompt is empty or over
// maxMemoTokens or the memo is busy.
func (m *keyMemo) store(tokens []uint32, keys []int64) {
	if len(tokens) == 0 || len(tokens) > maxMemoTokens || !m.mu.TryLock() {
		return
	}
	m.tokens = append(m.tokens[:0], tokens...)
	m.keys = append(m.keys[:0], keys...)
	m.mu.Unlock()
}

// appendKeys appends the remembered chunk keys to dst and reports true when tokens equal
// the remembered prompt; else (or when the memo is busy) it returns dst and false.
func (m *keyMemo) appendKeys(dst []int64, tokens []uint32) ([]int64, bool) {
	if len(tokens) == 0 || !m.mu.TryLock() {
		return dst, false
	}
	defer m.mu.Unlock()
	if !bytes.Equal(tokenBytes(m.tokens), tokenBytes(tokens)) {
		return dst, false
	}
	return append(dst, m.keys...), true
}

// tokenBytes is t's memory as bytes, for bytes.Equal's vectorised comparison: comparing
// 1,578 ids one by one took as long as a tenth of hashing them.
func tokenBytes(t []uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(t))), len(t)*4)
}
