// Package lmcache is the embedded LMCache controller: it receives the cache events the
// engines' LMCache workers push, keeps an index of which engine holds which chunk, and
// answers, for a prompt's token ids, how long a prefix every engine already holds.
//
// The parts, each usable alone:
//
//   - Hasher computes the chunk keys LMCache puts in KVAdmitMsg.key (CPython's hash of
//     (prev, tuple(chunk), None | ()) chained from hash(PYTHONHASHSEED)).
//   - Encode and Decode speak the workers' msgspec msgpack (and JSON) messages.
//   - Index is the key -> holders index and the worker registry. Apply ingests one message
//     with an explicit time; Lookup reports every eligible instance's contiguous prefix,
//     and MatchHeld the endpoints (of a list resolved once) that hold it. A lookup costs
//     the prompt's chunks and the holders it meets, never the registry's or the endpoint
//     list's size; a registration costs what it changes. Lookups never wait for a burst
//     of ingestion. Messages from the network are applied
//     only for instances of the IP they came from (trust.go: an engine speaks only for
//     itself), and the index stays under a key budget, least recently used first (budget.go).
//   - Server owns the ZeroMQ sockets (PULL for pushed events, ROUTER for register and
//     heartbeat requests). Its ZMTP front (front.go, package zmtp) listens in their place:
//     it admits only the fleet's IPs, at most MaxPeerConns of an IP, and hands libzmq only
//     messages within the frame cap in bytes and 64 frames (decision 1178), their bytes
//     charged to the peer's rate when it drops them (decision 1201). libzmq listens behind
//     it on Unix sockets: abstract on Linux, files in a private directory elsewhere (inner.go).
//   - MissDetector warns when an endpoint's admits never match the keys of the prompts
//     this picker sent it (hash seed, tokenizer, chunk size or key format differ).
//
// The package does no routing: it reports matches per LMCache instance and the instance's
// IP, and leaves the mapping to endpoints and the choice to its caller. It reads no clock
// in its decision code (times are passed in) and starts no goroutine outside Server.
package lmcache
