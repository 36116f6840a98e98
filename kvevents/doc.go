// Package kvevents is the cache source fed by vLLM's own KV cache events: the msgpack
// decoder for every released layout of KVEventBatch, an index of which endpoint holds
// which token blocks, and the ZeroMQ subscriber that keeps the index current (one SUB
// per endpoint, gaps and resets repaired by replay or failed closed).
//
// The three parts are usable alone: Decode needs no sockets, Index needs no decoder
// input beyond Batch values, and Subscriber only moves frames into an Index. Publisher
// is the engine side (what vLLM's ZmqEventPublisher does), for tests and the benchmark.
//
// The index keys blocks on its own chained hash of the token ids carried by BlockStored,
// never on vLLM's block hash (whose seed and algorithm a router cannot know); the engine
// hash is kept only to resolve BlockRemoved and parent links. Blocks the router cannot
// credit exactly (LoRA, extra keys such as cache_salt or multimodal items, non-prefix
// HMA groups) are refused and counted, never guessed.
//
// The package must not import lmcache, tokenize or fleet: picker and app wire it.
package kvevents
