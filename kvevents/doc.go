// Package kvevents is the ingestion side of the cache source fed by vLLM's own KV cache
// events: the msgpack decoder (and encoder) for every released layout of KVEventBatch,
// and the ZeroMQ subscriber that keeps a kvindex.Index current (one SUB per endpoint
// rank; gaps and resets repaired by a snapshot or a replay, or failed closed).
//
// Decode needs no sockets, and Subscriber only moves decoded batches into an Index. The
// index itself (what is credited, and how a prompt is matched) is package kvindex; the
// engine side (what vLLM's ZmqEventPublisher does) is bench/kvpublish, for tests and the
// benchmark.
//
// The package must not import lmcache, tokenize or fleet: picker and app wire it.
package kvevents
