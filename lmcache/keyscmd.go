package lmcache

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
)

// RunKeysCommand is the lmcache-keys subcommand: it reads a prompt's token ids from stdin
// and prints the chunk keys an LMCache worker would admit for them, so an operator can
// compare them with the keys in an engine's LMCache log. args are the arguments after the
// subcommand name; the return value is the exit code.
//
// Input is a JSON array of token ids, or an object with a "tokens" (vLLM /tokenize) or
// "input_ids" array. Output is one line per chunk, "index<TAB>start-end<TAB>key", or a JSON
// array of keys with --json; a summary line goes to stderr.
func RunKeysCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lmcache-keys", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seedFlag := fs.String("hash-seed", "", "the engines' PYTHONHASHSEED (default: $PYTHONHASHSEED, else "+DefaultHashSeed+")")
	chunk := fs.Int("chunk-size", DefaultChunkSize, "LMCache chunk_size")
	format := fs.String("key-format", "v0.3", "key format: v0.3 (LMCache 0.3.x, None) or v0.4 (newer, ())")
	asJSON := fs.Bool("json", false, "print a JSON array of keys")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: loadaware-epp lmcache-keys [--hash-seed N] [--chunk-size 256] [--key-format v0.3|v0.4] [--json] < token_ids.json\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "lmcache-keys: unexpected argument %q: token ids are read from stdin\n", fs.Arg(0))
		return 2
	}
	kf, err := ParseKeyFormat(*format)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if *chunk <= 0 {
		fmt.Fprintf(stderr, "lmcache-keys: --chunk-size %d must be positive (LMCache default 256)\n", *chunk)
		return 2
	}
	seed, source := ResolveHashSeed(*seedFlag, os.Getenv)
	h, err := NewHasher(KeyConfig{HashSeed: seed, ChunkSize: *chunk, Format: kf})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	tokens, err := readTokenIDs(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "lmcache-keys: %v\n", err)
		return 1
	}
	keys := h.ChunkKeys(tokens)
	fmt.Fprintf(stderr, "lmcache-keys: PYTHONHASHSEED=%s (from %s), NONE_HASH=%d, chunk size %d, key format %s: %d tokens, %d chunks\n",
		seed, source, h.NoneHash(), *chunk, kf, len(tokens), len(keys))
	if *asJSON {
		out, err := json.Marshal(keys)
		if err != nil {
			fmt.Fprintf(stderr, "lmcache-keys: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "%s\n", out)
		return 0
	}
	for i, k := range keys {
		fmt.Fprintf(stdout, "%d\t%d-%d\t%d\n", i, i**chunk, min((i+1)**chunk, len(tokens)), k)
	}
	return 0
}

// readTokenIDs parses a JSON array of token ids, or an object holding one under "tokens"
// or "input_ids".
func readTokenIDs(r io.Reader) ([]uint32, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("read stdin: %w", err)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, errors.New("no input: pipe a JSON array of token ids to stdin")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var raw []json.Number
	if data[0] == '{' {
		var obj map[string]json.RawMessage
		if err := dec.Decode(&obj); err != nil {
			return nil, fmt.Errorf("input is not JSON: %w", err)
		}
		field := obj["tokens"]
		if field == nil {
			field = obj["input_ids"]
		}
		if field == nil {
			return nil, errors.New(`the JSON object has no "tokens" or "input_ids" array`)
		}
		d := json.NewDecoder(bytes.NewReader(field))
		d.UseNumber()
		if err := d.Decode(&raw); err != nil {
			return nil, fmt.Errorf("token ids: %w", err)
		}
	} else if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("input is not a JSON array of token ids: %w", err)
	}
	out := make([]uint32, len(raw))
	for i, n := range raw {
		v, err := strconv.ParseUint(string(n), 10, 32)
		if err != nil {
			return nil, fmt.Errorf("token %d (%s) is not an integer 0..4294967295", i, n)
		}
		out[i] = uint32(v)
	}
	return out, nil
}
