package workload

import (
	"bytes"
	"embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// File is a workload defined as data: a name, where its parameters come from,
// the suite's published load ladder, the fleet it runs on, and the Config
// its workload keys set.
type File struct {
	Name   string // the profile's name (the "name" key)
	Source string // where its parameters were published (the "source" key)
	Notes  string // what differs from the source, and why (the "notes" key)
	// Ladder is the suite's published offered-load ladder, requests per
	// second in ascending order (the "ladder" key); nil when the file gives
	// none. A runner scales it to its fleet (see the knee report).
	Ladder []float64
	Fleet  Fleet
	Config Config
}

// Fleet is the fleet a workload file asks for; a zero field keeps the
// runner's default fleet's value.
type Fleet struct {
	Engines      int       // engines (the "engines" key), 1..MaxEngines
	Slowdowns    []float64 // each engine's step-time factor, engine 0 first (the "slowdowns" key; engines not listed keep the default's)
	KVPoolTokens int       // tokens of KV each engine's GPU pool holds (the "kv-pool-tokens" key)
}

// MaxEngines bounds a workload file's fleet, as the simulated fleets are
// bounded.
const MaxEngines = 250

// metaKeys are the keys of a workload file that are not workload flags:
// what the file is, its ladder and its fleet.
var metaKeys = map[string]bool{"name": true, "source": true, "notes": true, "ladder": true, "engines": true, "slowdowns": true, "kv-pool-tokens": true}

// ParseFile reads a workload file, JSON or YAML: an object whose keys are
// "name", "source", "notes", "ladder" (a list of requests per second, or
// one comma-separated string), the fleet keys "engines", "slowdowns" (a list
// of factors, or a comma-separated string) and "kv-pool-tokens", and the
// workload's flag names (as -h lists them, without the dash), each set as
// the flag would set it over base. A key that is none of these is an error
// naming it and the keys there are; so is a value that the key refuses, and
// the resulting Config must validate.
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
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if metaKeys[k] {
			if err := f.setMeta(k, m[k]); err != nil {
				return File{}, fmt.Errorf("workload file: key %q: %w", k, err)
			}
			continue
		}
		v, err := scalar(m[k])
		if err != nil {
			return File{}, fmt.Errorf("workload file: key %q: %w", k, err)
		}
		if fs.Lookup(k) == nil {
			return File{}, fmt.Errorf("workload file: unknown key %q: the keys are name, source, notes, ladder, engines, slowdowns, kv-pool-tokens and the workload flags: %s", k, flagNames(fs))
		}
		if err := fs.Set(k, v); err != nil {
			return File{}, fmt.Errorf("workload file: key %q: %w", k, err)
		}
	}
	if err := f.Config.Validate(); err != nil {
		return File{}, fmt.Errorf("workload file: %w", err)
	}
	if n := len(f.Fleet.Slowdowns); f.Fleet.Engines != 0 && n > f.Fleet.Engines {
		return File{}, fmt.Errorf("workload file: key \"slowdowns\": %d factors for %d engines: give at most one per engine", n, f.Fleet.Engines)
	}
	return f, nil
}

// setMeta sets the key k of the keys that are not workload flags.
func (f *File) setMeta(k string, raw any) error {
	var err error
	switch k {
	case "ladder":
		if f.Ladder, err = numberList(raw); err != nil {
			return err
		}
		return checkLadder(f.Ladder)
	case "slowdowns":
		if f.Fleet.Slowdowns, err = numberList(raw); err != nil {
			return err
		}
		for _, x := range f.Fleet.Slowdowns {
			if !(x > 0) || math.IsInf(x, 0) {
				return fmt.Errorf("factor %v: each engine's step-time factor must be positive and finite (1 = the calibrated engine)", x)
			}
		}
		return nil
	}
	v, err := scalar(raw)
	if err != nil {
		return err
	}
	switch k {
	case "name":
		f.Name = v
	case "source":
		f.Source = v
	case "notes":
		f.Notes = v
	case "engines":
		if f.Fleet.Engines, err = strconv.Atoi(v); err != nil || f.Fleet.Engines < 1 || f.Fleet.Engines > MaxEngines {
			return fmt.Errorf("%q: give a whole number of engines, 1..%d", v, MaxEngines)
		}
	case "kv-pool-tokens":
		if f.Fleet.KVPoolTokens, err = strconv.Atoi(v); err != nil || f.Fleet.KVPoolTokens < 1 {
			return fmt.Errorf("%q: give the tokens of KV each engine's GPU pool holds, a whole number of at least 1", v)
		}
	}
	return nil
}

// checkLadder refuses a ladder that is empty, not ascending, or has a point
// that is not a positive finite rate.
func checkLadder(l []float64) error {
	if len(l) == 0 {
		return fmt.Errorf("empty: give the published rates in requests per second, ascending, e.g. [3, 10, 15]")
	}
	for i, x := range l {
		if !(x > 0) || math.IsInf(x, 0) {
			return fmt.Errorf("rate %v: each point must be a positive finite rate in requests per second", x)
		}
		if i > 0 && x <= l[i-1] {
			return fmt.Errorf("rate %v after %v: the points must ascend", x, l[i-1])
		}
	}
	return nil
}

// numberList reads a list of numbers, given as a list or as one
// comma-separated string.
func numberList(raw any) ([]float64, error) {
	var items []any
	switch x := raw.(type) {
	case []any:
		items = x
	case string:
		for _, p := range strings.Split(x, ",") {
			items = append(items, strings.TrimSpace(p))
		}
	default:
		s, err := scalar(raw)
		if err != nil {
			return nil, err
		}
		items = []any{s}
	}
	out := make([]float64, 0, len(items))
	for _, it := range items {
		s, err := scalar(it)
		if err != nil {
			return nil, fmt.Errorf("a list of numbers: %w", err)
		}
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number: give a list of numbers, e.g. [1, 1.3]", s)
		}
		out = append(out, x)
	}
	return out, nil
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
