// Package replica shares one picker's state with the other replicas of the same picker
// over NATS, and keeps a single picker's cache index across restarts (a state file).
//
// What travels (docs/replicas.md gives the consistency model):
//
//   - the LMCache frames any replica's controller received from an engine, with the
//     engine's connection IP, so every replica's index sees every engine's worker; each
//     receiver applies them under the same trust rules as frames from the engine itself;
//   - booking deltas (book, first token, release per endpoint) and, every state interval,
//     each replica's absolute in-flight counts, so every replica's load view counts every
//     replica's requests; a replica silent for the peer timeout is dropped from the view;
//   - on request, a snapshot of the index with the sequence number of the last frame of
//     each origin it contains, so a starting replica takes the snapshot, then the live
//     stream after it, without a gap and without applying a frame twice.
//
// The engines' own vllm:num_requests_running and _waiting, scraped on an interval, bound
// the load view from above (a booking nobody releases fades within two scrapes) and stand
// in for the peers while NATS is unreachable. vLLM KV events are not shared: every
// replica subscribes to every engine (package kvevents); a starting replica takes each
// engine rank's stream from a peer's index instead of the engine's replay (KVSnapshots).
//
// replica makes no routing decisions; it feeds lmcache.Index and fleet.Set, which the
// picker reads (and, with KVSnapshots, kvindex.Index). It must not be imported by picker,
// extproc, lmcache, kvevents or fleet.
package replica
