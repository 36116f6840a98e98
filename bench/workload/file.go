package workload

import (
	"bytes"
	"embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// File is a workload defined as data: a name, where its parameters come from,
// and the Config they set.
type File struct {
	Name   string // the profile's name (the "name" key)
	Source string // where its parameters were published (the "source" key)
	Notes  string // what differs from the source, and why (the "notes" key)
	Config Config
}

// metaKeys are the keys of a workload file that are not workload flags.
var metaKeys = map[string]bool{"name": true, "source": true, "notes": true}

// ParseFile reads a workload file, JSON or YAML: an object whose keys are
// "name", "source", "notes" and the workload's flag names (as -h lists them,
// without the dash), each set as the flag would set it over base. A key that
// is neither is an error naming it and the keys there are; so is a value that
// the flag refuses, and the resulting Config must validate.
func ParseFile(r io.Reader, base Config) (File, error) {
	raw, err := io.ReadAll(io.LimitReader(r, 1<<20+1))
	if err != nil {
		return File{}, fmt.Errorf("workload file: %w", err)
	}
	if len(raw) > 1<<20 {
		return File{}, fmt.Errorf("workload file: larger than 1 MiB: a workload file holds parameters, not prompts")
	}
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return File{}, fmt.Errorf("workload file: not JSON or YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return File{}, fmt.Errorf("workload file: want an object of keys (name, source, notes and workload flags such as rate, requests, prefix-tokens)")
	}
	f := File{Config: base}
	fs := flag.NewFlagSet("workload", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Config.RegisterFlags(fs)
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, err := scalar(m[k])
		if err != nil {
			return File{}, fmt.Errorf("workload file: key %q: %w", k, err)
		}
		if metaKeys[k] {
			switch k {
			case "name":
				f.Name = v
			case "source":
				f.Source = v
			case "notes":
				f.Notes = v
			}
			continue
		}
		if fs.Lookup(k) == nil {
			return File{}, fmt.Errorf("workload file: unknown key %q: the keys are name, source, notes and the workload flags: %s", k, flagNames(fs))
		}
		if err := fs.Set(k, v); err != nil {
			return File{}, fmt.Errorf("workload file: key %q: %w", k, err)
		}
	}
	if err := f.Config.Validate(); err != nil {
		return File{}, fmt.Errorf("workload file: %w", err)
	}
	return f, nil
}

// LoadFile reads the workload file at path (see ParseFile); a file without a
// name is named after the file.
func LoadFile(path string, base Config) (File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return File{}, fmt.Errorf("workload file: %w", err)
	}
	defer fh.Close()
	f, err := ParseFile(fh, base)
	if err != nil {
		return File{}, fmt.Errorf("%s: %w", path, err)
	}
	if f.Name == "" {
		f.Name = strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(baseName(path), ".yaml"), ".yml"), ".json")
	}
	return f, nil
}

func baseName(path string) string {
	if i := strings.LastIndexAny(path, `/\`); i >= 0 {
		return path[i+1:]
	}
	return path
}

// scalar spells a decoded JSON value as a flag would read it.
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case json.Number:
		return x.String(), nil
	case bool:
		if x {
			return "true", nil
		}
		return "false", nil
	case nil:
		return "", fmt.Errorf("null: give a value or leave the key out")
	}
	return "", fmt.Errorf("a list or an object: give one value (a number, a string such as 20s, or true/false)")
}

func flagNames(fs *flag.FlagSet) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return strings.Join(names, ", ")
}

// The public suites' profiles, shipped as workload files.
//
//go:embed profiles/*.yaml
var shipped embed.FS

// ShippedProfiles lists the names of the workload files the project ships
// (the public suites), sorted.
func ShippedProfiles() []string {
	ents, _ := shipped.ReadDir("profiles")
	var out []string
	for _, e := range ents {
		out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	return out
}

// Resolve finds a workload by what a user typed: "published" (DefaultConfig),
// the name of a shipped profile, or the path of a workload file.
func Resolve(nameOrPath string) (File, error) {
	if nameOrPath == "published" {
		return File{Name: "published", Source: "the published experiment (docs: mission)", Config: DefaultConfig()}, nil
	}
	if b, err := shipped.ReadFile("profiles/" + nameOrPath + ".yaml"); err == nil {
		return ParseFile(bytes.NewReader(b), DefaultConfig())
	}
	if _, err := os.Stat(nameOrPath); err != nil {
		return File{}, fmt.Errorf("workload %q: not published, not a shipped profile (%s) and not a readable file: %w", nameOrPath, strings.Join(ShippedProfiles(), ", "), err)
	}
	return LoadFile(nameOrPath, DefaultConfig())
}
