package supervisor

import (
	"fmt"
	"testing"
)

// Assignment benchmarks (docs/benchmarks.md, "## supervisor"):
//
//	go test -run '^$' -bench 'Assign|Reassign' -benchmem ./supervisor/

func benchFleet(b *testing.B, workers, maxLoad int) *Engine {
	e, err := NewEngine(3)
	if err != nil {
		b.Fatal(err)
	}
	for i := range workers {
		e.Claim(fmt.Sprintf("w%04d", i), maxLoad, nil)
	}
	return e
}

// BenchmarkAssign100kTasksK3Over1000Workers: the full assignment at the end
// of warm-up, 300,000 holdings, instruction sets included.
func BenchmarkAssign100kTasksK3Over1000Workers(b *testing.B) {
	list := tasks(0, 100_000)
	for b.Loop() {
		b.StopTimer()
		e := benchFleet(b, 1000, 400)
		b.StartTimer()
		e.Assign(list, nil, true)
		if outs := e.Flush(); len(outs) != 1000 {
			b.Fatalf("%d instruction sets", len(outs))
		}
	}
}

// BenchmarkReassignAfterOneWorkerDies: one of 1,000 workers dies holding
// ~300 of the 300,000 holdings; they go to others.
func BenchmarkReassignAfterOneWorkerDies(b *testing.B) {
	e := benchFleet(b, 1000, 400)
	e.Assign(tasks(0, 100_000), nil, true)
	e.Flush()
	i := 0
	for b.Loop() {
		id := fmt.Sprintf("w%04d", i%1000)
		e.RemoveWorker(id)
		e.Flush()
		b.StopTimer()
		e.Report(id, 400, nil, true) // it comes back (empty), ready to die again
		e.Flush()
		i++
		b.StartTimer()
	}
}
