package lmcache

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// KeyFormat is the third element of the tuple LMCache hashes for every chunk.
type KeyFormat int

const (
	// KeyFormatV03 hashes (prev, tuple(chunk), None): LMCache 0.3.x.
	KeyFormatV03 KeyFormat = iota
	// KeyFormatV04 hashes (prev, tuple(chunk), ()): newer LMCache.
	KeyFormatV04
)

// ParseKeyFormat parses "v0.3" or "v0.4".
func ParseKeyFormat(s string) (KeyFormat, error) {
	switch strings.TrimSpace(s) {
	case "v0.3", "0.3":
		return KeyFormatV03, nil
	case "v0.4", "0.4":
		return KeyFormatV04, nil
	}
	return 0, fmt.Errorf("lmcache: unknown key format %q: use v0.3 (LMCache 0.3.x, third tuple element None) or v0.4 (newer, ())", s)
}

// String returns "v0.3" or "v0.4".
func (f KeyFormat) String() string {
	switch f {
	case KeyFormatV03:
		return "v0.3"
	case KeyFormatV04:
		return "v0.4"
	}
	return "KeyFormat(" + strconv.Itoa(int(f)) + ")"
}

// DefaultChunkSize is LMCache's default chunk_size.
const DefaultChunkSize = 256

// DefaultHashSeed is PYTHONHASHSEED in the vLLM Production Stack chart (router and engines).
const DefaultHashSeed = "123"

// KeyConfig says how the engines compute chunk keys.
type KeyConfig struct {
	// HashSeed is the engines' PYTHONHASHSEED exactly as written in their environment
	// (an integer 0..4294967295 as text; "0123" and "123" give different keys).
	HashSeed string
	// ChunkSize is LMCache's chunk_size; 0 means DefaultChunkSize.
	ChunkSize int
	// Format is the key format of the engines' LMCache version.
	Format KeyFormat
}

// ResolveHashSeed picks the PYTHONHASHSEED the picker hashes with: flagValue when set, else
// the PYTHONHASHSEED environment variable (read through getenv), else DefaultHashSeed. It
// returns the value and a phrase naming where it came from, for the startup log line.
func ResolveHashSeed(flagValue string, getenv func(string) string) (seed, source string) {
	if flagValue != "" {
		return flagValue, "the --lmcache-hash-seed flag"
	}
	if getenv != nil {
		if v := getenv("PYTHONHASHSEED"); v != "" {
			return v, "the PYTHONHASHSEED environment variable"
		}
	}
	return DefaultHashSeed, "the default (the Production Stack chart's PYTHONHASHSEED)"
}

// Hasher computes the chunk keys LMCache workers put in KVAdmitMsg.key. It is immutable
// and safe for concurrent use.
type Hasher struct {
	cfg      KeyConfig
	noneHash int64 // hash(PYTHONHASHSEED text): the chain's initial value
	third    int64 // hash(None) or hash(())
}

// NewHasher validates cfg and precomputes the seed-dependent constants.
func NewHasher(cfg KeyConfig) (*Hasher, error) {
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.ChunkSize < 0 {
		return nil, fmt.Errorf("lmcache: chunk size %d is negative: use the engines' LMCACHE_CHUNK_SIZE (default 256)", cfg.ChunkSize)
	}
	h := &Hasher{cfg: cfg}
	switch cfg.Format {
	case KeyFormatV03:
		h.third = pyHashNone
	case KeyFormatV04:
		h.third = pyHashTuple(nil)
	default:
		return nil, fmt.Errorf("lmcache: unknown key format %d: use KeyFormatV03 or KeyFormatV04", cfg.Format)
	}
	seed := cfg.HashSeed
	if strings.EqualFold(strings.TrimSpace(seed), "random") {
		return nil, fmt.Errorf("lmcache: PYTHONHASHSEED=random makes every engine process hash with its own secret, so no picker can compute their chunk keys: set PYTHONHASHSEED to the same integer on the engines and here (the Production Stack chart uses %s)", DefaultHashSeed)
	}
	n, err := strconv.ParseUint(seed, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("lmcache: hash seed %q is not an integer 0..4294967295: pass the engines' PYTHONHASHSEED exactly (the Production Stack chart uses %s)", seed, DefaultHashSeed)
	}
	k0, k1 := pySecret(uint32(n))
	h.noneHash = pyHashASCII(k0, k1, seed)
	return h, nil
}

