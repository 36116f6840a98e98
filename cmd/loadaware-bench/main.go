// Command loadaware-bench runs the project's benchmarks and its demo.
//
//	loadaware-bench demo [flags]         a short live run (kvaware, then loadaware) through the gateway, ext_proc and ZeroMQ
//	loadaware-bench demo-simple [flags]  simple engines + the real picker + the gateway, two policies compared
//	loadaware-bench sweep [flags]        arms x seeds in virtual time: REPORT.md, figures, CSVs, saved results
//	loadaware-bench live [flags]         arms x seeds live, with the same outputs
//	loadaware-bench compare [flags] CANDIDATE BASELINE   paired Wilcoxon of two arms' saved results
//	loadaware-bench report DIR           regenerate a results directory's report from its saved results
//	loadaware-bench calibrate [flags]    grid search of the simulator's free constants
//	loadaware-bench gwload [flags]       the highest rate the gateway + picker sustain with small added latency
//	loadaware-bench tournament [flags]   every arm on every workload profile behind Envoy, paired by seed: report, JSON, figure
//	loadaware-bench extload [flags]      open-loop ext_proc load on the picker and two floor servers: latency and CPU ratios
//
// Each subcommand lives in its own file and registers itself in init with register, so new
// subcommands need no change here. Run `loadaware-bench help` for the list.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand: run gets the arguments after its name and returns the exit code.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

// renamed maps a typed command name to the registered command that serves it: `demo` is the
// live demo (livedemo.go); the simple-engine demo, registered as "demo" (demo.go), stays
// reachable as demo-simple.
var renamed = map[string]string{"demo": liveDemoName, "demo-simple": "demo"}

// typedName is the name a user types for the registered command n.
func typedName(n string) string {
	for typed, reg := range renamed {
		if reg == n {
			return typed
		}
	}
	return n
}

// register adds a subcommand; it is called from init functions.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("loadaware-bench: subcommand registered twice: " + c.name)
	}
	commands[c.name] = c
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return 2
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage())
		return 0
	}
	reg := name
	if r, ok := renamed[name]; ok {
		reg = r
	} else if typedName(name) != name {
		reg = "" // a registered name that is typed differently
	}
	c, ok := commands[reg]
	if !ok {
		fmt.Fprintf(stderr, "loadaware-bench: unknown command %q\n%s", name, usage())
		return 2
	}
	return c.run(ctx, rest, stdout, stderr)
}

func usage() string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return typedName(names[i]) < typedName(names[j]) })
	s := "usage: loadaware-bench <command> [flags]\n\ncommands:\n"
	for _, n := range names {
		s += fmt.Sprintf("  %-11s %s\n", typedName(n), commands[n].summary)
	}
	return s + "\nRun \"loadaware-bench <command> -h\" for a command's flags.\n"
}
