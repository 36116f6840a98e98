// Command mkfixture derives the compact fixture bench/capture embeds from a
// full measurement directory in the published layout:
//
//	go run ./bench/capture/cmd/mkfixture -in /path/to/published-gen2 -out bench/capture/gen2.json.gz
//
// -source sets the provenance line stored in the fixture.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"

	"github.com/loadaware/loadaware-epp/bench/capture"
)

const gen2Source = "gen2 sweep of the published loadaware experiment: its public repository, " +
	"results/gen2-confirmatory/ (cells 20260805-230541-kvaware, 20260805-232541-loadaware-b0.5, " +
	"20260805-234559-loadaware-b1.0, 20260806-000626-loadaware-b2.0, 20260806-002645-loadaware-b0, " +
	"20260806-144135-roundrobin; files run.json, window.env, driver-seed1..20.csv, prom/*.json engine series, " +
	"summary-per-seed.csv). Derived by bench/capture/cmd/mkfixture: request rows reduced to prefix_id, send_ts, " +
	"ttft_s, e2e_s, status (times rounded to 1 us); seed metrics and facts computed from the full rows and series."

func main() {
	in := flag.String("in", "", "measurement directory (cell directories, or one cell)")
	out := flag.String("out", "", "fixture file to write (gzip JSON)")
	source := flag.String("source", gen2Source, "provenance line stored in the fixture")
	flag.Parse()
	if *in == "" || *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: mkfixture -in DIR -out FILE [-source TEXT]")
		os.Exit(2)
	}
	if err := run(*in, *out, *source); err != nil {
		fmt.Fprintln(os.Stderr, "mkfixture:", err)
		os.Exit(1)
	}
}

func run(in, out, source string) error {
	c, err := capture.BuildCompact(in)
	if err != nil {
		return err
	}
	c.Source = source
	var buf bytes.Buffer
	if err := capture.WriteCompact(&buf, c); err != nil {
		return err
	}
	if err := os.WriteFile(out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	seeds := 0
	for _, cc := range c.Cells {
		seeds += len(cc.Seeds)
	}
	fmt.Printf("%s: %d cells, %d seeds, %d bytes\n", out, len(c.Cells), seeds, buf.Len())
	return nil
}
