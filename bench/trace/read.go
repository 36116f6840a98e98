// Package trace reads request traces in the Mooncake format and selects, scales
// and checks the requests a run replays.
//
// A trace is one JSON object a line (the format of kvcache-ai/Mooncake's
// FAST'25 traces):
//
//	{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 2353]}
//
// timestamp is the arrival in milliseconds from the trace's start,
// input_length and output_length are tokens, and hash_ids are prefix block
// hashes of BlockTokens tokens each, in prompt order: two requests whose lists
// start with the same k ids share their first k*BlockTokens tokens. The last
// block may be partial.
//
// The package reads and selects; it builds no prompt text and sends nothing.
// Token ids for a block come from BlockTokens, a fixed function of the block id,
// so equal ids give equal runs of tokens for every cache source.
package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// BlockTokens is the number of tokens one hash id stands for in the Mooncake
// traces.
const BlockTokens = 512

// maxLineBytes bounds one line of a trace: 1 MiB holds about 130,000 ids,
// 66 million tokens of prompt, far past any model's context.
const maxLineBytes = 1 << 20

// Record is one request of a trace, as read.
type Record struct {
	Line         int           // 1-based line of the trace it came from
	At           time.Duration // arrival from the trace's start
	InputTokens  int           // prompt tokens
	OutputTokens int           // completion tokens
	Blocks       []int64       // prefix block ids, in prompt order
}

// Trace is a named, read trace.
type Trace struct {
	Name    string   // the file's base name without extensions, or an embedded trace's name
	Records []Record // in arrival order
}

// record is the wire form of one line; pointers tell a missing key from zero.
type record struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      *[]int64 `json:"hash_ids"`
}

// Read reads a trace in the Mooncake format, plain or gzip-compressed (told by
// its first bytes). Blank lines are skipped. Every error names the line and
// what to fix: an unknown or missing key, a negative or non-integral value,
// more tokens than the line's blocks hold (or fewer than all but its last
// block), a block id below zero, or a timestamp earlier than the line before
// (a trace is in arrival order).
func Read(r io.Reader) ([]Record, error) {
	br := bufio.NewReader(r)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("trace: gzip header: %w", err)
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	var out []Record
	var last time.Duration
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		rec, err := parseLine(b)
		if err != nil {
			return nil, fmt.Errorf("trace: line %d: %w", line, err)
		}
		rec.Line = line
		if rec.At < last {
			return nil, fmt.Errorf("trace: line %d: timestamp %d ms is before the line before's %d ms: a trace lists requests in arrival order (sort it by timestamp)",
				line, rec.At.Milliseconds(), last.Milliseconds())
		}
		last = rec.At
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("trace: line %d is longer than %d bytes: is this a Mooncake trace (one JSON object a line)?", line+1, maxLineBytes)
		}
		return nil, fmt.Errorf("trace: after line %d: %w", line, err)
	}
	if len(out) == 0 {
		return nil, errors.New("trace: no requests: the trace is empty")
	}
	return out, nil
}

func parseLine(b []byte) (Record, error) {
	var w record
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return Record{}, fmt.Errorf("%w (want {\"timestamp\": ms, \"input_length\": n, \"output_length\": n, \"hash_ids\": [...]})", err)
	}
	if dec.More() {
		return Record{}, errors.New("more than one JSON value on the line: put one request a line")
	}
	switch {
	case w.Timestamp == nil:
		return Record{}, errors.New(`missing key "timestamp" (arrival, ms from the trace's start)`)
	case w.InputLength == nil:
		return Record{}, errors.New(`missing key "input_length" (prompt tokens)`)
	case w.OutputLength == nil:
		return Record{}, errors.New(`missing key "output_length" (completion tokens)`)
	case w.HashIDs == nil:
		return Record{}, errors.New(`missing key "hash_ids" (prefix block ids of 512 tokens)`)
	}
	ts := *w.Timestamp
	if ts < 0 || math.IsNaN(ts) || ts > float64(math.MaxInt64/int64(time.Millisecond)) {
		return Record{}, fmt.Errorf("timestamp %v: want milliseconds from 0", ts)
	}
	in, outTok, ids := *w.InputLength, *w.OutputLength, *w.HashIDs
	if in < 1 {
		return Record{}, fmt.Errorf("input_length %d: a prompt has at least 1 token", in)
	}
	if outTok < 1 {
		return Record{}, fmt.Errorf("output_length %d: a request asks for at least 1 token", outTok)
	}
	if len(ids) == 0 {
		return Record{}, errors.New("hash_ids is empty: a prompt of input_length tokens has at least one block")
	}
	if hold := len(ids) * BlockTokens; in > hold {
		return Record{}, fmt.Errorf("input_length %d is more than its %d hash_ids hold (%d tokens of %d a block)", in, len(ids), hold, BlockTokens)
	}
	if min := (len(ids)-1)*BlockTokens + 1; in < min {
		return Record{}, fmt.Errorf("input_length %d leaves its last of %d hash_ids empty (at least %d tokens needed)", in, len(ids), min)
	}
	for i, id := range ids {
		if id < 0 {
			return Record{}, fmt.Errorf("hash_ids[%d] = %d: block ids are 0 or more", i, id)
		}
	}
	return Record{
		At:           time.Duration(ts * float64(time.Millisecond)),
		InputTokens:  in,
		OutputTokens: outTok,
		Blocks:       ids,
	}, nil
}

// Open reads the trace at path (plain or gzip-compressed) and names it after
// the file: its base name without .gz, .jsonl or .json.
func Open(path string) (Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return Trace{}, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	recs, err := Read(f)
	if err != nil {
		return Trace{}, fmt.Errorf("%s: %w", path, err)
	}
	return Trace{Name: nameOf(path), Records: recs}, nil
}

func nameOf(path string) string {
	n := filepath.Base(path)
	for _, ext := range []string{".gz", ".jsonl", ".json"} {
		n = strings.TrimSuffix(n, ext)
	}
	return n
}
