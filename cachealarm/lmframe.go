package cachealarm

import (
	"encoding/json"

	"github.com/tinylib/msgp/msgp"
)

// lmcacheCacheTags are the LMCache worker messages that report cache contents (what an
// engine stores or drops), as opposed to registration and heartbeats.
var lmcacheCacheTags = map[string]bool{"KVAdmitMsg": true, "KVEvictMsg": true, "BatchedKVOperationMsg": true,
	"FullSyncBatchMsg": true, "FullSyncEndMsg": true}

// LMCacheReportsCache reports whether a batch of LMCache worker messages holds one that
// reports cache contents, reading only the frames' "type" (msgpack map, or JSON object
// when the frame starts with '{') up to the first such frame. Frames that cannot be read
// report nothing.
func LMCacheReportsCache(frames [][]byte) bool {
	for _, f := range frames {
		if lmcacheCacheTags[string(frameTag(f))] {
			return true
		}
	}
	return false
}

// frameTag is the "type" of one frame, empty when it has none or cannot be read. A
// msgpack frame's tag aliases f.
func frameTag(f []byte) []byte {
	if len(f) > 0 && f[0] == '{' {
		var m struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(f, &m) != nil {
			return nil
		}
		return []byte(m.Type)
	}
	n, b, err := msgp.ReadMapHeaderBytes(f)
	if err != nil {
		return nil
	}
	for range n {
		var k []byte
		if k, b, err = msgp.ReadMapKeyZC(b); err != nil {
			return nil
		}
		if string(k) == "type" {
			v, _, err := msgp.ReadStringZC(b)
			if err != nil {
				return nil
			}
			return v
		}
		if b, err = msgp.Skip(b); err != nil {
			return nil
		}
	}
	return nil
}
