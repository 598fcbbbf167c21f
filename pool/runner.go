package pool

import "sync"

// goRunner is the default runner: one long-lived goroutine draining a
// bounded FIFO queue, so it runs one function at a time (like a Dart
// isolate) and never spawns a goroutine per call.
type goRunner struct {
	jobs chan *call
	wg   sync.WaitGroup
}

func newGoRunner(queue int) *goRunner {
	g := &goRunner{jobs: make(chan *call, queue)}
	g.wg.Add(1)
	go g.loop()
	return g
}

func (g *goRunner) loop() {
	defer g.wg.Done()
	for c := range g.jobs {
		c.runLocal()
	}
}

// stop ends the goroutine. The pool calls it only after all accepted work
// has ended and no run can pick this runner again, so nothing sends on jobs
// after it is closed.
func (g *goRunner) stop() {
	close(g.jobs)
	g.wg.Wait()
}
