package kvevents

import "math/bits"

// chain returns the index key of a block of tokens whose parent block has key parent
// (the root key for the first block of a prompt). It depends on every token, their order,
// the block's length and the whole chain before it, so equal keys mean equal prefixes up
// to a 2^-64 collision. It is not vLLM's hash and need not be: both sides of the index
// (events and prompts) use it.
func chain(parent uint64, toks []uint32) uint64 {
	const k1, k2 = 0x9e3779b97f4a7c15, 0xff51afd7ed558ccd
	h := parent ^ uint64(len(toks))*k2
	i := 0
	for ; i+1 < len(toks); i += 2 {
		h = bits.RotateLeft64((h^(uint64(toks[i])|uint64(toks[i+1])<<32))*k1, 31)
	}
	if i < len(toks) {
		h = bits.RotateLeft64((h^uint64(toks[i]))*k1, 31)
	}
	return fmix(h)
}

// fmix is the 64-bit finalizer of MurmurHash3: every input bit affects every output bit.
func fmix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// pair is the key of (block key, stream) in the index's one map.
func pair(key, salt uint64) uint64 { return fmix(key ^ salt) }
