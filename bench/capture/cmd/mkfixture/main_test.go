package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/loadaware/loadaware-epp/bench/capture"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestRun(t *testing.T) {
	root := t.TempDir()
	cell := filepath.Join(root, "cells", "x-kvaware")
	write(t, filepath.Join(cell, "run.json"), `{"arm": "kvaware", "beta": null, "rate_req_s": 16}`)
	write(t, filepath.Join(cell, "window.env"), "CELL_START=0\nCELL_END=10\n")
	write(t, filepath.Join(cell, "driver-seed1.csv"), "index,prefix_id,send_ts,ttft_s,e2e_s,prompt_tokens,completion_tokens,status,error,itls_ms\n"+
		"0,1,1,0.1,1,10,2,ok,,20;30\n1,2,6,0.2,1,10,2,ok,,20;90\n")
	series := `{"metric":{"job":"vllm-engines","instance":"%s"},"values":[[0,"1"],[5,"2"],[10,"3"]]}`
	matrix := `{"status":"success","data":{"resultType":"matrix","result":[` +
		strings.Replace(series, "%s", "a:1", 1) + "," + strings.Replace(series, "%s", "b:1", 1) + `]}}`
	for _, m := range capture.FixtureMetrics {
		write(t, filepath.Join(cell, "prom", m+".json"), matrix)
	}
	out := filepath.Join(root, "f.json.gz")
	if err := run(filepath.Join(root, "cells"), out, "test source"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := capture.ReadCompact(f)
	if err != nil {
		t.Fatal(err)
	}
	if c.Source != "test source" || len(c.Cells) != 1 || len(c.Cells[0].Seeds[0].Send) != 2 || c.Cells[0].Published != nil {
		t.Errorf("fixture = %+v", c)
	}
	if err := run(filepath.Join(root, "nope"), out, ""); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("missing input: %v", err)
	}
}
