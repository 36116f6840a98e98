// Package flagdoc keeps the flag reference (docs/flags.md) in step with the binaries: it reads
// the reference, reads the flag lists Go's flag package prints for -h, and names every
// difference between the two. It is used by the binaries' tests only; it does no I/O of its
// own beyond the reader and the runner it is given.
//
// The reference is markdown with one section per command and one table row per flag:
//
//	## `loadaware-epp serve`
//
//	| flag | default | meaning |
//	|---|---|---|
//	| `--grpc-port` | 9002 | ext_proc gRPC port |
//
// A section starts at a heading (any level) whose text begins with the command in backticks:
// the binary's name, then the subcommand. A row belongs to the section above it; its first
// cell is one flag in backticks, written with one dash or two; its last cell, the meaning,
// must not be empty. The default cell is prose (`16 MiB`, `env PYTHONHASHSEED, else 123`) and
// is not compared with what -h prints. A command without flags has a section without rows.
// Headings that do not begin with a backticked command, and text outside tables, are free prose.
package flagdoc

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Flag is one documented flag.
type Flag struct {
	Name    string // without dashes
	Default string // the default cell as written
	Meaning string // the meaning cell as written
	Line    int    // 1-based line of its row
}

// Section is one command's documented flags, in the order of the reference.
type Section struct {
	Command string // "loadaware-epp serve"
	Line    int    // 1-based line of its heading
	Flags   []Flag
}

// Doc is a parsed reference, sections in order.
type Doc struct {
	Sections []Section
}

// Section returns the section of command, or false.
func (d Doc) Section(command string) (Section, bool) {
	for _, s := range d.Sections {
		if s.Command == command {
			return s, true
		}
	}
	return Section{}, false
}

// Parse reads a reference in the format of the package comment. Its errors name the line and
// what is wrong: a row before any section, a first cell that is not one backticked flag, an
// empty meaning, a flag or a section given twice.
func Parse(r io.Reader) (Doc, error) {
	var doc Doc
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			cmd, ok := headingCommand(line)
			if !ok {
				continue
			}
			if first, dup := seen[cmd]; dup {
				return Doc{}, fmt.Errorf("flagdoc: line %d: section `%s` again (first at line %d): merge the two", n, cmd, first)
			}
			seen[cmd] = n
			doc.Sections = append(doc.Sections, Section{Command: cmd, Line: n})
			continue
		}
		if !strings.HasPrefix(line, "|") {
			continue
		}
		cells := splitRow(line)
		if isHeaderOrRule(cells) {
			continue
		}
		if len(doc.Sections) == 0 {
			return Doc{}, fmt.Errorf("flagdoc: line %d: a flag row before any section: start with a heading such as ## `loadaware-epp serve`", n)
		}
		f, err := parseRow(cells, n)
		if err != nil {
			return Doc{}, err
		}
		s := &doc.Sections[len(doc.Sections)-1]
		for _, g := range s.Flags {
			if g.Name == f.Name {
				return Doc{}, fmt.Errorf("flagdoc: line %d: -%s again in `%s` (first at line %d): keep one row", n, f.Name, s.Command, g.Line)
			}
		}
		s.Flags = append(s.Flags, f)
	}
	if err := sc.Err(); err != nil {
		return Doc{}, fmt.Errorf("flagdoc: read: %w", err)
	}
	return doc, nil
}

// headingCommand returns the backticked command that starts a heading's text.
func headingCommand(line string) (string, bool) {
	text := strings.TrimSpace(strings.TrimLeft(line, "#"))
	if !strings.HasPrefix(text, "`") {
		return "", false
	}
	end := strings.IndexByte(text[1:], '`')
	if end < 0 {
		return "", false
	}
	cmd := strings.Join(strings.Fields(text[1:1+end]), " ")
	if len(strings.Fields(cmd)) < 2 {
		return "", false
	}
	return cmd, true
}

// splitRow returns a table row's cells, trimmed, without the outer pipes. A pipe written
// `\|`, as GitHub's tables want it inside a cell, is part of the cell.
func splitRow(line string) []string {
	line = strings.TrimPrefix(line, "|")
	if !strings.HasSuffix(line, `\|`) {
		line = strings.TrimSuffix(line, "|")
	}
	var cells []string
	var cell strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteString(`\|`)
			i++
		case line[i] == '|':
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(line[i])
		}
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

// isHeaderOrRule reports whether a row is a table's header (`| flag | ...`) or its rule (`|---|`).
func isHeaderOrRule(cells []string) bool {
	if strings.EqualFold(cells[0], "flag") {
		return true
	}
	for _, c := range cells {
		if strings.Trim(c, "-: ") != "" {
			return false
		}
	}
	return true
}

