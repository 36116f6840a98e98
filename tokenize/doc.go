// Package tokenize turns prompts into the token ids a vLLM engine computes for them, exactly: the
// picker hashes these ids into LMCache chunk keys, and one differing id in a chunk changes every
// key after it.
//
// It loads a HuggingFace tokenizer.json (byte-level BPE: the Qwen2/2.5/3, Llama 3/3.1, DeepSeek V3
// and gpt-oss families) and encodes as the HuggingFace tokenizers library does: added tokens split
// out leftmost-longest, NFC as the reference performs it, the pre-tokenizer regex through a
// hand-written scanner per supported pattern (no regex engine), byte-level BPE with rank-ordered
// merges and the post-processor's special tokens. A tokenizer.json this package cannot reproduce
// exactly is refused at Load with an error naming the unsupported part; it never guesses.
//
// Chat requests are rendered with the model's chat template (tokenizer_config.json) after vLLM's
// message preprocessing, then encoded without special tokens, as vLLM's /v1/chat/completions
// does. Requests the renderer cannot reproduce exactly fail with an error wrapping
// ErrUnsupported; the caller then asks the engine (EngineClient) or routes on load alone.
//
// A Tokenizer is safe for concurrent use. It keeps a bounded cache of encoded pre-tokenized
// pieces, because prompts repeat their prefixes. The package does no network I/O except in
// EngineClient, and reads files only in Load and Resolve.
package tokenize

//go:generate go run ./internal/unicodegen -oracle ../testdata/ext/oracle/oracle.js -out unicode_tables.go
