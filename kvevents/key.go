package kvevents

import "math/bits"

// chain returns the index key of a block of tokens whose parent block has key parent
// (the root key for the first block of a prompt); seed keys the content hash. The key
// depends on every token, their order, the block's length and the whole chain before
// it, so equal keys mean equal prefixes up to a 2^-64 collision. It is not vLLM's hash
// and need not be: both sides of the index (events and prompts) use it.
//
// The content hash runs two independent multiply-rotate lanes over pairs of tokens and
// does not depend on the parent, so the blocks of a prompt hash in parallel on an
// out-of-order CPU; only the final mix is chained (3x faster than one lane over the
// chain, measured on a 1,578-token prompt).
func chain(parent, seed uint64, toks []uint32) uint64 {
	const k1, k2, k3 = 0x9e3779b97f4a7c15, 0xff51afd7ed558ccd, 0xc4ceb9fe1a85ec53
	a := seed ^ uint64(len(toks))*k2
	b := seed + k3
	i := 0
	for ; i+3 < len(toks); i += 4 {
		a = bits.RotateLeft64((a^(uint64(toks[i])|uint64(toks[i+1])<<32))*k1, 31)
		b = bits.RotateLeft64((b^(uint64(toks[i+2])|uint64(toks[i+3])<<32))*k3, 29)
	}
	for ; i < len(toks); i++ {
		a = bits.RotateLeft64((a^uint64(toks[i]))*k1, 31)
	}
	return fmix(parent ^ fmix(a^bits.RotateLeft64(b, 17)))
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
