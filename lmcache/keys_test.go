package lmcache

import (
	"slices"
	"strings"
	"testing"
)

func seq(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(i)
	}
	return t
}

func TestChunkKeysMatchCPython(t *testing.T) {
	big := slices.Repeat([]uint32{151643, 4294967295, 0, 7}, 70)
	tests := []struct {
		name     string
		cfg      KeyConfig
		tokens   []uint32
		noneHash int64
		want     []int64
	}{
		// spec/lmcache-controller.md, CPython 3.12.1.
		{"spec seed 123 [1,2,3]", KeyConfig{HashSeed: "123"}, []uint32{1, 2, 3}, -6197052367682486848,
			[]int64{-1860717783503458693}},
		{"spec seed 123 0..599", KeyConfig{HashSeed: "123"}, seq(600), -6197052367682486848,
			[]int64{-5640832744373640762, -5396598907105279758, -1307610283381381203}},
		{"spec seed 0 0..599", KeyConfig{HashSeed: "0", ChunkSize: 256}, seq(600), 5313149338359954478,
			[]int64{3067829022414786342, -6064366088855478519, -3439432626845963341}},
		// Key format v0.4 (third element ()), computed with CPython 3.11.7, whose int, tuple
		// and str hashes are the same as 3.12's (only hash(None) changed, not used here):
		// PYTHONHASHSEED=n python3 -c 'h=hash(os.environ["PYTHONHASHSEED"]); h=hash((h, tuple(c), ()))...'
		{"v0.4 seed 123 [1,2,3]", KeyConfig{HashSeed: "123", Format: KeyFormatV04}, []uint32{1, 2, 3}, -6197052367682486848,
			[]int64{1918576946030909217}},
		{"v0.4 seed 123 0..599", KeyConfig{HashSeed: "123", Format: KeyFormatV04}, seq(600), -6197052367682486848,
			[]int64{-1861538014839272852, -7207617353701294609, 5397448431534121468}},
		{"v0.4 seed 123 chunk 128", KeyConfig{HashSeed: "123", ChunkSize: 128, Format: KeyFormatV04}, seq(600), -6197052367682486848,
			[]int64{1862585498427550579, -4646202035969767612, -8226734101732192039, -6771887831290602286, 6426348092102687730}},
		{"v0.4 seed 123 large token ids", KeyConfig{HashSeed: "123", Format: KeyFormatV04}, big, -6197052367682486848,
			[]int64{-6784084953387883880, 523008124909209824}},
		{"v0.4 seed 0 0..599", KeyConfig{HashSeed: "0", Format: KeyFormatV04}, seq(600), 5313149338359954478,
			[]int64{6847123751949154252, -782556766413655621, 668996179211929659}},
		{"v0.4 seed 4294967295 0..599", KeyConfig{HashSeed: "4294967295", Format: KeyFormatV04}, seq(600), 8891781246207573802,
			[]int64{3792310134474445291, 7476733056769824526, 8988608025278673230}},
		{"v0.4 seed 4294967295 large token ids", KeyConfig{HashSeed: "4294967295", Format: KeyFormatV04}, big, 8891781246207573802,
			[]int64{-1130236804074165737, 8114530766342491210}},
		{"no tokens, no keys", KeyConfig{HashSeed: "123"}, nil, -6197052367682486848, []int64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := NewHasher(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if h.NoneHash() != tc.noneHash {
				t.Errorf("NoneHash = %d, want %d", h.NoneHash(), tc.noneHash)
			}
			if got := h.ChunkKeys(tc.tokens); !slices.Equal(got, tc.want) {
				t.Errorf("ChunkKeys = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestKeysArePrefixStable(t *testing.T) {
	// A prompt's keys are a prefix of any longer prompt's keys when the chunks agree: the
	// property the index relies on. The partial chunk's key differs from the full chunk's.
	h, err := NewHasher(KeyConfig{HashSeed: "123"})
	if err != nil {
		t.Fatal(err)
	}
	long := h.ChunkKeys(seq(1578))
	if len(long) != 7 {
		t.Fatalf("1578 tokens gave %d keys, want 7", len(long))
	}
	short := h.ChunkKeys(seq(512))
	if !slices.Equal(short, long[:2]) {
		t.Errorf("keys of the first 512 tokens %v are not a prefix of %v", short, long)
	}
	partial := h.ChunkKeys(seq(300))
	if partial[0] != long[0] || partial[1] == long[1] {
		t.Errorf("partial chunk key handling wrong: %v vs %v", partial, long[:2])
	}
}

func TestPythonPrimitiveHashes(t *testing.T) {
	// Values from CPython 3.11.7/3.12 (hash(x) for ints; hash(s) for str with PYTHONHASHSEED).
	ints := []struct{ v, want int64 }{
		{-1, -2}, {-2, -2}, {1<<61 - 1, 0}, {1 << 61, 1}, {-(1 << 61), -2}, {-1 << 63, -4}, {1<<63 - 1, 3}, {7, 7}, {0, 0},
	}
	for _, c := range ints {
		if got := pyHashInt(c.v); got != c.want {
			t.Errorf("hash(%d) = %d, want %d", c.v, got, c.want)
		}
	}
	if got := pyHashTuple(nil); got != 5740354900026072187 {
		t.Errorf("hash(()) = %d", got)
	}
	if got := pyHashTuple([]int64{1, 2, 3}); got != 529344067295497451 {
		t.Errorf("hash((1,2,3)) = %d", got)
	}
	k0, k1 := pySecret(123)
	if k0 != 0xa61dc16b30236db8 || k1 != 0x9add1780eecda020 {
		t.Errorf("secret for seed 123 = %x %x", k0, k1)
	}
	strs := []struct {
		seed uint32
		s    string
		want int64
	}{
		{123, "a", -4226623170815027173}, {123, "abcdefgh", -26574430599374517}, {123, "abcdefghi", 3094133784285360804},
		{123, "4294967295", 189356222457425914}, {0, "a", 4644417185603328019}, {0, "abcdefghi", -532774252720507163},
		{4294967295, "abcdefgh", 3424456984880118976}, {123, "", 0},
	}
	for _, c := range strs {
		k0, k1 := pySecret(c.seed)
		if got := pyHashASCII(k0, k1, c.s); got != c.want {
			t.Errorf("seed %d hash(%q) = %d, want %d", c.seed, c.s, got, c.want)
		}
	}
}

func TestNewHasherRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  KeyConfig
		want string
	}{
		{"random seed", KeyConfig{HashSeed: "random"}, "random"},
		{"empty seed", KeyConfig{HashSeed: ""}, "not an integer"},
		{"negative seed", KeyConfig{HashSeed: "-1"}, "not an integer"},
		{"seed too large", KeyConfig{HashSeed: "4294967296"}, "not an integer"},
		{"seed with text", KeyConfig{HashSeed: "12a"}, "not an integer"},
		{"negative chunk size", KeyConfig{HashSeed: "1", ChunkSize: -1}, "negative"},
		{"unknown format", KeyConfig{HashSeed: "1", Format: 7}, "key format"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewHasher(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewHasher(%+v) error = %v, want one mentioning %q", tc.cfg, err, tc.want)
			}
		})
	}
}

func TestParseKeyFormat(t *testing.T) {
	for _, c := range []struct {
		in   string
		want KeyFormat
		ok   bool
	}{{"v0.3", KeyFormatV03, true}, {"v0.4", KeyFormatV04, true}, {"0.4", KeyFormatV04, true}, {"v1", 0, false}, {"", 0, false}} {
		got, err := ParseKeyFormat(c.in)
		if (err == nil) != c.ok || (c.ok && got != c.want) {
			t.Errorf("ParseKeyFormat(%q) = %v, %v", c.in, got, err)
		}
		if c.ok && got.String() != "v0."+c.in[len(c.in)-1:] {
			t.Errorf("String() = %q", got.String())
		}
	}
}

func TestResolveHashSeed(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "PYTHONHASHSEED" {
				return v
			}
			return ""
		}
	}
	tests := []struct {
		flag, env, want, source string
	}{
		{"7", "9", "7", "flag"},
		{"", "9", "9", "environment"},
		{"", "", "123", "default"},
	}
	for _, tc := range tests {
		got, src := ResolveHashSeed(tc.flag, env(tc.env))
		if got != tc.want || !strings.Contains(src, tc.source) {
			t.Errorf("ResolveHashSeed(%q, env %q) = %q, %q", tc.flag, tc.env, got, src)
		}
	}
}

