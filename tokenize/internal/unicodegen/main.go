// Command unicodegen writes tokenize/unicode_tables.go: the character classes and NFC exceptions of
// the HuggingFace tokenizers reference, measured on the reference itself (its Oniguruma regex engine
// and its normalizer) rather than taken from Go's unicode package, whose Unicode version differs.
//
// It needs the oracle installed by `make testdata` and is run by `go generate ./tokenize/`:
//
//	go run ./internal/unicodegen -oracle ../testdata/ext/oracle/oracle.js -out unicode_tables.go
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"slices"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// classes are the regex classes the supported pre-tokenizer patterns use, in bit order.
var classes = []struct{ name, regex string }{
	{"clsL", `\p{L}`},
	{"clsN", `\p{N}`},
	{"clsM", `\p{M}`},
	{"clsP", `\p{P}`},
	{"clsS", `\p{S}`},
	{"clsLu", `\p{Lu}`},
	{"clsLl", `\p{Ll}`},
	{"clsLt", `\p{Lt}`},
	{"clsLm", `\p{Lm}`},
	{"clsLo", `\p{Lo}`},
	{"clsSpace", `\s`},
}

type oracle struct {
	cmd *exec.Cmd
	in  *bufio.Writer
	out *bufio.Scanner
}

func startOracle(script string) (*oracle, error) {
	cmd := exec.Command("node", script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the oracle (run make testdata): %w", err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<30)
	return &oracle{cmd: cmd, in: bufio.NewWriter(stdin), out: sc}, nil
}

func (o *oracle) call(req any, resp any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	o.in.Write(b)
	o.in.WriteByte('\n')
	if err := o.in.Flush(); err != nil {
		return err
	}
	if !o.out.Scan() {
		return fmt.Errorf("oracle closed its output: %v", o.out.Err())
	}
	var e struct{ Error string }
	if json.Unmarshal(o.out.Bytes(), &e) == nil && e.Error != "" {
		return fmt.Errorf("oracle: %s", e.Error)
	}
	return json.Unmarshal(o.out.Bytes(), resp)
}

// members returns the code points the reference's regex class matches, as sorted ranges.
func members(o *oracle, regex string) ([][2]rune, error) {
	all := make([]bool, utf8.MaxRune+1)
	const chunk = 1 << 16
	for lo := rune(0); lo <= utf8.MaxRune; lo += chunk {
		var cps []rune
		for c := lo; c < lo+chunk && c <= utf8.MaxRune; c++ {
			if c >= 0xD800 && c <= 0xDFFF {
				continue
			}
			cps = append(cps, c)
		}
		var resp struct{ Pieces [][][2]int }
		if err := o.call(map[string]any{"split": regex, "texts": []string{string(cps)}}, &resp); err != nil {
			return nil, err
		}
		matched := make([]bool, len(cps))
		for i := range matched {
			matched[i] = true
		}
		for _, sp := range resp.Pieces[0] {
			for i := sp[0]; i < sp[1]; i++ {
				matched[i] = false
			}
		}
		for i, m := range matched {
			all[cps[i]] = m
		}
	}
	var out [][2]rune
	for c := rune(0); c <= utf8.MaxRune; c++ {
		if !all[c] {
			continue
		}
		if n := len(out); n > 0 && out[n-1][1] == c-1 {
			out[n-1][1] = c
		} else {
			out = append(out, [2]rune{c, c})
		}
	}
	return out, nil
}

// normActive reports whether Go's NFC can change or reorder text around r.
func normActive(r rune) bool {
	p := norm.NFC.PropertiesString(string(r))
	return p.CCC() != 0 || len(p.Decomposition()) > 0 || !p.BoundaryBefore() || !p.BoundaryAfter()
}

// nfcExceptions returns the code points that Go's NFC treats as combining, decomposable or
// composable but the reference treats as inert (its normalization data is older).
func nfcExceptions(o *oracle) ([]rune, error) {
	// Composition pairs known to Go: first -> seconds, second -> firsts.
	firsts := map[rune][]rune{}
	seconds := map[rune][]rune{}
	for c := rune(0); c <= utf8.MaxRune; c++ {
		d := []rune(norm.NFD.String(string(c)))
		if len(d) == 2 && norm.NFC.String(string(d)) == string(c) {
			firsts[d[0]] = append(firsts[d[0]], d[1])
			seconds[d[1]] = append(seconds[d[1]], d[0])
		}
	}
	var cands []rune
	for c := rune(0); c <= utf8.MaxRune; c++ {
		if c >= 0xD800 && c <= 0xDFFF {
			continue
		}
		if normActive(c) {
			cands = append(cands, c)
		}
	}
	probes := func(c rune) []string {
		s := string(c)
		out := []string{s, "a" + s, s + s, "a" + s + "\u0301", "a\u0301" + s, "a" + s + "\u0316", "a\u0316" + s,
			"a" + s + "\u05B0", "a\u05B0" + s, "\u1100" + s, s + "\u1161"}
		for _, b := range firsts[c] {
			out = append(out, s+string(b), s+"\u0316"+string(b))
		}
		for _, a := range seconds[c] {
			out = append(out, string(a)+s, string(a)+"\u0316"+s)
		}
		return out
	}
	var exc []rune
	const batch = 2000
	for i := 0; i < len(cands); i += batch {
		part := cands[i:min(i+batch, len(cands))]
		var texts []string
		var owner []rune
		for _, c := range part {
			for _, p := range probes(c) {
				texts = append(texts, p)
				owner = append(owner, c)
			}
		}
		var resp struct{ NFC []string }
		if err := o.call(map[string]any{"nfc": texts}, &resp); err != nil {
			return nil, err
		}
		for j, t := range texts {
			if resp.NFC[j] != norm.NFC.String(t) {
				exc = append(exc, owner[j])
			}
		}
	}
	slices.Sort(exc)
	return slices.Compact(exc), nil
}

func main() {
	script := flag.String("oracle", "../testdata/ext/oracle/oracle.js", "path of the oracle script (make testdata installs it)")
	outPath := flag.String("out", "unicode_tables.go", "output Go file")
	flag.Parse()
	o, err := startOracle(*script)
	if err != nil {
		fmt.Fprintln(os.Stderr, "unicodegen:", err)
		os.Exit(1)
	}
	var buf bytes.Buffer
	buf.WriteString("// Code generated by go run ./internal/unicodegen; DO NOT EDIT.\n\n")
	buf.WriteString("// Measured on the HuggingFace tokenizers reference (Oniguruma classes, NFC normalizer).\n\n")
	buf.WriteString("package tokenize\n\n")
	buf.WriteString("// classRanges lists, per character class bit, the code point ranges the reference's regex engine puts in it.\n")
	buf.WriteString("var classRanges = [...]struct {\n\tbit    uint16\n\tranges [][2]rune\n}{\n")
	for _, c := range classes {
		rs, err := members(o, c.regex)
		if err != nil {
			fmt.Fprintln(os.Stderr, "unicodegen:", c.regex, err)
			os.Exit(1)
		}
		fmt.Fprintf(&buf, "\t{%s, [][2]rune{ // %s\n", c.name, c.regex)
		for i, r := range rs {
			fmt.Fprintf(&buf, "{0x%X, 0x%X},", r[0], r[1])
			if i%6 == 5 {
				buf.WriteString("\n")
			}
		}
		buf.WriteString("}},\n")
	}
	buf.WriteString("}\n\n")
	exc, err := nfcExceptions(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "unicodegen: nfc:", err)
		os.Exit(1)
	}
	buf.WriteString("// nfcInert lists the code points Go's NFC composes, decomposes or reorders but the reference leaves\n// alone (its normalization data predates them); the reference treats each as an inert starter.\n")
	buf.WriteString("var nfcInert = []rune{")
	for i, r := range exc {
		if i%8 == 0 {
			buf.WriteString("\n")
		}
		fmt.Fprintf(&buf, "0x%X, ", r)
	}
	buf.WriteString("\n}\n")
	src, err := format.Source(buf.Bytes())
	if err != nil {
		fmt.Fprintln(os.Stderr, "unicodegen: gofmt:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*outPath, src, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "unicodegen:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "unicodegen: wrote %s (%d NFC exceptions)\n", *outPath, len(exc))
}
