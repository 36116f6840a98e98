package kvindex

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// stateMagic begins an encoded StreamState (version 1).
const stateMagic = "KVS1"

// AppendStreamState appends st's encoding to dst: the magic, the header (key space,
// policies, sequence number, block size, owner names), then each block as its hash and
// key (8 bytes each), its tiers (1 byte), its store order and, when the stream has
// owners, the holder set of each tier held (varints). A block costs 18-30 bytes.
func AppendStreamState(dst []byte, st StreamState) []byte {
	dst = append(dst, stateMagic...)
	dst = binary.LittleEndian.AppendUint64(dst, st.KeySpace)
	flags := byte(st.Remote) << 1
	if st.ExtraKeys {
		flags |= 1
	}
	dst = append(dst, flags)
	dst = binary.AppendVarint(dst, st.Seq)
	dst = binary.AppendUvarint(dst, uint64(st.BlockSize))
	dst = binary.AppendUvarint(dst, uint64(len(st.Owners)))
	for _, o := range st.Owners {
		dst = binary.AppendUvarint(dst, uint64(len(o)))
		dst = append(dst, o...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(st.Blocks)))
	for i := range st.Blocks {
		b := &st.Blocks[i]
		dst = binary.LittleEndian.AppendUint64(dst, b.Hash)
		dst = binary.LittleEndian.AppendUint64(dst, b.Key)
		dst = append(dst, b.Tiers)
		dst = binary.AppendUvarint(dst, b.Stamp)
		if len(st.Owners) > 0 {
			for m := range numMedia {
				if b.Tiers&(1<<m) != 0 {
					dst = binary.AppendUvarint(dst, b.Holders[m])
				}
			}
		}
	}
	return dst
}

// errShortState is DecodeStreamState's answer for a truncated encoding.
var errShortState = errors.New("kvindex: stream state truncated")

// DecodeStreamState reads what AppendStreamState wrote. It refuses anything else (a
// wrong magic, a truncation, trailing bytes, unknown flags or tiers) with an error naming
// the problem, and never allocates more than the input's size allows. What it returns
// may still be refused by ImportStream (policies, holders).
func DecodeStreamState(p []byte) (StreamState, error) {
	var st StreamState
	r := stateReader{p: p}
	if magic := r.bytes(len(stateMagic)); string(magic) != stateMagic {
		if r.err != nil {
			return st, r.err
		}
		return st, fmt.Errorf("kvindex: not a stream state (magic %q, want %q)", magic, stateMagic)
	}
	st.KeySpace = r.u64()
	flags := r.byte()
	st.ExtraKeys = flags&1 != 0
	st.Remote = RemotePolicy(flags >> 1)
	st.Seq = r.varint()
	bs := r.uvarint()
	nOwners := r.uvarint()
	if r.err != nil {
		return st, r.err
	}
	switch {
	case flags>>1 > byte(RemoteCredit):
		return st, fmt.Errorf("kvindex: stream state with unknown flags %#x", flags)
	case bs == 0 || bs > 1<<20:
		return st, fmt.Errorf("kvindex: stream state with block size %d", bs)
	case nOwners >= maxOwners:
		return st, fmt.Errorf("kvindex: stream state with %d owners, more than %d", nOwners, maxOwners-1)
	}
	st.BlockSize = int(bs)
	for range nOwners {
		n := r.uvarint()
		if n > uint64(len(r.p)) {
			return st, errShortState
		}
		st.Owners = append(st.Owners, string(r.bytes(int(n))))
	}
	n := r.uvarint()
	if r.err != nil {
		return st, r.err
	}
	const minBlock = 8 + 8 + 1 + 1
	if n > uint64(len(r.p)/minBlock) {
		return st, fmt.Errorf("kvindex: stream state claims %d blocks in %d bytes", n, len(r.p))
	}
	st.Blocks = make([]BlockState, n)
	for i := range st.Blocks {
		b := &st.Blocks[i]
		b.Hash, b.Key, b.Tiers, b.Stamp = r.u64(), r.u64(), r.byte(), r.uvarint()
		if b.Tiers >= 1<<numMedia {
			return st, fmt.Errorf("kvindex: stream state block %d has tiers %#x", i, b.Tiers)
		}
		if len(st.Owners) > 0 {
			for m := range numMedia {
				if b.Tiers&(1<<m) != 0 {
					b.Holders[m] = r.uvarint()
				}
			}
		}
		if r.err != nil {
			return st, r.err
		}
	}
	if len(r.p) > 0 {
		return st, fmt.Errorf("kvindex: %d bytes after the stream state", len(r.p))
	}
	return st, nil
}

// stateReader reads an encoding; after the first error every read returns zero.
type stateReader struct {
	p   []byte
	err error
}

func (r *stateReader) bytes(n int) []byte {
	if r.err != nil || len(r.p) < n {
		r.err = errShortState
		return nil
	}
	b := r.p[:n]
	r.p = r.p[n:]
	return b
}

func (r *stateReader) u64() uint64 {
	if b := r.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (r *stateReader) byte() byte {
	if b := r.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *stateReader) uvarint() uint64 { return readVar(r, binary.Uvarint) }

func (r *stateReader) varint() int64 { return readVar(r, binary.Varint) }

// readVar reads one variable-length integer with decode (binary.Uvarint or Varint); on a
// short or overlong one it sets r.err and returns 0, as after any earlier error.
func readVar[T uint64 | int64](r *stateReader, decode func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	v, n := decode(r.p)
	if n <= 0 {
		r.err = errShortState
		return 0
	}
	r.p = r.p[n:]
	return v
}