// Config returns the configuration the hasher was built with (ChunkSize filled in).
func (h *Hasher) Config() KeyConfig { return h.cfg }

// NoneHash returns NONE_HASH, hash(PYTHONHASHSEED): the value the key chain starts from.
func (h *Hasher) NoneHash() int64 { return h.noneHash }

// ChunkKeys returns the key of every chunk of tokens, the trailing partial chunk included.
func (h *Hasher) ChunkKeys(tokens []uint32) []int64 {
	n := (len(tokens) + h.cfg.ChunkSize - 1) / h.cfg.ChunkSize
	return h.AppendChunkKeys(make([]int64, 0, n), tokens)
}

// AppendChunkKeys appends the chunk keys of tokens to dst and returns the extended slice.
//
// A key chains the previous one in only after its chunk's tuple hash, which depends on the
// chunk's tokens alone; so the tuple hashes of four full chunks (then of two) are computed
// together, four independent multiply chains the processor runs side by side, and then
// chained in order (decision 1196).
func (h *Hasher) AppendChunkKeys(dst []int64, tokens []uint32) []int64 {
	cs := h.cfg.ChunkSize
	prev := h.noneHash
	start := 0
	for ; cs > 0 && len(tokens)-start >= 4*cs; start += 4 * cs { // cs is 0 only in a Hasher not from NewHasher
		var tups [4]int64
		tupleHashes4(&tups, tokens[start:start+4*cs], cs)
		for _, tup := range tups {
			prev = chainKey(prev, tup, h.third)
			dst = append(dst, prev)
		}
	}
	for ; cs > 0 && len(tokens)-start >= 2*cs; start += 2 * cs {
		t0, t1 := tupleHashes2(tokens[start:start+cs], tokens[start+cs:start+2*cs])
		prev = chainKey(prev, t0, h.third)
		dst = append(dst, prev)
		prev = chainKey(prev, t1, h.third)
		dst = append(dst, prev)
	}
	for ; start < len(tokens); start += cs {
		end := min(start+cs, len(tokens))
		prev = chunkKey(prev, tokens[start:end], h.third)
		dst = append(dst, prev)
	}
	return dst
}

// tupleHashes4 sets tups to the tuple hashes of the four chunks of cs tokens in b.
func tupleHashes4(tups *[4]int64, b []uint32, cs int) {
	c0, c1, c2, c3 := b[:cs], b[cs:2*cs], b[2*cs:3*cs], b[3*cs:4*cs]
	a0, a1, a2, a3 := uint64(xxPrime5), uint64(xxPrime5), uint64(xxPrime5), uint64(xxPrime5)
	for i, t := range c0 {
		a0 = xxRound(a0, uint64(t))
		a1 = xxRound(a1, uint64(c1[i]))
		a2 = xxRound(a2, uint64(c2[i]))
		a3 = xxRound(a3, uint64(c3[i]))
	}
	*tups = [4]int64{xxFinish(a0, cs), xxFinish(a1, cs), xxFinish(a2, cs), xxFinish(a3, cs)}
}

// tupleHashes2 is the tuple hashes of two chunks of the same length.
func tupleHashes2(c0, c1 []uint32) (int64, int64) {
	c1 = c1[:len(c0)]
	a0, a1 := uint64(xxPrime5), uint64(xxPrime5)
	for i, t := range c0 {
		a0 = xxRound(a0, uint64(t))
		a1 = xxRound(a1, uint64(c1[i]))
	}
	return xxFinish(a0, len(c0)), xxFinish(a1, len(c0))
}

// The constants below are CPython 3.12's (64-bit builds).
const (
	pyHashModulus = 1<<61 - 1
	pyHashNone    = 0xFCA86420 // hash(None), a constant since CPython 3.12
	xxPrime1      = 11400714785074694791
	xxPrime2      = 14029467366897019727
	xxPrime5      = 2870177450012600261
)

