package flagdoc

import (
	"flag"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"
)

const sample = "# Flags\n" +
	"\n" +
	"Free prose, and a heading that is not a command:\n" +
	"\n" +
	"## How to read this page\n" +
	"\n" +
	"## `tool serve`\n" +
	"\n" +
	"| flag | default | meaning |\n" +
	"|---|---|---|\n" +
	"| `--port` | 9002 | the port |\n" +
	"| `-v` | | verbose; a pipe in code: `a\\|b` is not split here |\n" +
	"\n" +
	"### `tool version`: print the version\n" +
	"\n" +
	"No flags.\n"

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Section
		wantErr string
	}{
		{name: "sections and rows in order, dashes stripped, defaults as written",
			in: "## `tool serve`\n| flag | default | meaning |\n|---|---|---|\n| `--port` | 9002 | the port |\n| `-v` | | verbose |\n### `tool version` prints it\nNo flags.\n",
			want: []Section{
				{Command: "tool serve", Line: 1, Flags: []Flag{
					{Name: "port", Default: "9002", Meaning: "the port", Line: 4},
					{Name: "v", Default: "", Meaning: "verbose", Line: 5}}},
				{Command: "tool version", Line: 6}}},
		{name: "an escaped pipe stays in its cell",
			in:   "## `tool run`\n| `--format` | v0.3 | `v0.3\\|v0.4` |\n",
			want: []Section{{Command: "tool run", Line: 1, Flags: []Flag{{Name: "format", Default: "v0.3", Meaning: "`v0.3\\|v0.4`", Line: 2}}}}},
		{name: "headings without a backticked command are prose",
			in:   "# Flags\n## How to read\n## `single`\n## `tool run`\n| `--x` | 1 | x |\n",
			want: []Section{{Command: "tool run", Line: 4, Flags: []Flag{{Name: "x", Default: "1", Meaning: "x", Line: 5}}}}},
		{name: "a row before any section is refused",
			in: "| `--x` | 1 | x |\n", wantErr: "line 1: a flag row before any section"},
		{name: "a first cell that is not a backticked flag is refused",
			in: "## `tool run`\n| --x | 1 | x |\n", wantErr: "line 2: first cell \"--x\""},
		{name: "two flags in one row are refused",
			in: "## `tool run`\n| `--x`, `--y` | 1 | x |\n", wantErr: "line 2: first cell"},
		{name: "a row with the wrong number of cells is refused",
			in: "## `tool run`\n| `--x` | x |\n", wantErr: "line 2: 2 cells"},
		{name: "an empty meaning is refused",
			in: "## `tool run`\n| `--x` | 1 | |\n", wantErr: "line 2: -x has no meaning"},
		{name: "a flag twice in a section is refused",
			in: "## `tool run`\n| `--x` | 1 | x |\n| `-x` | 2 | y |\n", wantErr: "line 3: -x again in `tool run` (first at line 2)"},
		{name: "the same flag in two sections is fine",
			in: "## `tool a`\n| `--x` | 1 | x |\n## `tool b`\n| `--x` | 1 | x |\n",
			want: []Section{
				{Command: "tool a", Line: 1, Flags: []Flag{{Name: "x", Default: "1", Meaning: "x", Line: 2}}},
				{Command: "tool b", Line: 3, Flags: []Flag{{Name: "x", Default: "1", Meaning: "x", Line: 4}}}}},
		{name: "a section twice is refused",
			in: "## `tool a`\n## `tool  a`\n", wantErr: "line 2: section `tool a` again (first at line 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := Parse(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(doc.Sections, tt.want) {
				t.Errorf("Parse = %+v\nwant %+v", doc.Sections, tt.want)
			}
		})
	}
}

// TestPrintedReadsWhatTheFlagPackageWrites builds a flag set with every kind of flag the
// binaries use and reads back its PrintDefaults text.
func TestPrintedReadsWhatTheFlagPackageWrites(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Int("grpc-port", 9002, "ext_proc port\nsecond line of usage\n  -not-a-flag in the usage")
	fs.Bool("v", false, "short bool")
	fs.Bool("progress", true, "long bool")
	fs.String("tokenizer", "", "a `PATH`")
	fs.Duration("timeout", time.Second, "a duration")
	fs.Float64("beta", 1, "a float")
	fs.Func("zap-encoder", "a func", func(string) error { return nil })
	var b strings.Builder
	fs.SetOutput(&b)
	io.WriteString(&b, "Usage: x [flags]\n")
	fs.PrintDefaults()
	got := Printed(b.String())
	var want []string
	fs.VisitAll(func(f *flag.Flag) { want = append(want, f.Name) })
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Printed = %v, want %v\nfrom:\n%s", got, want, b.String())
	}
}

