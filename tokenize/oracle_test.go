package tokenize

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// extDir is where `make testdata` puts the downloaded tokenizers and the oracle.
var extDir = filepath.Join("..", "testdata", "ext")

// refTokenizers are the real tokenizers the tests run against (directories under extDir).
var refTokenizers = []string{"qwen2_5", "qwen3", "llama3", "llama3_1", "deepseek_v3", "gptoss"}

// requireTestdata fails (never skips) the test when the downloaded data is missing.
func requireTestdata(t testing.TB, parts ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{extDir}, parts...)...)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("tokenizer test data missing (%v): run make testdata", err)
	}
	return p
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// loadRef loads (once per test binary) one of the real tokenizers.
func loadRef(t testing.TB, name string) *Tokenizer {
	t.Helper()
	dir := requireTestdata(t, name)
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tk, ok := loaded[name]; ok {
		return tk
	}
	tk, err := Load(dir)
	if err != nil {
		t.Fatalf("Load(%s): %v", dir, err)
	}
	loaded[name] = tk
	return tk
}

// oracleProc is one node process running the HuggingFace reference over a pipe.
type oracleProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startOracle(t testing.TB, tokenizerJSON string) *oracleProc {
	t.Helper()
	script := requireTestdata(t, "oracle", "oracle.js")
	requireTestdata(t, "oracle", "node_modules", "@anush008", "tokenizers")
	args := []string{script}
	if tokenizerJSON != "" {
		args = append(args, tokenizerJSON)
	}
	cmd := exec.Command("node", args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the oracle (node 20; run make testdata): %v", err)
	}
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	p := &oracleProc{cmd: cmd, in: in, out: sc}
	t.Cleanup(func() {
		in.Close()
		cmd.Wait()
	})
	return p
}

func (p *oracleProc) send(req any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	_, err = p.in.Write(append(b, '\n'))
	return err
}

func (p *oracleProc) recv(resp any) error {
	if !p.out.Scan() {
		return fmt.Errorf("oracle closed its output: %v", p.out.Err())
	}
	var e struct{ Error string }
	if json.Unmarshal(p.out.Bytes(), &e) == nil && e.Error != "" {
		return fmt.Errorf("oracle: %s", e.Error)
	}
	return json.Unmarshal(p.out.Bytes(), resp)
}

// encodeAll runs the reference on texts in batches, pipelined: a writer goroutine sends every
// batch while answers are read in order and handed to each, so our side works while node does.
func (p *oracleProc) encodeAll(texts []string, addSpecial bool, each func(i int, want []uint32)) error {
	const batch = 500
	errc := make(chan error, 1)
	go func() {
		for i := 0; i < len(texts); i += batch {
			if err := p.send(map[string]any{"encode": texts[i:min(i+batch, len(texts))], "add_special": addSpecial}); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for i := 0; i < len(texts); i += batch {
		var resp struct{ IDs [][]uint32 }
		if err := p.recv(&resp); err != nil {
			return err
		}
		for j, ids := range resp.IDs {
			each(i+j, ids)
		}
	}
	return <-errc
}
