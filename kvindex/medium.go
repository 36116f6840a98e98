package kvindex

import (
	"fmt"
	"strconv"
	"strings"
)

// Medium is a cache tier named by an event's medium field.
type Medium uint8

// The tiers the index credits. A block may be held in several at once.
const (
	GPU     Medium = iota
	CPU            // host memory of the engine's machine
	Disk           // a disk of the engine's machine
	Storage        // a file system or object store (vLLM's STORAGE, formerly FS and OBJ)
	numMedia
)

// String is the tier's name as --kv-events-medium-credit spells it.
func (m Medium) String() string {
	return [...]string{"GPU", "CPU", "DISK", "STORAGE"}[m]
}

// spellings maps every medium spelling known to be sent to its tier (matched without
// regard to case). Sources: vLLM MEDIUM_GPU and "CPU" (vllm#19737, the CPU offloading
// connector); FS and OBJ (vllm#47923, v0.26), collapsed into STORAGE (vllm#48123,
// v0.27); CPU_PINNED, CPU_TIER1, CPU_TIER2, DISK and NVME as dynamo's KV router maps
// them (ai-dynamo/dynamo#10368, #11571: CPU_TIER2 is its disk tier); SHARED_STORAGE
// from shared-pool producers (ai-dynamo/dynamo#11973); LMCache's backend names
// (LocalCPUBackend, LocalDiskBackend).
var spellings = map[string]Medium{
	"gpu": GPU, "cuda": GPU,
	"cpu": CPU, "cpu_pinned": CPU, "cpu_tier1": CPU, "localcpubackend": CPU,
	"disk": Disk, "cpu_tier2": Disk, "nvme": Disk, "localdiskbackend": Disk,
	"storage": Storage, "fs": Storage, "obj": Storage, "shared_storage": Storage,
}

// ParseMedium maps an event's medium to a tier: "" (None, vLLM before #19737) is GPU,
// and every spelling in the package's table (GPU, CPU, CPU_PINNED, CPU_TIER1,
// CPU_TIER2, DISK, NVME, FS, OBJ, STORAGE, SHARED_STORAGE, LMCache's backend names, in
// any case) its tier. ok is false for anything else: such blocks are refused (fail
// closed), never guessed.
func ParseMedium(s string) (m Medium, ok bool) {
	switch s { // vLLM's spellings, without lowering a copy
	case "", "GPU":
		return GPU, true
	case "CPU":
		return CPU, true
	case "STORAGE":
		return Storage, true
	}
	m, ok = spellings[strings.ToLower(s)]
	return m, ok
}

// Credits is the fraction of a block's tokens credited when an endpoint holds it in a
// tier (its best tier counts). A tier with credit 0 also ends the contiguous prefix.
type Credits struct{ GPU, CPU, Disk, Storage float64 }

// DefaultCredits credits GPU and CPU blocks fully (the LMCache source credits its CPU
// tier fully too) and disk and storage blocks at half (see docs/decisions/0801 and
// 0810).
func DefaultCredits() Credits { return Credits{GPU: 1, CPU: 1, Disk: 0.5, Storage: 0.5} }

func (c Credits) of(m Medium) float64 {
	return [numMedia]float64{c.GPU, c.CPU, c.Disk, c.Storage}[m]
}

func (c *Credits) set(m Medium, f float64) {
	*[numMedia]*float64{&c.GPU, &c.CPU, &c.Disk, &c.Storage}[m] = f
}

// String writes c as ParseCredits reads it.
func (c Credits) String() string {
	var b strings.Builder
	for m := range numMedia {
		if m > 0 {
			b.WriteByte(',')
		}
		b.WriteString(m.String() + "=" + strconv.FormatFloat(c.of(m), 'g', -1, 64))
	}
	return b.String()
}

// ParseCredits parses "GPU=1,CPU=0.9,STORAGE=0.5": any subset, the rest keep their
// defaults. A name is a tier (GPU, CPU, DISK, STORAGE) or any medium spelling
// ParseMedium knows, which sets its tier's credit (FS=0.25 sets STORAGE's); two names of
// one tier must agree.
func ParseCredits(s string) (Credits, error) {
	c := DefaultCredits()
	var given [numMedia]string
	for kv := range strings.SplitSeq(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		name, val, ok := strings.Cut(kv, "=")
		name = strings.TrimSpace(name)
		var f float64
		if ok {
			var err error
			f, err = strconv.ParseFloat(strings.TrimSpace(val), 64)
			ok = err == nil && f >= 0 && f <= 1
		}
		m, known := ParseMedium(name)
		if !ok || !known || name == "" {
			return c, fmt.Errorf("kvindex: medium credit %q: use NAME=FRACTION with NAME a tier (GPU, CPU, DISK, STORAGE) or a medium spelling (CPU_PINNED, CPU_TIER1, CPU_TIER2, NVME, FS, OBJ, SHARED_STORAGE, ...) and FRACTION in [0,1], e.g. GPU=1,CPU=0.9,STORAGE=0.5", kv)
		}
		if given[m] != "" && c.of(m) != f {
			return c, fmt.Errorf("kvindex: medium credit %q: %s is tier %s, already credited %g by %q; give each tier one credit", kv, name, m, c.of(m), given[m])
		}
		given[m] = kv
		c.set(m, f)
	}
	return c, nil
}

// Locality is where a block sits relative to the engine that published it: vLLM's
// locality field (vllm#48281, v0.26: "LOCAL" or "REMOTE"; absent means unspecified).
type Locality uint8

// The localities.
const (
	LocalityUnspecified Locality = iota
	Local
	Remote
)

// ParseLocality maps an event's locality; ok is false for a spelling vLLM does not send.
func ParseLocality(s string) (l Locality, ok bool) {
	switch strings.ToUpper(s) {
	case "":
		return LocalityUnspecified, true
	case "LOCAL":
		return Local, true
	case "REMOTE":
		return Remote, true
	}
	return 0, false
}

// RemotePolicy is what the index does with a block whose locality is REMOTE: held in a
// tier that is not the publishing engine's own (a shared CPU pool, a remote file
// system or object store).
type RemotePolicy uint8

// The policies.
const (
	// RemoteRefuse leaves REMOTE blocks out of the index (counted refused_remote): the
	// publisher is credited only for what it holds itself.
	RemoteRefuse RemotePolicy = iota
	// RemoteCredit credits a REMOTE block to its publisher at its medium's tier credit
	// (the engine can load it from there), except a REMOTE GPU block, which is never
	// the publisher's GPU and is refused.
	RemoteCredit
)

// ParseRemotePolicy parses "refuse" or "credit".
func ParseRemotePolicy(s string) (RemotePolicy, error) {
	switch s {
	case "refuse":
		return RemoteRefuse, nil
	case "credit":
		return RemoteCredit, nil
	}
	return 0, fmt.Errorf("kvindex: remote policy %q: use refuse (REMOTE blocks are not credited) or credit (credited at their medium's tier)", s)
}

func (p RemotePolicy) String() string { return [...]string{"refuse", "credit"}[p] }
