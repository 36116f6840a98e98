package doccheck

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestDecisionIndexMatchesRecords holds docs/decisions/README.md to the records beside it.
func TestDecisionIndexMatchesRecords(t *testing.T) {
	const dir = "../../docs/decisions"
	f, err := os.Open(dir + "/README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	entries, err := ParseIndex(f)
	if err != nil {
		t.Fatal(err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, de := range des {
		files = append(files, de.Name())
	}
	if len(entries) == 0 {
		t.Fatal("the index has no lines")
	}
	for _, p := range Check(entries, files) {
		t.Error(p)
	}
}

func TestParseIndex(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Entry
		wantErr string
	}{
		{name: "header, rule and prose are skipped; numbers, files and statuses read",
			in: "# Decisions\n\nSome prose | with a pipe.\n\n| # | decision | gist | status |\n|---|---|---|---|\n" +
				"| 0002 | [The conversation](0002-extproc.md) | one state | amended by 0700, 1122 |\n" +
				"| 0520 | [Fidelity](0520-fidelity.md) | refit | superseded by 0540 |\n" +
				"| 0540 | [Recalibration](0540-recal.md) | mechanisms | accepted |\n",
			want: []Entry{
				{Number: "0002", File: "0002-extproc.md", Status: "amended by 0700, 1122", Later: []string{"0700", "1122"}, Line: 7},
				{Number: "0520", File: "0520-fidelity.md", Status: "superseded by 0540", Later: []string{"0540"}, Line: 8},
				{Number: "0540", File: "0540-recal.md", Status: "accepted", Line: 9}}},
		{name: "a second cell that is not a link is refused",
			in: "| 0001 | Layout | gist | accepted |\n", wantErr: "line 1: second cell \"Layout\""},
		{name: "a link to another record's file is refused",
			in: "| 0001 | [Layout](0002-x.md) | gist | accepted |\n", wantErr: "record 0001 links \"0002-x.md\""},
		{name: "a link outside the directory is refused",
			in: "| 0001 | [Layout](../0001-x.md) | gist | accepted |\n", wantErr: "record 0001 links"},
		{name: "an unknown status is refused",
			in: "| 0001 | [Layout](0001-x.md) | gist | changed by 0002 |\n", wantErr: "status \"changed by 0002\""},
		{name: "too few cells are refused",
			in: "| 0001 | [Layout](0001-x.md) |\n", wantErr: "line 1: 2 cells"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseIndex(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseIndex error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseIndex = %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	entry := func(n, file, status string, line int, later ...string) Entry {
		return Entry{Number: n, File: file, Status: status, Later: later, Line: line}
	}
	files := []string{"0001-a.md", "0002-b.md", "README.md", "notes.txt"}
	tests := []struct {
		name    string
		entries []Entry
		want    []string
	}{
		{name: "every record indexed once, in order, statuses naming later records",
			entries: []Entry{entry("0001", "0001-a.md", "amended by 0002", 3, "0002"), entry("0002", "0002-b.md", "accepted", 4)}},
		{name: "a record without a line",
			entries: []Entry{entry("0001", "0001-a.md", "accepted", 3)},
			want:    []string{"docs/decisions/0002-b.md has no line in docs/decisions/README.md: add | 0002 | [title](0002-b.md) | gist | accepted |"}},
		{name: "a line without a record, and out of order",
			entries: []Entry{entry("0002", "0002-b.md", "accepted", 3), entry("0001", "0001-a.md", "accepted", 4), entry("0003", "0003-c.md", "accepted", 5)},
			want: []string{
				"docs/decisions/README.md line 4: 0001 comes after 0002: keep the lines in number order",
				"docs/decisions/README.md line 5: 0003-c.md does not exist: fix the link or remove the line"}},
		{name: "a record indexed twice",
			entries: []Entry{entry("0001", "0001-a.md", "accepted", 3), entry("0001", "0001-a.md", "accepted", 4), entry("0002", "0002-b.md", "accepted", 5)},
			want:    []string{"docs/decisions/README.md line 4: 0001-a.md is indexed again (first at line 3): keep one line"}},
		{name: "a status naming no record, or an earlier one",
			entries: []Entry{entry("0001", "0001-a.md", "superseded by 0009", 3, "0009"), entry("0002", "0002-b.md", "amended by 0001", 4, "0001")},
			want: []string{
				"docs/decisions/README.md line 3: 0001's status names 0009, which is no record",
				"docs/decisions/README.md line 4: 0002's status names 0001, which is not later"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Check(tt.entries, files); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Check =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func FuzzParseIndex(f *testing.F) {
	f.Add("| # | decision | gist | status |\n|---|---|---|---|\n| 0002 | [T](0002-x.md) | g | amended by 0700, 1122 |\n")
	f.Add("| 0001 | [a](0001-.md) | superseded by 0002 |\n| 12 | x |\n")
	f.Fuzz(func(t *testing.T, in string) {
		entries, err := ParseIndex(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, e := range entries {
			if !strings.HasPrefix(e.File, e.Number+"-") || !statusCell.MatchString(e.Status) || e.Line < 1 {
				t.Fatalf("bad entry %+v", e)
			}
			for _, n := range e.Later {
				if !strings.Contains(e.Status, n) {
					t.Fatalf("entry %+v names %s outside its status", e, n)
				}
			}
		}
		Check(entries, []string{"0001-a.md", "README.md"})
	})
}
