//go:build linux

package extload

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// CPUs is the set of CPUs this process may run on now (its affinity), in ascending order.
func CPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("extload: read this process's CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// Pin restricts every thread of this process to cpus and returns a function that gives
// them back the affinity they had. A thread inherits its creator's affinity, so threads
// started later stay on cpus; Pin repeats its pass over /proc/self/task until a pass finds
// no thread it has not pinned, so one started during a pass is not missed.
func Pin(cpus []int) (restore func() error, err error) {
	var was unix.CPUSet
	if err := unix.SchedGetaffinity(0, &was); err != nil {
		return nil, fmt.Errorf("extload: read this process's CPU affinity: %w", err)
	}
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	if set.Count() == 0 {
		return nil, errors.New("extload: pin to no CPU")
	}
	if err := pinThreads(&set); err != nil {
		if errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("extload: pin to CPUs %v: none of them is a CPU this machine has online (nproc --all counts them): %w", cpus, err)
		}
		return nil, fmt.Errorf("extload: pin to CPUs %v: %w", cpus, err)
	}
	return func() error { return pinThreads(&was) }, nil
}

// pinThreads sets the affinity of every thread of this process to set.
func pinThreads(set *unix.CPUSet) error {
	done := map[int]bool{}
	for {
		tids, err := threads()
		if err != nil {
			return err
		}
		fresh := 0
		for _, tid := range tids {
			if done[tid] {
				continue
			}
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) { // ESRCH: it ended
				return fmt.Errorf("thread %d: %w", tid, err)
			}
			done[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
}

// threads lists the ids of this process's threads.
func threads() ([]int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("list this process's threads: %w", err)
	}
	tids := make([]int, 0, len(tasks))
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}
