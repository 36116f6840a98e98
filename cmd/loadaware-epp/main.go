// Command loadaware-epp is the load-aware endpoint picker: an Envoy ext_proc server that
// routes each LLM request to the vLLM engine with the best balance of cached prefix and
// load.
//
//	loadaware-epp [serve] [flags]   run the picker (the default)
//	loadaware-epp check             verify a deployment's preconditions of cache-aware routing
//	loadaware-epp tokenize          print the token ids the picker computes (JSON lines in, arrays out)
//	loadaware-epp lmcache-keys      print the LMCache chunk keys of token ids (check a deployment)
//	loadaware-epp version           print the version
//
// Run `loadaware-epp -h` for the flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/loadaware/loadaware-epp/lmcache"
	"github.com/loadaware/loadaware-epp/tokenize"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run dispatches a subcommand and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "serve":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return serve(ctx, args, os.Getenv, stdout, stderr)
	case "check":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		return check(ctx, args, os.Getenv, stdout, stderr)
	case "tokenize":
		return tokenize.RunCommand(args, stdin, stdout, stderr)
	case "lmcache-keys":
		return lmcache.RunKeysCommand(args, stdin, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "loadaware-epp", version)
		return 0
	case "help":
		fmt.Fprintln(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "loadaware-epp: unknown command %q: use serve (the default), check, tokenize, lmcache-keys, version or help\n", cmd)
	return 2
}

const usage = `loadaware-epp: the load-aware endpoint picker for vLLM fleets (Envoy ext_proc).

Commands:
  serve    run the picker (the default): loadaware-epp [serve] --endpoints ip:port,... [flags]
  tokenize read prompts (JSON lines: a string, or a chat request) and print their token ids:
           loadaware-epp tokenize --tokenizer PATH [--chat]
  check    verify every precondition of cache-aware routing on a running deployment, one row each
           with its fix; exit status 0 only when all pass (admin token from LOADAWARE_ADMIN_TOKEN):
           loadaware-epp check -metrics http://picker:9090 [-gateway http://gateway:8080]
  lmcache-keys  print the LMCache chunk keys of token ids read from stdin:
           loadaware-epp lmcache-keys --hash-seed 123 [--chunk-size 256] [--key-format v0.3|v0.4]
  version  print the version
  help     this text

Run "loadaware-epp serve -h" for the flags.`
