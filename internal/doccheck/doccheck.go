// Package doccheck keeps the index of the decision records (docs/decisions/README.md) in step
// with the records: every record has one line, every line names a record that exists, and every
// status names records that exist. It is used by its own test only; it reads what it is given
// and touches no file itself.
//
// An index line is a table row whose first cell is the record's four-digit number:
//
//	| 0002 | [The ext_proc conversation](0002-extproc-state-machine.md) | gist | amended by 0700, 1122 |
//
// The second cell links the record's file, named NNNN-title.md; the last cell is the status:
// "accepted", "amended by N" (one or more numbers, comma-separated) or "superseded by N". Rows
// whose first cell is not a number (the header, the rule) and all other text are prose.
package doccheck

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// Entry is one line of the index.
type Entry struct {
	Number string   // "0002"
	File   string   // the linked file, "0002-extproc-state-machine.md"
	Status string   // the status cell as written
	Later  []string // the records the status names
	Line   int      // 1-based line in the index
}

var (
	numberCell = regexp.MustCompile(`^[0-9]{4}$`)
	linkCell   = regexp.MustCompile(`^\[[^\]]+\]\(([^()\s]+)\)$`)
	statusCell = regexp.MustCompile(`^(accepted|amended by [0-9]{4}(, [0-9]{4})*|superseded by [0-9]{4})$`)
	recordFile = regexp.MustCompile(`^([0-9]{4})-[^/]+\.md$`)
	number     = regexp.MustCompile(`[0-9]{4}`)
)

// Cells returns the cells of a markdown table row, each trimmed, or nil when line (less
// surrounding space) does not start with "|".
func Cells(line string) []string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "|") {
		return nil
	}
	cells := strings.Split(strings.Trim(line, "|"), "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// ParseIndex reads the index's lines. Its errors name the line and what is wrong with it: a
// second cell that is not one link to NNNN-title.md with the row's number, or a status outside
// the three forms.
func ParseIndex(r io.Reader) ([]Entry, error) {
	var entries []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		cells := Cells(sc.Text())
		if cells == nil {
			continue
		}
		if !numberCell.MatchString(cells[0]) {
			continue
		}
		if len(cells) < 3 {
			return nil, fmt.Errorf("doccheck: line %d: %d cells: an index line is | NNNN | [title](NNNN-title.md) | gist | status |", n, len(cells))
		}
		m := linkCell.FindStringSubmatch(cells[1])
		if m == nil {
			return nil, fmt.Errorf("doccheck: line %d: second cell %q is not one link [title](%s-title.md)", n, cells[1], cells[0])
		}
		if f := recordFile.FindStringSubmatch(m[1]); f == nil || f[1] != cells[0] {
			return nil, fmt.Errorf("doccheck: line %d: record %s links %q: link the file %s-title.md in this directory", n, cells[0], m[1], cells[0])
		}
		status := cells[len(cells)-1]
		if !statusCell.MatchString(status) {
			return nil, fmt.Errorf("doccheck: line %d: status %q: use accepted, amended by N[, N] or superseded by N", n, status)
		}
		entries = append(entries, Entry{Number: cells[0], File: m[1], Status: status,
			Later: number.FindAllString(status, -1), Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("doccheck: read: %w", err)
	}
	return entries, nil
}

// Check compares the index's entries with the names of the files in the records' directory
// (other files, such as README.md, are ignored) and returns one line per problem, each saying
// what to change in the index: a record without a line, a line whose file does not exist, a
// record given two lines, lines out of number order, a status naming a record that does not
// exist or is not later than the one it changes.
func Check(entries []Entry, files []string) []string {
	var problems []string
	records := map[string]bool{}
	for _, f := range files {
		if recordFile.MatchString(f) {
			records[f] = true
		}
	}
	numbers := map[string]bool{}
	for f := range records {
		numbers[f[:4]] = true
	}
	indexed := map[string]int{}
	for i, e := range entries {
		if first, dup := indexed[e.File]; dup {
			problems = append(problems, fmt.Sprintf("docs/decisions/README.md line %d: %s is indexed again (first at line %d): keep one line", e.Line, e.File, first))
			continue
		}
		indexed[e.File] = e.Line
		if !records[e.File] {
			problems = append(problems, fmt.Sprintf("docs/decisions/README.md line %d: %s does not exist: fix the link or remove the line", e.Line, e.File))
		}
		if i > 0 && e.Number < entries[i-1].Number {
			problems = append(problems, fmt.Sprintf("docs/decisions/README.md line %d: %s comes after %s: keep the lines in number order", e.Line, e.Number, entries[i-1].Number))
		}
		for _, later := range e.Later {
			switch {
			case !numbers[later]:
				problems = append(problems, fmt.Sprintf("docs/decisions/README.md line %d: %s's status names %s, which is no record", e.Line, e.Number, later))
			case later <= e.Number:
				problems = append(problems, fmt.Sprintf("docs/decisions/README.md line %d: %s's status names %s, which is not later", e.Line, e.Number, later))
			}
		}
	}
	for _, f := range files {
		if _, ok := indexed[f]; records[f] && !ok {
			problems = append(problems, fmt.Sprintf("docs/decisions/%s has no line in docs/decisions/README.md: add | %s | [title](%s) | gist | accepted |", f, f[:4], f))
		}
	}
	return problems
}
