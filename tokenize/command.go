package tokenize

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strings"
)

// RunCommand is `loadaware-epp tokenize --tokenizer PATH [--chat] [--add-special=false]`: it reads
// JSON lines from stdin (a string, or with --chat a /v1/chat/completions request object with
// messages and optional tools) and prints one JSON array of token ids per line. A line that
// cannot be tokenized prints null and an error on stderr; the exit code is then 1 (2 for usage
// errors).
func RunCommand(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("tokenizer", "", "tokenizer.json file or model directory (required)")
	chat := fs.Bool("chat", false, "lines are chat request objects, rendered with the model's chat template")
	addSpecial := fs.Bool("add-special", true, "add the post-processor's special tokens to string lines, as /v1/completions does")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: loadaware-epp tokenize --tokenizer PATH [--chat] [--add-special=false] < lines.jsonl")
		return 2
	}
	tk, err := Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	in := bufio.NewScanner(stdin)
	in.Buffer(make([]byte, 1<<20), 256<<20)
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	code, n := 0, 0
	for in.Scan() {
		n++
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		ids, err := encodeLine(tk, []byte(line), *chat, *addSpecial)
		if err != nil {
			fmt.Fprintf(stderr, "line %d: %v\n", n, err)
			code = 1
			out.WriteString("null\n")
			continue
		}
		b, _ := json.Marshal(ids)
		out.Write(b)
		out.WriteByte('\n')
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(stderr, "read stdin: %v\n", err)
		return 1
	}
	return code
}

func encodeLine(tk *Tokenizer, line []byte, chat, addSpecial bool) ([]uint32, error) {
	if chat {
		if line[0] != '{' {
			return nil, fmt.Errorf("--chat expects a JSON object with messages")
		}
		return tk.EncodeChat(line)
	}
	var s string
	if err := json.Unmarshal(line, &s); err != nil {
		return nil, fmt.Errorf("expected a JSON string (pass --chat for chat requests): %v", err)
	}
	ids := tk.Encode(s, addSpecial)
	if ids == nil {
		ids = []uint32{}
	}
	return ids, nil
}
