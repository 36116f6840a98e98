package extload

import (
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestPinGeneratorLeavesTheLastCPUToTheServers(t *testing.T) {
	cpus, err := CPUs()
	if err != nil {
		t.Fatal(err)
	}
	cpu, p, err := PinGenerator(false)
	if err != nil || cpu != -1 || !strings.HasPrefix(p.Text, "not pinned (-pin=false)") {
		t.Fatalf("PinGenerator(false) = %d, %q, %v; want -1 and the not-pinned line", cpu, p.Text, err)
	}
	procs := runtime.GOMAXPROCS(0)
	cpu, p, err = PinGenerator(true)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Restore()
	if len(cpus) < 2 {
		if cpu != -1 || !strings.HasPrefix(p.Text, "not pinned: this process may use only CPU") {
			t.Fatalf("with CPUs %v: PinGenerator(true) = %d, %q; want no pin", cpus, cpu, p.Text)
		}
		return
	}
	now, err := CPUs()
	if err != nil {
		t.Fatal(err)
	}
	if last := cpus[len(cpus)-1]; cpu != last || slices.Contains(now, last) || len(now) != len(cpus)-1 {
		t.Fatalf("PinGenerator(true) gave the servers CPU %d and kept the generator on %v; want %d and %v", cpu, now, last, cpus[:len(cpus)-1])
	}
	if got := runtime.GOMAXPROCS(0); got != len(cpus)-1 {
		t.Fatalf("the pinned generator runs GOMAXPROCS %d, want one P per CPU it may use (%d)", got, len(cpus)-1)
	}
	p.Restore()
	if got := runtime.GOMAXPROCS(0); got != procs {
		t.Fatalf("after restore GOMAXPROCS is %d, want %d as before", got, procs)
	}
	if now, _ := CPUs(); !slices.Equal(now, cpus) {
		t.Fatalf("after restore the generator may use %v, want %v", now, cpus)
	}
}
