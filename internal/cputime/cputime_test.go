//go:build unix

package cputime

import (
	"os"
	"path/filepath"
	"testing"
)

// Self grows with work done, and Of finds this very process by its name.
func TestSelfAndOf(t *testing.T) {
	before := Self()
	x := 0
	for i := range 50_000_000 {
		x += i % 7
	}
	if x == 0 || Self() <= before {
		t.Fatalf("Self did not grow: %v", before)
	}
	comm, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Skip("no /proc here")
	}
	name := string(comm[:len(comm)-1])
	if d, ok := Of(name); !ok || d <= 0 {
		t.Fatalf("Of(%q) = %v, %v; want this process's CPU", name, d, ok)
	}
	if _, ok := Of(filepath.Base(t.TempDir()) + "-no-such-process"); ok {
		t.Fatal("Of found a process that does not exist")
	}
}
