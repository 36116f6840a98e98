package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/loadaware/loadaware-epp/bench/drive"
	"github.com/loadaware/loadaware-epp/bench/experiment"
	"github.com/loadaware/loadaware-epp/bench/openai"
	"github.com/loadaware/loadaware-epp/bench/progress"
	"github.com/loadaware/loadaware-epp/bench/trace"
	"github.com/loadaware/loadaware-epp/bench/workload"
)

func init() {
	register(command{name: "drive", summary: "send a workload at a real OpenAI URL (your gateway) and record it in the published layout; A/B policies via /admin/config", run: runDrive})
}

// runDrive is `loadaware-bench drive`: one cell per arm, written under -out in the layout
// `replay -real` and `compare` read.
func runDrive(ctx context.Context, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	target := fs.String("target", "", "the OpenAI-compatible base URL to send to (your gateway), e.g. http://10.0.0.5:8080")
	wl := fs.String("workload", "published", "published, a shipped profile ("+strings.Join(workload.ShippedProfiles(), ", ")+") or a workload file (JSON or YAML)")
	traceName := fs.String("trace", "", "replay a Mooncake-format trace instead of -workload: a file, or "+strings.Join(trace.Names(), ", "))
	speedup := fs.Float64("speedup", 1, "with -trace: divide the trace's clock by this")
	window := fs.Duration("window", 0, "with -trace: each seed N replays the trace's window [(N-1)*window, N*window) (0: seed 1 replays the whole trace)")
	ctxTokens := fs.Int("context", 32768, "the engines' context in tokens (prompt + completion): longer trace requests are capped (tail cut), and counted")
	seedsFlag := fs.String("seeds", "1", "seeds: N, A-B or a list; run back to back")
	requests := fs.Int("requests", 0, "at most this many requests per seed (0: the workload's own count, or the whole trace window)")
	warmup := fs.Int("warmup", 0, "requests of a separate warm-up seed sent (and not recorded) before each cell's seeds")
	seedGap := fs.Duration("seed-gap", 430*time.Millisecond, "idle time between a seed's last answer and the next seed")
	model := fs.String("model", "Qwen/Qwen2.5-3B-Instruct", "the model name the engines serve")
	prompt := fs.String("prompt", "text", "send prompts as text or as token ids (ids: only for engines that serve the synthetic vocabulary)")
	out := fs.String("out", "drive-out", "directory: one cell directory per arm (run.json, window.env, driver-seed<N>.csv, prom/)")
	engines := fs.String("engines", "", "engine base URLs to scrape /metrics from every -scrape-every, comma-separated (or use -prometheus)")
	prom := fs.String("prometheus", "", "a Prometheus server's base URL to ask query_range for the engines' metrics over each cell")
	scrapeEvery := fs.Duration("scrape-every", 5*time.Second, "the scrape interval (and the query_range step)")
	admin := fs.String("admin", "", "the picker's metrics/admin base URL: switch its policy to each of -arms before that arm's cell (token from LOADAWARE_ADMIN_TOKEN)")
	armsFlag := fs.String("arms", "", "with -admin: the arms to A/B, e.g. kvaware,loadaware-b1,latencyaware; without: the one label the cell is recorded under (default: current)")
	resetURLs := fs.String("reset-url", "", "URLs to POST before each cell to empty the engines' prefix caches (vLLM: http://ENGINE/reset_prefix_cache with VLLM_SERVER_DEV_MODE=1), comma-separated")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on one request, from its sending to its last token")
	timeCap := fs.Duration("time-cap", time.Hour, "bound on the whole drive; a drive stopped by it (or by Ctrl-C) keeps the seeds it finished")
	maxInFlight := fs.Int("max-in-flight", 4096, "requests in flight at once")
	showProgress := fs.Bool("progress", true, "show progress on stderr")
	if err := fs.Parse(args); err != nil {
		return errFlags
	}
	if *target == "" {
		return usagef("pass -target URL: the OpenAI-compatible base URL of your gateway")
	}
	if *engines == "" && *prom == "" {
		return usagef("pass -engines URL,... (drive scrapes their /metrics) or -prometheus URL: imbalance needs the engines' running counts")
	}
	if *prompt != "text" && *prompt != "ids" {
		return usagef("-prompt %q: pass text or ids", *prompt)
	}
	seeds, err := experiment.ParseSeeds(*seedsFlag)
	if err != nil {
		return usagef("-seeds: %v", err)
	}
	arms, err := driveArms(*armsFlag, *admin != "")
	if err != nil {
		return usageError{err}
	}
	var src drive.Source
	if *traceName != "" {
		src, err = drive.TraceSource(*traceName, *speedup, *window, *ctxTokens, *requests, *prompt == "text")
	} else {
		src, err = drive.WorkloadSource(*wl, *requests)
	}
	if err != nil {
		return usageError{err}
	}
	ctx, cancel := contextWithCap(ctx, *timeCap)
	defer cancel()
	httpc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	client := &openai.Client{HTTP: httpc, BaseURL: strings.TrimSuffix(*target, "/"), Timeout: *timeout}
	send := drive.OpenAISend(client, *model, *prompt == "text")
	token := os.Getenv("LOADAWARE_ADMIN_TOKEN")
	for _, arm := range arms {
		if *admin != "" {
			if err := drive.SwitchPolicy(ctx, httpc, *admin, token, arm.policy, arm.beta); err != nil {
				return err
			}
		}
		cold := false // without a reset the engines keep every earlier cell's caches
		if *resetURLs != "" {
			if err := drive.ResetCaches(ctx, httpc, strings.Split(*resetURLs, ",")); err != nil {
				fmt.Fprintf(stderr, "drive: %v\n", err)
			} else {
				cold = true
			}
		}
		if !cold && len(arms) > 1 {
			fmt.Fprintf(stderr, "drive: cell %s does not start cold: the engines keep the earlier cells' caches (pass -reset-url)\n", arm.label)
		}
		cell := drive.Cell{Dir: filepath.Join(*out, arm.label), Arm: arm.policy, Beta: arm.beta, Rate: src.Rate, SeedGap: *seedGap,
			Extra: map[string]any{"target": *target, "workload": src.Name, "model": *model, "cold": cold, "tool": "loadaware-bench drive"}}
		if *warmup > 0 {
			w, err := src.Seed(0)
			if err != nil {
				return fmt.Errorf("warm-up: %v", err)
			}
			cell.Warmup = w[:min(*warmup, len(w))]
		}
		for _, s := range seeds {
			reqs, err := src.Seed(s)
			if err != nil {
				return fmt.Errorf("seed %d: %v", s, err)
			}
			cell.Seeds = append(cell.Seeds, drive.Seed{Seed: int(s), Requests: reqs})
		}
		metrics, stopScrape, err := drive.Metrics(ctx, httpc, strings.Split(*engines, ","), *prom, *scrapeEvery)
		if err != nil {
			return err
		}
		bar := progress.New(stderr, "drive "+arm.label, *showProgress)
		sums, err := drive.RunCell(ctx, cell, send, drive.Limits{RequestTimeout: *timeout, MaxInFlight: *maxInFlight}, metrics, bar.UpdateFailed)
		bar.Finish()
		stopScrape()
		for _, sm := range sums {
			fmt.Fprintf(stdout, "%s seed %d: TTFT p95 %v s, imbalance %v\n", arm.label, sm.Seed, sm.TTFTP95, sm.Imbalance)
		}
		if errors.Is(err, drive.ErrStopped) {
			return fmt.Errorf("stopped; %s holds the seeds finished before", cell.Dir)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %d seeds recorded in %s\n", arm.label, len(seeds), cell.Dir)
	}
	fmt.Fprintf(stdout, "read them with: loadaware-bench replay -real %s\n", *out)
	return nil
}

func contextWithCap(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// driveArm is one cell's policy and the directory label it is recorded under.
type driveArm struct {
	label, policy string
	beta          *float64
}

func driveArms(s string, switching bool) ([]driveArm, error) {
	if !switching {
		if strings.Contains(s, ",") {
			return nil, errors.New("-arms names several arms: pass -admin URL so drive can switch the picker between them")
		}
		if s == "" {
			s = "current"
		}
		return []driveArm{{label: s, policy: s}}, nil
	}
	if s == "" {
		return nil, errors.New("-admin needs -arms: the policies to A/B, e.g. kvaware,loadaware-b1")
	}
	parsed, err := experiment.ParseArms(s)
	if err != nil {
		return nil, fmt.Errorf("-arms: %v", err)
	}
	var out []driveArm
	for _, a := range parsed {
		if a.Policy == experiment.PolicyGIE {
			return nil, fmt.Errorf("-arms: arm %s is GIE's own scheduler, which runs only in virtual time: drive switches the picker's policies", a.Name)
		}
		d := driveArm{label: a.Name, policy: a.Policy}
		if a.Policy == "loadaware" || a.Policy == "latencyaware" {
			b := a.Beta
			d.beta = &b
		}
		out = append(out, d)
	}
	return out, nil
}
