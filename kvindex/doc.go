// Package kvindex is the index of which endpoint holds which token blocks, built from
// vLLM KV cache events (Batch values; package kvevents decodes them off the wire), and
// answers the contiguous cached prefix of a prompt per endpoint. It is usable alone:
// Apply takes batches, Match takes token ids.
//
// The index keys blocks on its own chained hash of the token ids carried by
// BlockStored, never on vLLM's block hash (whose seed and algorithm a router cannot
// know); the engine hash is kept only to resolve BlockRemoved and parent links. A LoRA
// adapter's name and a cache_salt, which vLLM folds into its hash as extra keys, are
// mixed into the chain's root when IndexConfig.ExtraKeys allows (Key). Blocks the index
// cannot credit exactly (other extra keys such as multimodal items, non-prefix HMA
// groups, unknown media or localities, REMOTE blocks by policy) are refused and counted,
// never guessed.
//
// One idea per file: medium.go (tiers, credits, locality), index.go (the structure),
// apply.go (applying events), hold.go (the writer's lock holds), streams.go (endpoint
// ranks and the lookups' directory), match.go (lookups), resolve.go (a lookup's
// grouping and keys), key.go (the block hash), table.go and ctable.go (the hash
// tables), rwspin.go (the writers' lock).
//
// The package must not import kvevents, lmcache, tokenize or fleet.
package kvindex
