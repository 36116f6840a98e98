// Command loadaware-bench runs the project's benchmarks and its demo.
//
//	loadaware-bench demo [flags]         a short live run (kvaware, loadaware, latencyaware) through the gateway, ext_proc and ZeroMQ, then the same arms in virtual time
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
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand. run gets a flag set named after the command, writing to stderr,
// and the arguments after the name. It returns nil for exit code 0; a usageError (usagef)
// or another error, which the dispatcher prints after "loadaware-bench NAME: " and exits 2
// or 1; or an exitCode, whose code the dispatcher returns without printing (the flag set, or
// the command, has said what went wrong).
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error
}

// usageError is an error in the command line: exit code 2.
type usageError struct{ error }

// usagef is a usageError with a formatted message.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// exitCode is an exit code whose reason has been printed.
type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit code %d", int(c)) }

// errFlags is the exit of a command whose flags did not parse (the flag set printed why).
const errFlags = exitCode(2)

var commands = map[string]command{}

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
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(stderr, "loadaware-bench: unknown command %q\n%s", name, usage())
		return 2
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	err := c.run(ctx, fs, rest, stdout, stderr)
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	}
	fmt.Fprintf(stderr, "loadaware-bench %s: %v\n", name, err)
	if errors.As(err, &usageError{}) {
		return 2
	}
	return 1
}

func usage() string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	s := "usage: loadaware-bench <command> [flags]\n\ncommands:\n"
	for _, n := range names {
		s += fmt.Sprintf("  %-11s %s\n", n, commands[n].summary)
	}
	return s + "\nRun \"loadaware-bench <command> -h\" for a command's flags.\n"
}
