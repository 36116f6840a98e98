package lmcache

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

func TestRunKeysCommand(t *testing.T) {
	tokens600 := func() string {
		var b strings.Builder
		b.WriteString("[")
		for i := range 600 {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprint(&b, i)
		}
		b.WriteString("]")
		return b.String()
	}()
	tests := []struct {
		name      string
		env       string
		args      []string
		stdin     string
		code      int
		stdout    string
		stderrHas string
	}{
		{"spec vector, lines", "", []string{"--hash-seed", "123"}, tokens600, 0,
			"0\t0-256\t-5640832744373640762\n1\t256-512\t-5396598907105279758\n2\t512-600\t-1307610283381381203\n", "NONE_HASH=-6197052367682486848"},
		{"seed from the environment", "0", []string{"--json"}, tokens600, 0,
			"[3067829022414786342,-6064366088855478519,-3439432626845963341]\n", "PYTHONHASHSEED=0 (from the PYTHONHASHSEED environment variable)"},
		{"default seed is the chart's", "", []string{"--json"}, "[1,2,3]", 0, "[-1860717783503458693]\n", "PYTHONHASHSEED=123 (from the default"},
		{"vLLM /tokenize output, v0.4, chunk 128", "", []string{"--hash-seed=123", "--key-format", "v0.4", "--chunk-size", "128", "--json"},
			`{"count":600,"max_model_len":4096,"tokens":` + tokens600 + `}`, 0,
			"[1862585498427550579,-4646202035969767612,-8226734101732192039,-6771887831290602286,6426348092102687730]\n", "5 chunks"},
		{"input_ids object", "", []string{"--json"}, `{"input_ids":[1,2,3]}`, 0, "[-1860717783503458693]\n", "3 tokens"},
		{"empty prompt", "", []string{"--json"}, `[]`, 0, "[]\n", "0 chunks"},
		{"no input", "", nil, "", 1, "", "no input"},
		{"negative token", "", nil, "[1,-2]", 1, "", "token 1 (-2)"},
		{"token too large", "", nil, "[4294967296]", 1, "", "token 0"},
		{"not JSON", "", nil, "1 2 3", 1, "", "not a JSON array"},
		{"object without tokens", "", nil, `{"ids":[1]}`, 1, "", `no "tokens"`},
		{"bad key format", "", []string{"--key-format", "v9"}, "[1]", 2, "", "unknown key format"},
		{"bad chunk size", "", []string{"--chunk-size", "0"}, "[1]", 2, "", "must be positive"},
		{"random seed", "", []string{"--hash-seed", "random"}, "[1]", 2, "", "PYTHONHASHSEED=random"},
		{"stray argument", "", []string{"tokens.json"}, "[1]", 2, "", "read from stdin"},
		{"unknown flag", "", []string{"--seed", "1"}, "[1]", 2, "", "usage:"},
		{"help", "", []string{"-h"}, "", 0, "", "usage:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PYTHONHASHSEED", tc.env)
			var out, errOut bytes.Buffer
			code := RunKeysCommand(tc.args, strings.NewReader(tc.stdin), &out, &errOut)
			if code != tc.code || out.String() != tc.stdout || !strings.Contains(errOut.String(), tc.stderrHas) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q, stderr containing %q",
					code, out.String(), errOut.String(), tc.code, tc.stdout, tc.stderrHas)
			}
		})
	}
}