func BenchmarkChunkKeys1578(b *testing.B) {
	h, err := NewHasher(KeyConfig{HashSeed: "123"})
	if err != nil {
		b.Fatal(err)
	}
	toks := seq(1578)
	buf := make([]int64, 0, 8)
	b.ReportAllocs()
	for b.Loop() {
		buf = h.AppendChunkKeys(buf[:0], toks)
	}
}

// TestAppendChunkKeysAgreesChunkByChunk: the keys computed four and two chunks at a time
// are the keys of one chunk at a time, in order, for every count of full chunks up to nine
// with and without a partial one, and chunk sizes of 1, 3 and 256; a zero Hasher (chunk size
// 0) still returns at once for no tokens.
func TestAppendChunkKeysAgreesChunkByChunk(t *testing.T) {
	if got := new(Hasher).AppendChunkKeys(nil, nil); len(got) != 0 {
		t.Errorf("a zero Hasher gave %v for no tokens, want no keys", got)
	}
	for _, cs := range []int{1, 3, 256} {
		h, err := NewHasher(KeyConfig{HashSeed: "123", ChunkSize: cs, Format: KeyFormatV04})
		if err != nil {
			t.Fatal(err)
		}
		for chunks := range 10 {
			for _, extra := range []int{0, 1, cs - 1} {
				toks := seq(chunks*cs + extra)
				for i := range toks {
					toks[i] = toks[i]*2654435761 + 17 // ids that differ between chunks
				}
				var want []int64
				prev := h.NoneHash()
				for start := 0; start < len(toks); start += cs {
					prev = chunkKey(prev, toks[start:min(start+cs, len(toks))], h.third)
					want = append(want, prev)
				}
				if got := h.AppendChunkKeys(nil, toks); !slices.Equal(got, want) {
					t.Errorf("chunk size %d, %d tokens: %v, one chunk at a time %v", cs, len(toks), got, want)
				}
			}
		}
	}
}