func TestCommands(t *testing.T) {
	tests := []struct {
		name string
		help string
		want []string
	}{
		{name: "a block with continuation lines, ended by a blank line",
			help: "tool: does things.\n\nCommands:\n  serve    run it\n           tool serve --x\n  keys  print keys\n  version  the version\n\nRun \"tool serve -h\".\n  ignored  after the block\n",
			want: []string{"serve", "keys", "version"}},
		{name: "lower-case heading, block to the end",
			help: "usage: tool <command>\n\ncommands:\n  a   first\n  b-c second",
			want: []string{"a", "b-c"}},
		{name: "no block",
			help: "usage: tool\n  a  b\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Commands(tt.help); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Commands = %q, want %q", got, tt.want)
			}
		})
	}
}

// fakeTool answers help and -h from maps, as a binary's run function would.
func fakeTool(cmds string, flags map[string]string) Runner {
	return func(args ...string) string {
		if len(args) == 1 && args[0] == "help" {
			return "Commands:\n" + cmds + "\n"
		}
		return flags[args[0]]
	}
}

func TestCompare(t *testing.T) {
	tool := fakeTool("  serve  run\n  version  print it\n", map[string]string{
		"serve":   "Usage: tool serve\n  -port int\n    \tport (default 1)\n  -v\tverbose\n",
		"version": "tool dev\n",
	})
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{name: "in step",
			doc: "## `tool serve`\n| `--port` | 1 | p |\n| `-v` | false | v |\n## `tool version`\nNo flags.\n## `other thing`\n| `--z` | | z |\n"},
		{name: "a printed flag undocumented, a documented flag not printed",
			doc: "## `tool serve`\n| `--port` | 1 | p |\n| `--gone` | 2 | g |\n## `tool version`\n",
			want: []string{
				"`tool serve`: -v is printed by -h but not documented: add a row to its section (docs/flags.md line 1)",
				"`tool serve`: -gone is documented (docs/flags.md line 3) but -h does not print it: remove the row"}},
		{name: "a command without a section, a section without a command",
			doc: "## `tool version`\n## `tool demo-simple`\n| `--x` | | x |\n",
			want: []string{
				"`tool serve` has no section in docs/flags.md: add ## `tool serve` with a row for each of its flags (-h prints -port, -v)",
				"`tool demo-simple` is documented (docs/flags.md line 2) but `tool help` does not list it: remove the section"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := Parse(strings.NewReader(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			got, err := Compare("tool", tool, doc)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Compare =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestCompareNeedsACommandList(t *testing.T) {
	_, err := Compare("tool", func(...string) string { return "usage: tool\n" }, Doc{})
	if err == nil || !strings.Contains(err.Error(), "`tool help` lists no commands") {
		t.Fatalf("Compare error %v, want one saying help lists no commands", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(sample)
	f.Add("## `a b`\n| `--x` | | y |\n| `--x` | | y |\n")
	f.Add("| `-` | | |\n## `a`\n|||\n")
	f.Fuzz(func(t *testing.T, in string) {
		doc, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		commands := map[string]bool{}
		for _, s := range doc.Sections {
			if commands[s.Command] || len(strings.Fields(s.Command)) < 2 {
				t.Fatalf("section %q repeated or not a command", s.Command)
			}
			commands[s.Command] = true
			names := map[string]bool{}
			for _, fl := range s.Flags {
				if names[fl.Name] || !validName(fl.Name) || fl.Meaning == "" || fl.Line <= s.Line {
					t.Fatalf("bad flag %+v in %q", fl, s.Command)
				}
				names[fl.Name] = true
			}
		}
	})
}

func FuzzPrinted(f *testing.F) {
	f.Add("Usage:\n  -a int\n    \tA\n  -v\tV\n")
	f.Add("Commands:\n  serve  x\n     more\n\n")
	f.Fuzz(func(t *testing.T, in string) {
		for _, name := range Printed(in) {
			if !validName(name) || !strings.Contains(in, "  -"+name) {
				t.Fatalf("Printed gave %q, not a flag line of the input", name)
			}
		}
		for _, name := range Commands(in) {
			if name == "" || strings.ContainsAny(name, " \t\n") || !strings.Contains(in, "  "+name) {
				t.Fatalf("Commands gave %q, not a command line of the input", name)
			}
		}
	})
}
