package cachealarm

import (
	"testing"

	"github.com/loadaware/loadaware-epp/lmcache"
)

func encode(t testing.TB, m lmcache.Message) []byte {
	t.Helper()
	b, err := lmcache.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLMCacheReportsCache(t *testing.T) {
	reg := lmcache.RegisterMsg{InstanceID: "i", WorkerID: 0, IP: "10.0.0.1", Port: 1}
	admit := lmcache.KVAdmitMsg{InstanceID: "i", WorkerID: 0, Key: 42, Location: "LocalCPUBackend"}
	for _, tc := range []struct {
		name   string
		frames [][]byte
		want   bool
	}{
		{"an admit", [][]byte{encode(t, admit)}, true},
		{"a registration and a heartbeat are not cache events",
			[][]byte{encode(t, reg), encode(t, lmcache.HeartbeatMsg(reg))}, false},
		{"a register then admits", [][]byte{encode(t, reg), encode(t, admit), encode(t, admit)}, true},
		{"a JSON admit", [][]byte{[]byte(`{"instance_id":"i","type":"KVAdmitMsg","key":1}`)}, true},
		{"garbage", [][]byte{{0x81, 0xa4, 't', 'y'}, []byte("{"), nil}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := LMCacheReportsCache(tc.frames); got != tc.want {
				t.Fatalf("LMCacheReportsCache = %v, want %v", got, tc.want)
			}
		})
	}
}

// FuzzLMCacheReportsCache: any frame is read without a crash, and a frame reports cache
// contents exactly when lmcache.Decode reads it as such a message.
func FuzzLMCacheReportsCache(f *testing.F) {
	f.Add(encode(f, lmcache.KVAdmitMsg{InstanceID: "i", Key: 1, Location: "L"}))
	f.Add(encode(f, lmcache.KVEvictMsg{InstanceID: "i", Key: 1, Location: "L"}))
	f.Add(encode(f, lmcache.RegisterMsg{InstanceID: "i", IP: "1.2.3.4"}))
	f.Add([]byte(`{"type":"FullSyncEndMsg"}`))
	f.Fuzz(func(t *testing.T, frame []byte) {
		got := LMCacheReportsCache([][]byte{frame})
		msg, err := lmcache.Decode(frame)
		if err != nil {
			return // an undecodable frame is never applied: what the peek says does not matter
		}
		if want := lmcacheCacheTags[msg.Tag()]; got != want {
			t.Fatalf("LMCacheReportsCache = %v for a %s", got, msg.Tag())
		}
	})
}

// BenchmarkLMCacheReportsCache: the peek the controller's ingestion pays per batch (a
// worker's batch of 50 admits).
func BenchmarkLMCacheReportsCache(b *testing.B) {
	var frames [][]byte
	for k := range int64(50) {
		frames = append(frames, encode(b, lmcache.KVAdmitMsg{InstanceID: "vllm-instance-0", WorkerID: 0, Key: k * 7919, Location: "LocalCPUBackend"}))
	}
	b.ReportAllocs()
	for b.Loop() {
		if !LMCacheReportsCache(frames) {
			b.Fatal("miscounted")
		}
	}
}

// BenchmarkRouted: what a decision pays to tell the alarm.
func BenchmarkRouted(b *testing.B) {
	w, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w.Routed("10.0.0.1:8000", nil)
		}
	})
}
