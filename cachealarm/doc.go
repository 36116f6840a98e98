// Package cachealarm raises the "cache signal dead" alarm: an endpoint that keeps
// receiving routed prompts while its cache source has sent nothing from it, or credited
// nothing of what it sent, for a whole window; or whose engine tokenizes a sample prompt
// differently from the picker. Cache-aware routing then quietly degrades to load
// balancing while every request still returns 200, which is why it needs an alarm.
//
// A Watch is fed from the hot paths without locks (Routed per decision, Signal and
// Uncredited per message of the cache source, Parity per tokenizer sample) and judged by
// Tick, which the caller drives with its own clock: the package reads no clock and starts
// no goroutine. Each endpoint in alarm is logged once per window and counted in
// loadaware_cache_signal_dead{endpoint} (1 while in alarm) and
// loadaware_cache_signal_dead_alarms_total{reason}.
//
// The package does no I/O besides its log lines and metrics: the sockets that carry the
// signals and the engines' /tokenize are the caller's.
package cachealarm
