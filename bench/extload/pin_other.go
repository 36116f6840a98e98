//go:build !linux

package extload

import "errors"

var errNoPin = errors.New("extload: pinning threads to CPUs needs Linux")

// CPUs is the set of CPUs this process may run on; it needs Linux.
func CPUs() ([]int, error) { return nil, errNoPin }

// Pin restricts every thread of this process to cpus; it needs Linux.
func Pin(cpus []int) (restore func() error, err error) { return nil, errNoPin }
