package kvindex

import "math/bits"

// chain returns the index key of a block of tokens whose parent block has key parent
// (the root key for the first block of a prompt); seed keys the content hash. The key
// depends on every token, their order, the block's length and the whole chain before
// it, so equal keys mean equal prefixes up to a 2^-64 collision. It is not vLLM's hash
// and need not be: both sides of the index (events and prompts) use it.
//
// The content hash takes the tokens four at a time as two 64-bit words and folds
// mum(w0 ^ s, w1 ^ t), the 128-bit product's halves xored (wyhash's mix), with
// secrets s and t that step with the group's position, so groups are independent
// multiplies and a block of 16 tokens is four. It does not depend on the parent, so
// the blocks of a prompt hash in parallel on an out-of-order CPU; only the final
// MurmurHash3 finalizer is chained (docs/decisions/0804: a 1,578-token prompt's keys in
// 0.70 µs, against 0.95 µs with the two-lane multiply-rotate this replaced).
func chain(parent, seed uint64, toks []uint32) uint64 {
	if len(toks) == 16 { // vLLM's default block size, unrolled
		return chain16(parent, seed, (*[16]uint32)(toks))
	}
	return chainLoop(parent, seed, toks)
}

const k1, k2, k3 = 0x9e3779b97f4a7c15, 0xff51afd7ed558ccd, 0xc4ceb9fe1a85ec53

// secrets returns the first group's secrets and the length term of a block's hash.
func secrets(seed uint64, n int) (s, t, acc uint64) {
	return seed ^ k2, bits.RotateLeft64(seed, 32) ^ k3, seed ^ uint64(n)*k1
}

// chain16 is chainLoop for 16 tokens, unrolled (TestChainUnrolledAgreesWithLoop).
func chain16(parent, seed uint64, b *[16]uint32) uint64 {
	s, t, acc := secrets(seed, 16)
	acc += mum(word(b[0], b[1])^s, word(b[2], b[3])^t) +
		mum(word(b[4], b[5])^(s+k1), word(b[6], b[7])^(t+k3)) +
		mum(word(b[8], b[9])^(s+k1+k1), word(b[10], b[11])^(t+k3+k3)) +
		mum(word(b[12], b[13])^(s+k1+k1+k1), word(b[14], b[15])^(t+k3+k3+k3))
	return fmix(parent ^ acc)
}

func chainLoop(parent, seed uint64, toks []uint32) uint64 {
	s, t, acc := secrets(seed, len(toks))
	i := 0
	for ; i+3 < len(toks); i += 4 {
		acc += mum(word(toks[i], toks[i+1])^s, word(toks[i+2], toks[i+3])^t)
		s += k1
		t += k3
	}
	if i < len(toks) {
		var w [4]uint32
		copy(w[:], toks[i:])
		acc += mum(word(w[0], w[1])^s, word(w[2], w[3])^t)
	}
	return fmix(parent ^ acc)
}

// appendChain16 appends the keys of the blocks of 16 tokens in toks (a multiple of 16
// long), chained from parent, to ks: chain16 for each block, with the secrets computed
// once and no call per block (docs/decisions/0805).
func appendChain16(ks []uint64, parent, seed uint64, toks []uint32) []uint64 {
	s, t, acc0 := secrets(seed, 16)
	for len(toks) >= 16 {
		b := (*[16]uint32)(toks)
		acc := acc0 + mum(word(b[0], b[1])^s, word(b[2], b[3])^t) +
			mum(word(b[4], b[5])^(s+k1), word(b[6], b[7])^(t+k3)) +
			mum(word(b[8], b[9])^(s+k1+k1), word(b[10], b[11])^(t+k3+k3)) +
			mum(word(b[12], b[13])^(s+k1+k1+k1), word(b[14], b[15])^(t+k3+k3+k3))
		parent = fmix(parent ^ acc)
		ks = append(ks, parent)
		toks = toks[16:]
	}
	return ks
}

// word packs two tokens into a 64-bit word, the first in the low half.
func word(lo, hi uint32) uint64 { return uint64(lo) | uint64(hi)<<32 }

// mum is the 128-bit product of a and b with its halves xored.
func mum(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
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

// Key is what, besides the tokens, names a request's blocks: vLLM folds a LoRA
// adapter's name into every block's hash and a cache_salt into the first block's
// (extra keys, vllm#33304), so blocks stored under one adapter or salt match only
// requests with the same. The zero Key is the base model, unsalted.
type Key struct {
	Adapter string // the LoRA adapter's name (vLLM's lora_name); empty: the base model
	Salt    string // the request's cache_salt; empty: none
}

// rootKey is the parent key of a chain's first block under k: the index's root for
// the zero Key, otherwise the root mixed with the hashes of the adapter and the salt.
// Every later block chains from the first, so the adapter and salt are in every key.
func (ix *Index) rootKey(k Key) uint64 {
	root := ix.root.Load()
	if k == (Key{}) {
		return root
	}
	return fmix(root ^ fmix(strHash(root, k.Adapter)+k1) ^ fmix(strHash(root, k.Salt)+k3))
}

// strHash is a hash of s keyed by seed, wyhash's mix over 16-byte groups: the key space
// is then the root alone, so that indexes given the same root (AdoptKeySpace) key
// adapters and salts alike (hash/maphash's seeds cannot be shared). Under a secret root a
// client cannot choose a salt whose key is another tenant's.
func strHash(seed uint64, s string) uint64 {
	s0, s1 := seed^k2, bits.RotateLeft64(seed, 32)^k3
	acc := seed ^ uint64(len(s))*k1
	for len(s) >= 16 {
		acc += mum(le64(s)^s0, le64(s[8:])^s1)
		s, s0, s1 = s[16:], s0+k1, s1+k3
	}
	var t [2]uint64 // the last 0-15 bytes
	for i := range len(s) {
		t[i/8] |= uint64(s[i]) << (8 * (i % 8))
	}
	acc += mum(t[0]^s0, t[1]^s1)
	return fmix(acc)
}

// le64 reads the first 8 bytes of s, little-endian.
func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}