// chunkKey is hash((prev, tuple(chunk), third)) with third already hashed.
func chunkKey(prev int64, chunk []uint32, third int64) int64 {
	// Token ids are below the modulus, so each hashes to itself.
	acc := uint64(xxPrime5)
	for _, t := range chunk {
		acc = xxRound(acc, uint64(t))
	}
	return chainKey(prev, xxFinish(acc, len(chunk)), third)
}

// chainKey is hash((prev, tup, third)) for a chunk whose tuple hash is tup.
func chainKey(prev, tup, third int64) int64 {
	acc := uint64(xxPrime5)
	acc = xxRound(acc, uint64(pyHashInt(prev)))
	acc = xxRound(acc, uint64(tup))
	acc = xxRound(acc, uint64(third))
	return xxFinish(acc, 3)
}

func xxRound(acc, lane uint64) uint64 {
	acc += lane * xxPrime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * xxPrime1
}

func xxFinish(acc uint64, n int) int64 {
	acc += uint64(n) ^ (xxPrime5 ^ 3527539)
	if acc == math.MaxUint64 {
		return 1546275796
	}
	return int64(acc)
}

// pyHashTuple is CPython's tuple hash over already-hashed items.
func pyHashTuple(items []int64) int64 {
	acc := uint64(xxPrime5)
	for _, x := range items {
		acc = xxRound(acc, uint64(x))
	}
	return xxFinish(acc, len(items))
}

// pyHashInt is CPython's hash of an int that fits in 64 bits.
func pyHashInt(v int64) int64 {
	var mag uint64
	if v < 0 {
		mag = uint64(-(v + 1)) + 1
	} else {
		mag = uint64(v)
	}
	r := int64(mag % pyHashModulus)
	if v < 0 {
		r = -r
	}
	if r == -1 {
		r = -2
	}
	return r
}

// pySecret derives the SipHash key CPython uses when PYTHONHASHSEED=n (n = 0: all zero).
func pySecret(n uint32) (k0, k1 uint64) {
	if n == 0 {
		return 0, 0
	}
	var buf [24]byte
	x := n
	for i := range buf {
		x = x*214013 + 2531011
		buf[i] = byte(x >> 16)
	}
	return binary.LittleEndian.Uint64(buf[0:8]), binary.LittleEndian.Uint64(buf[8:16])
}

// pyHashASCII is CPython's hash of an ASCII str: SipHash-1-3 of its bytes.
func pyHashASCII(k0, k1 uint64, s string) int64 {
	if len(s) == 0 {
		return 0
	}
	r := int64(sipHash13(k0, k1, []byte(s)))
	if r == -1 {
		r = -2
	}
	return r
}

// sipHash13 is SipHash with one compression and three finalization rounds (CPython's
// default string hash since 3.11).
func sipHash13(k0, k1 uint64, p []byte) uint64 {
	v0 := k0 ^ 0x736f6d6570736575
	v1 := k1 ^ 0x646f72616e646f6d
	v2 := k0 ^ 0x6c7967656e657261
	v3 := k1 ^ 0x7465646279746573
	round := func() {
		v0 += v1
		v1 = bits.RotateLeft64(v1, 13) ^ v0
		v0 = bits.RotateLeft64(v0, 32)
		v2 += v3
		v3 = bits.RotateLeft64(v3, 16) ^ v2
		v0 += v3
		v3 = bits.RotateLeft64(v3, 21) ^ v0
		v2 += v1
		v1 = bits.RotateLeft64(v1, 17) ^ v2
		v2 = bits.RotateLeft64(v2, 32)
	}
	b := uint64(len(p)) << 56
	for len(p) >= 8 {
		m := binary.LittleEndian.Uint64(p)
		v3 ^= m
		round()
		v0 ^= m
		p = p[8:]
	}
	var t uint64
	for i := len(p) - 1; i >= 0; i-- {
		t = t<<8 | uint64(p[i])
	}
	b |= t
	v3 ^= b
	round()
	v0 ^= b
	v2 ^= 0xff
	round()
	round()
	round()
	return v0 ^ v1 ^ v2 ^ v3
}
