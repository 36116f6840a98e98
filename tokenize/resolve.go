package tokenize

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Source says where the tokenizer comes from: a local Path, or the engine's /tokenize.
type Source struct {
	Path       string // tokenizer.json file or model directory; "" when FromEngine
	FromEngine bool
}

// ResolveOptions are the inputs of Resolve, usually flags and the environment.
type ResolveOptions struct {
	Tokenizer  string              // --tokenizer PATH: a tokenizer.json or a model directory
	Model      string              // --model ORG/NAME, looked up in the HuggingFace cache
	FromEngine bool                // --tokenizer-from-engine
	Getenv     func(string) string // nil: os.Getenv
}

// Resolve picks the tokenizer: --tokenizer when given (it must exist), else the HuggingFace cache
// entry of --model ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub;
// models--ORG--NAME/snapshots/*, preferring the snapshot refs/main names), else the engine when
// --tokenizer-from-engine is set. Anything else is an error that says what to pass.
func Resolve(o ResolveOptions) (Source, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if o.Tokenizer != "" {
		if _, err := tokenizerFile(o.Tokenizer); err != nil {
			return Source{}, fmt.Errorf("--tokenizer %s: %w", o.Tokenizer, err)
		}
		return Source{Path: o.Tokenizer}, nil
	}
	if o.Model != "" {
		dir, err := hfCacheSnapshot(o.Model, getenv)
		if err == nil {
			return Source{Path: dir}, nil
		}
		if o.FromEngine {
			return Source{FromEngine: true}, nil
		}
		return Source{}, fmt.Errorf("no tokenizer for model %s (%v): pass --tokenizer PATH, download the model into the HuggingFace cache, or pass --tokenizer-from-engine", o.Model, err)
	}
	if o.FromEngine {
		return Source{FromEngine: true}, nil
	}
	return Source{}, errors.New("no tokenizer configured: pass --tokenizer PATH, --model ORG/NAME (HuggingFace cache) or --tokenizer-from-engine")
}

// tokenizerFile returns the tokenizer.json path for a file or model directory, checking it exists.
func tokenizerFile(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if st.IsDir() {
		p = filepath.Join(p, "tokenizer.json")
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("the directory has no tokenizer.json")
		}
	}
	return p, nil
}

func hfCacheSnapshot(model string, getenv func(string) string) (string, error) {
	org, name, ok := strings.Cut(model, "/")
	if !ok || org == "" || name == "" || strings.Contains(name, "/") {
		return "", fmt.Errorf("model %q is not ORG/NAME", model)
	}
	hub := getenv("HF_HUB_CACHE")
	if hub == "" {
		if home := getenv("HF_HOME"); home != "" {
			hub = filepath.Join(home, "hub")
		} else if h := getenv("HOME"); h != "" {
			hub = filepath.Join(h, ".cache", "huggingface", "hub")
		} else {
			return "", errors.New("neither HF_HUB_CACHE, HF_HOME nor HOME is set")
		}
	}
	repo := filepath.Join(hub, "models--"+org+"--"+name)
	if ref, err := os.ReadFile(filepath.Join(repo, "refs", "main")); err == nil {
		dir := filepath.Join(repo, "snapshots", strings.TrimSpace(string(ref)))
		if _, err := tokenizerFile(dir); err == nil {
			return dir, nil
		}
	}
	snaps, _ := filepath.Glob(filepath.Join(repo, "snapshots", "*"))
	type snap struct {
		dir string
		mod int64
	}
	var found []snap
	for _, d := range snaps {
		if p, err := tokenizerFile(d); err == nil {
			if st, err := os.Stat(p); err == nil {
				found = append(found, snap{d, st.ModTime().UnixNano()})
			}
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("no snapshot with a tokenizer.json under %s", repo)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].mod > found[j].mod })
	return found[0].dir, nil
}