func parseRow(cells []string, n int) (Flag, error) {
	if len(cells) != 3 {
		return Flag{}, fmt.Errorf("flagdoc: line %d: %d cells: a flag row has three (| `--flag` | default | meaning |)", n, len(cells))
	}
	name, ok := flagName(cells[0])
	if !ok {
		return Flag{}, fmt.Errorf("flagdoc: line %d: first cell %q is not one flag in backticks such as `--grpc-port`", n, cells[0])
	}
	if cells[2] == "" {
		return Flag{}, fmt.Errorf("flagdoc: line %d: -%s has no meaning: say what it does", n, name)
	}
	return Flag{Name: name, Default: cells[1], Meaning: cells[2], Line: n}, nil
}

// flagName reads "`--name`" or "`-name`".
func flagName(cell string) (string, bool) {
	if len(cell) < 4 || cell[0] != '`' || cell[len(cell)-1] != '`' {
		return "", false
	}
	inner := cell[1 : len(cell)-1]
	name := strings.TrimPrefix(strings.TrimPrefix(inner, "-"), "-")
	if len(name) == len(inner) || !validName(name) {
		return "", false
	}
	return name, true
}

// validName accepts what the flag package's users here name flags: letters, digits, '-', '_', '.'.
func validName(s string) bool {
	if s == "" || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// Printed returns the flag names, without dashes, in the text flag.PrintDefaults writes: each
// flag opens a line with two spaces and a dash ("  -grpc-port int"); its usage follows on
// lines indented further. Other lines (a usage line, a command list) are ignored.
func Printed(help string) []string {
	var names []string
	for _, line := range strings.Split(help, "\n") {
		rest, ok := strings.CutPrefix(line, "  -")
		if !ok {
			continue
		}
		if i := strings.IndexAny(rest, " \t"); i >= 0 {
			rest = rest[:i]
		}
		if validName(rest) {
			names = append(names, rest)
		}
	}
	return names
}

// Commands returns the command names listed in a binary's help text: the first word of each
// line indented by exactly two spaces after a line reading "Commands:" (any case), up to the
// next blank line. Lines indented further continue the line above.
func Commands(help string) []string {
	var names []string
	in := false
	for _, line := range strings.Split(help, "\n") {
		if !in {
			in = strings.EqualFold(strings.TrimSpace(line), "commands:")
			continue
		}
		if strings.TrimSpace(line) == "" {
			break
		}
		rest, ok := strings.CutPrefix(line, "  ")
		if r, _ := utf8.DecodeRuneInString(rest); !ok || rest == "" || unicode.IsSpace(r) {
			continue // a continuation line (any white space, \v included, starts it)
		}
		names = append(names, strings.Fields(rest)[0])
	}
	return names
}

// Runner runs a binary in process with args and returns all it printed (stdout, then stderr).
type Runner func(args ...string) string

// Compare checks the reference against binary: it runs `help`, then `CMD -h` for every
// command the help lists, and returns one line per difference, each naming the command, the
// flag and what to change in docs/flags.md. It fails only when the help lists no command.
func Compare(binary string, run Runner, doc Doc) ([]string, error) {
	cmds := Commands(run("help"))
	if len(cmds) == 0 {
		return nil, fmt.Errorf("flagdoc: `%s help` lists no commands (no \"Commands:\" block): cannot enumerate its flags", binary)
	}
	var problems []string
	listed := map[string]bool{}
	for _, c := range cmds {
		command := binary + " " + c
		listed[command] = true
		printed := Printed(run(c, "-h"))
		sec, ok := doc.Section(command)
		if !ok {
			problems = append(problems, fmt.Sprintf("`%s` has no section in docs/flags.md: add ## `%s` with a row for each of its flags (-h prints %s)",
				command, command, dashed(printed)))
			continue
		}
		documented := map[string]bool{}
		for _, f := range sec.Flags {
			documented[f.Name] = true
		}
		shown := map[string]bool{}
		for _, name := range printed {
			shown[name] = true
			if !documented[name] {
				problems = append(problems, fmt.Sprintf("`%s`: -%s is printed by -h but not documented: add a row to its section (docs/flags.md line %d)", command, name, sec.Line))
			}
		}
		for _, f := range sec.Flags {
			if !shown[f.Name] {
				problems = append(problems, fmt.Sprintf("`%s`: -%s is documented (docs/flags.md line %d) but -h does not print it: remove the row", command, f.Name, f.Line))
			}
		}
	}
	for _, s := range doc.Sections {
		if strings.HasPrefix(s.Command, binary+" ") && !listed[s.Command] {
			problems = append(problems, fmt.Sprintf("`%s` is documented (docs/flags.md line %d) but `%s help` does not list it: remove the section", s.Command, s.Line, binary))
		}
	}
	return problems, nil
}

// dashed lists names as "-a, -b", sorted, or "no flags".
func dashed(names []string) string {
	if len(names) == 0 {
		return "no flags"
	}
	s := append([]string(nil), names...)
	sort.Strings(s)
	return "-" + strings.Join(s, ", -")
}

// CheckFile reads the reference at path and compares it with binary (see Compare): the
// one call each binary's flags test makes.
func CheckFile(path, binary string, run Runner) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("flagdoc: %w", err)
	}
	defer f.Close()
	doc, err := Parse(f)
	if err != nil {
		return nil, err
	}
	return Compare(binary, run, doc)
}
