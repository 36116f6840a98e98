//go:build !linux

package lmcache

import "time"

func processCPU() (time.Duration, bool) { return 0, false }
