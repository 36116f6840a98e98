package trace

import (
	"bytes"
	"embed"
	"fmt"
	"sort"
	"strings"
)

// The Mooncake traces the project carries, gzip-compressed as released (one
// request a line), from kvcache-ai/Mooncake, FAST25-release/traces/ (commit
// 3b5a594), Apache License 2.0 (data/LICENSE-APACHE.mooncake):
//
//   - mooncake-conversation: the conversation trace's requests with timestamp
//     below 1,800,000 ms, 5,719 of its 12,031 (the rest is held out on purpose);
//   - mooncake-synthetic: the synthetic trace, whole, 3,993 requests.
//
//go:embed data/*.jsonl.gz
var embedded embed.FS

var embeddedFiles = map[string]string{
	"mooncake-conversation": "data/mooncake-conversation-first-half.jsonl.gz",
	"mooncake-synthetic":    "data/mooncake-synthetic.jsonl.gz",
}

// Names lists the traces the project carries, sorted.
func Names() []string {
	out := make([]string, 0, len(embeddedFiles))
	for n := range embeddedFiles {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Embedded reads one of the traces the project carries (see Names).
func Embedded(name string) (Trace, error) {
	file, ok := embeddedFiles[name]
	if !ok {
		return Trace{}, fmt.Errorf("trace: no trace named %q: the project carries %s; pass a file path for any other", name, strings.Join(Names(), ", "))
	}
	b, err := embedded.ReadFile(file)
	if err != nil {
		return Trace{}, fmt.Errorf("trace: %s: %w", name, err)
	}
	recs, err := Read(bytes.NewReader(b))
	if err != nil {
		return Trace{}, fmt.Errorf("%s: %w", name, err)
	}
	return Trace{Name: name, Records: recs}, nil
}

// Load returns the embedded trace of that name, or reads the file at that path.
func Load(nameOrPath string) (Trace, error) {
	if _, ok := embeddedFiles[nameOrPath]; ok {
		return Embedded(nameOrPath)
	}
	return Open(nameOrPath)
}
