package main

import (
	"flag"
	"fmt"
	"time"

	"github.com/loadaware/loadaware-epp/app"
	"github.com/loadaware/loadaware-epp/cachealarm"
)

// alarmFlags are serve's flags of the cache-signal-dead alarm (what check verifies once,
// the alarm watches while serving).
type alarmFlags struct {
	window         time.Duration
	minPrompts     int64
	parityInterval time.Duration
}

func (f *alarmFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&f.window, "cache-alarm-window", cachealarm.DefaultWindow, "raise the cache-signal-dead alarm (log once per window, loadaware_cache_signal_dead{endpoint}) for an endpoint that receives routed prompts while its cache source sent or credited nothing of it this long; 0 disables the alarm")
	fs.Int64Var(&f.minPrompts, "cache-alarm-min-prompts", cachealarm.DefaultMinPrompts, "prompts routed to an endpoint since its last cache event before its silence counts")
	fs.DurationVar(&f.parityInterval, "tokenizer-parity-interval", 0, "sample every engine's POST /tokenize (a text prompt and a chat) against the picker's tokenizer this often; a difference raises the alarm; 0 (default): off")
}

// config returns the alarm's configuration (nil when disabled). model is --model, sent
// to the engines' /tokenize; timeout bounds one call.
func (f alarmFlags) config(tokenizer bool, model string, timeout time.Duration) (*app.CacheAlarmConfig, error) {
	switch {
	case f.window < 0:
		return nil, fmt.Errorf("--cache-alarm-window %v: use a positive duration such as 2m, or 0 to disable the alarm", f.window)
	case f.minPrompts < 1:
		return nil, fmt.Errorf("--cache-alarm-min-prompts %d: use 1 or more (default %d)", f.minPrompts, cachealarm.DefaultMinPrompts)
	case f.parityInterval < 0:
		return nil, fmt.Errorf("--tokenizer-parity-interval %v: use a positive duration such as 5m, or 0 for none", f.parityInterval)
	case f.window == 0 && f.parityInterval > 0:
		return nil, fmt.Errorf("--tokenizer-parity-interval feeds the alarm, which --cache-alarm-window 0 disables: set a window or drop the interval")
	case f.parityInterval > 0 && !tokenizer:
		return nil, fmt.Errorf("--tokenizer-parity-interval needs the picker's tokenizer: pass --tokenizer, --model or --tokenizer-from-engine")
	case f.window == 0:
		return nil, nil
	}
	return &app.CacheAlarmConfig{Window: f.window, MinPrompts: f.minPrompts, ParityInterval: f.parityInterval,
		ParityModel: model, ParityTimeout: timeout}, nil
}
