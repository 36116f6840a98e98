package capture

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// driverColumns are the columns a driver CSV must have (in any order; extra
// columns are ignored).
var driverColumns = []string{"index", "prefix_id", "send_ts", "ttft_s", "e2e_s",
	"prompt_tokens", "completion_tokens", "status", "error", "itls_ms"}

// driverHeader maps each driver column to its position in a file.
type driverHeader map[string]int

func parseDriverHeader(rec []string) (driverHeader, error) {
	h := driverHeader{}
	for i, name := range rec {
		name = strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))
		if _, dup := h[name]; dup {
			return nil, fmt.Errorf("header: column %q twice", name)
		}
		h[name] = i
	}
	for _, c := range driverColumns {
		if _, ok := h[c]; !ok {
			return nil, fmt.Errorf("header: missing column %q (want %s)", c, strings.Join(driverColumns, ","))
		}
	}
	return h, nil
}

// parseDriver reads a whole driver CSV. name is used in errors, which name the
// line (1-based, the header being line 1).
func parseDriver(r io.Reader, name string) ([]Request, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	head, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: empty file (no header)", name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	h, err := parseDriverHeader(head)
	if err != nil {
		return nil, fmt.Errorf("%s: line 1: %w", name, err)
	}
	var out []Request
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		req, err := h.parseRow(rec)
		if err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", name, line, err)
		}
		out = append(out, req)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no rows", name)
	}
	return out, nil
}

// parseRow parses one data row. An "ok" row must have every numeric field
// (index, prefix_id, send_ts and e2e_s are required on every row);
// other rows may leave ttft_s, the token counts and itls_ms empty. Durations
// must be finite and non-negative. The error is the first bad column's.
func (h driverHeader) parseRow(rec []string) (Request, error) {
	if len(rec) <= h.maxIndex() {
		return Request{}, fmt.Errorf("%d fields, want at least %d", len(rec), h.maxIndex()+1)
	}
	w := row{h: h, rec: rec}
	r := Request{OK: w.text("status") == "ok", Error: rec[h["error"]]}
	opt := !r.OK
	r.Index = column(&w, "index", false, parseInt)
	r.PrefixID = column(&w, "prefix_id", false, parseInt)
	r.Send = column(&w, "send_ts", false, parseFloat)
	r.E2E = column(&w, "e2e_s", false, parseFloat)
	r.TTFT = column(&w, "ttft_s", opt, parseFloat)
	r.PromptTokens = column(&w, "prompt_tokens", opt, parseInt)
	r.CompletionTokens = column(&w, "completion_tokens", opt, parseInt)
	r.ITLs = column(&w, "itls_ms", true, parseITLs)
	return r, w.err
}

// row is one data row being parsed, with the first error of its columns.
type row struct {
	h   driverHeader
	rec []string
	err error
}

// text is the row's value in column c, trimmed.
func (w *row) text(c string) string { return strings.TrimSpace(w.rec[w.h[c]]) }

// column parses the row's column c with parse (given the text and the column's
// name), unless an earlier column failed, which leaves it zero. An optional
// column that is empty is zero.
func column[T any](w *row, c string, optional bool, parse func(s, col string) (T, error)) T {
	var v T
	if s := w.text(c); w.err == nil && (s != "" || !optional) {
		v, w.err = parse(s, c)
	}
	return v
}

func (h driverHeader) maxIndex() int {
	m := 0
	for _, c := range driverColumns {
		m = max(m, h[c])
	}
	return m
}

func parseInt(s, col string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("column %s: empty", col)
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("column %s: bad non-negative integer %q", col, s)
	}
	return v, nil
}

func parseFloat(s, col string) (float64, error) {
	if s == "" {
		return 0, fmt.Errorf("column %s: empty", col)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, fmt.Errorf("column %s: bad non-negative number %q", col, s)
	}
	return v, nil
}

// parseITLs parses column col's ';'-separated gaps in milliseconds (a
// trailing ';' is tolerated). An empty field is no gaps.
func parseITLs(s, col string) ([]float64, error) {
	s = strings.TrimSuffix(s, ";")
	if s == "" {
		return nil, nil
	}
	parts := strings.Split(s, ";")
	out := make([]float64, len(parts))
	for i, p := range parts {
		v, err := parseFloat(strings.TrimSpace(p), col)
		if err != nil {
			return nil, fmt.Errorf("%w (gap %d)", err, i+1)
		}
		out[i] = v
	}
	return out, nil
}
