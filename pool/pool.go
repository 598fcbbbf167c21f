package pool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// DefaultLoad is the load figure Run and Go-without-a-figure use.
const DefaultLoad = 100

// DefaultQueueSize is how many functions a goroutine runner holds before
// a run blocks waiting for room (see WithQueueSize).
const DefaultQueueSize = 1024

// Runner runs functions for a Pool. Run must call fn at most once, pass it
// a context derived from ctx, and return fn's error (possibly wrapped) or an
// error explaining why fn was not called. A runner may return before fn
// ends (for example when ctx ends); the pool keeps the load counted until
// fn itself returns.
type Runner interface {
	Run(ctx context.Context, fn func(context.Context) error) error
}

// Closer is implemented by runners that hold resources. Pool.Close calls it
// once, after all accepted work has ended.
type Closer interface {
	Close(ctx context.Context) error
}

// Option configures a Pool.
type Option func(*config)

type config struct {
	queue int
}

// WithQueueSize sets how many functions each goroutine runner made by New
// holds (queued and running) before a run blocks until there is room or its
// context ends. Values below 1 mean DefaultQueueSize. It has no effect on
// runners given to NewWithRunners.
func WithQueueSize(n int) Option {
	return func(c *config) {
		if n >= 1 {
			c.queue = n
		}
	}
}

// entry is one runner's place in the heap.
type entry struct {
	id   int // position in the runners given; what RunMultiple passes to fn
	idx  int // current position in Pool.heap
	load int
	g    *goRunner // set for the default runner (fast path)
	r    Runner    // set otherwise
}

// Pool runs functions on the least-loaded of a fixed set of runners. It is
// safe for concurrent use. A function run by the pool must not wait for
// another run on the same pool that could be queued behind it (Dart's
// LoadBalancer is "not reentrant" for the same reason): with one-at-a-time
// runners that is a deadlock.
type Pool struct {
	mu       sync.Mutex
	heap     []*entry // min-heap by load; every entry is in it outside mu
	entries  []*entry // by id
	closed   bool
	inflight sync.WaitGroup // accepted functions whose load is not yet released

	closeOnce sync.Once
	closeDone chan struct{}
	closeErr  error

	calls sync.Pool // *call, reused by the goroutine-runner paths
}

// New returns a pool of n goroutine runners, each running one function at a
// time from its own queue. n < 1 means runtime.GOMAXPROCS(0).
func New(n int, opts ...Option) *Pool {
	if n < 1 {
		n = runtime.GOMAXPROCS(0)
	}
	cfg := config{queue: DefaultQueueSize}
	for _, o := range opts {
		o(&cfg)
	}
	p := newPool(n)
	for i := range n {
		p.entries[i].g = newGoRunner(cfg.queue)
	}
	return p
}

// NewWithRunners returns a pool balancing over rs. Runner i is the one
// RunMultiple reports as i. It fails with ErrNoRunners when rs is empty or
// holds a nil runner.
func NewWithRunners(rs []Runner, opts ...Option) (*Pool, error) {
	if len(rs) == 0 {
		return nil, ErrNoRunners
	}
	for i, r := range rs {
		if r == nil {
			return nil, fmt.Errorf("runner %d is nil: %w", i, ErrNoRunners)
		}
	}
	cfg := config{queue: DefaultQueueSize}
	for _, o := range opts {
		o(&cfg)
	}
	p := newPool(len(rs))
	for i, r := range rs {
		p.entries[i].r = r
	}
	return p, nil
}

func newPool(n int) *Pool {
	p := &Pool{
		heap:      make([]*entry, n),
		entries:   make([]*entry, n),
		closeDone: make(chan struct{}),
	}
	for i := range n {
		e := &entry{id: i, idx: i}
		p.entries[i] = e
		p.heap[i] = e
	}
	p.calls.New = func() any { return &call{res: make(chan error, 1)} }
	return p
}

// Len returns the number of runners.
func (p *Pool) Len() int { return len(p.entries) }

// Loads returns each runner's current load, indexed like the runners.
func (p *Pool) Loads() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int, len(p.entries))
	for i, e := range p.entries {
		out[i] = e.load
	}
	return out
}

// Run runs fn on the least-loaded runner with load DefaultLoad and returns
// its error. See RunLoad.
func (p *Pool) Run(ctx context.Context, fn func(context.Context) error) error {
	return p.RunLoad(ctx, DefaultLoad, fn)
}

// RunLoad runs fn on the least-loaded runner, counting load against that
// runner until fn returns, and returns fn's error. It returns ctx's error
// as soon as ctx ends, even if fn is still queued or running; fn sees the
// same ctx, a queued fn whose ctx has ended is skipped, and the load stays
// counted until fn has actually returned or been skipped. A panic in fn
// comes back as a *PanicError. After Close it returns ErrClosed.
func (p *Pool) RunLoad(ctx context.Context, load int, fn func(context.Context) error) error {
	if load < 0 {
		return fmt.Errorf("load %d: %w", load, ErrInvalidLoad)
	}
	e, err := p.pick(load)
	if err != nil {
		return err
	}
	if e.g == nil {
		c := &call{p: p, e: e, load: load, fn: fn}
		return c.runForeign(ctx)
	}
	c := p.calls.Get().(*call)
	c.p, c.e, c.load, c.ctx, c.fn = p, e, load, ctx, fn
	select {
	case e.g.jobs <- c:
	case <-ctx.Done():
		p.release(e, load)
		p.putCall(c)
		return ctx.Err()
	}
	select {
	case err := <-c.res:
		p.putCall(c)
		return err
	case <-ctx.Done():
		select {
		case err := <-c.res: // finished at the same moment: prefer the real outcome
			p.putCall(c)
			return err
		default:
			// The runner still owns c and will send to c.res; c is not reused.
			return ctx.Err()
		}
	}
}

// Go starts fn on the least-loaded runner without waiting for it and calls
// done (if not nil) with fn's error when fn has returned or been skipped.
// done runs on the runner's goroutine: keep it short. Go blocks only while
// the chosen runner's queue is full. When Go returns an error (ErrClosed,
// ErrInvalidLoad, or ctx's error while waiting for room), fn was not
// accepted and done is not called.
func (p *Pool) Go(ctx context.Context, load int, fn func(context.Context) error, done func(error)) error {
	if load < 0 {
		return fmt.Errorf("load %d: %w", load, ErrInvalidLoad)
	}
	e, err := p.pick(load)
	if err != nil {
		return err
	}
	if e.g == nil {
		c := &call{p: p, e: e, load: load, fn: fn}
		go func() {
			err := c.runForeign(ctx)
			if done != nil {
				done(err)
			}
		}()
		return nil
	}
	c := p.calls.Get().(*call)
	c.p, c.e, c.load, c.ctx, c.fn, c.async, c.done = p, e, load, ctx, fn, true, done
	select {
	case e.g.jobs <- c:
		return nil
	case <-ctx.Done():
		p.release(e, load)
		p.putCall(c)
		return ctx.Err()
	}
}

// RunMultiple runs fn on the k least-loaded distinct runners at once,
// counting load against each, and returns when all have returned, with
// their errors joined (errors.Join). fn receives the runner's index. k must
// be between 1 and Len. Like RunLoad, it returns ctx's error as soon as ctx
// ends, and the loads stay counted until each fn has returned.
func (p *Pool) RunMultiple(ctx context.Context, k, load int, fn func(ctx context.Context, runner int) error) error {
	if load < 0 {
		return fmt.Errorf("load %d: %w", load, ErrInvalidLoad)
	}
	if k < 1 || k > len(p.entries) {
		return fmt.Errorf("k %d with %d runners: %w", k, len(p.entries), ErrInvalidCount)
	}
	es, err := p.pickK(k, load)
	if err != nil {
		return err
	}
	g := &group{errs: make([]error, k), left: k, all: make(chan struct{})}
	for i, e := range es {
		c := &call{p: p, e: e, load: load, ctx: ctx, mfn: fn, async: true, done: g.doneFunc(i)}
		if e.g == nil {
			go func() { c.done(c.runForeign(ctx)) }()
			continue
		}
		select {
		case e.g.jobs <- c:
		case <-ctx.Done():
			p.release(e, load)
			c.done(ctx.Err())
		}
	}
	select {
	case <-g.all:
		return errors.Join(g.errs...)
	case <-ctx.Done():
		select {
		case <-g.all:
			return errors.Join(g.errs...)
		default:
			return ctx.Err()
		}
	}
}

// Close stops the pool: every later run fails with ErrClosed. It waits until
// all accepted work has ended, then closes the runners (stopping goroutine
// runners; calling Close on runners that implement Closer) and returns their
// errors joined. If ctx ends first it returns ctx's error; the shutdown goes
// on, and a later Close waits for it again. Close may be called many times.
func (p *Pool) Close(ctx context.Context) error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.closeOnce.Do(func() {
		closeCtx := context.WithoutCancel(ctx)
		go func() {
			p.inflight.Wait()
			var errs []error
			for _, e := range p.entries {
				if e.g != nil {
					e.g.stop()
				} else if c, ok := e.r.(Closer); ok {
					if err := c.Close(closeCtx); err != nil {
						errs = append(errs, fmt.Errorf("runner %d: %w", e.id, err))
					}
				}
			}
			p.closeErr = errors.Join(errs...)
			close(p.closeDone)
		}()
	})
	select {
	case <-p.closeDone:
		return p.closeErr
	case <-ctx.Done():
		return fmt.Errorf("pool: close: %w", ctx.Err())
	}
}

// pick takes the least-loaded runner and adds load to it.
func (p *Pool) pick(load int) (*entry, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, ErrClosed
	}
	e := p.heap[0]
	e.load += load
	p.down(0)
	p.inflight.Add(1)
	p.mu.Unlock()
	return e, nil
}

// pickK takes the k least-loaded runners and adds load to each. As Dart's
// LoadBalancer.runMultiple does, it removes the k smallest from the heap and
// pushes them back with their new load, so no runner is taken twice.
func (p *Pool) pickK(k, load int) ([]*entry, error) {
	out := make([]*entry, 0, k)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	for range k {
		out = append(out, p.pop())
	}
	for _, e := range out {
		e.load += load
		p.push(e)
	}
	p.inflight.Add(k)
	return out, nil
}

// release takes load back off e once its function has ended or been skipped.
func (p *Pool) release(e *entry, load int) {
	p.mu.Lock()
	e.load -= load
	p.up(e.idx)
	p.mu.Unlock()
	p.inflight.Done()
}

func (p *Pool) putCall(c *call) {
	*c = call{res: c.res}
	p.calls.Put(c)
}

// Heap operations; callers hold p.mu.

func (p *Pool) up(i int) {
	h := p.heap
	e := h[i]
	for i > 0 {
		parent := (i - 1) / 2
		if h[parent].load <= e.load {
			break
		}
		h[i] = h[parent]
		h[i].idx = i
		i = parent
	}
	h[i] = e
	e.idx = i
}

func (p *Pool) down(i int) {
	h := p.heap
	n := len(h)
	e := h[i]
	for {
		m := 2*i + 1
		if m >= n {
			break
		}
		if r := m + 1; r < n && h[r].load < h[m].load {
			m = r
		}
		if e.load <= h[m].load {
			break
		}
		h[i] = h[m]
		h[i].idx = i
		i = m
	}
	h[i] = e
	e.idx = i
}

func (p *Pool) pop() *entry {
	h := p.heap
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[0].idx = 0
	h[last] = nil
	p.heap = h[:last]
	if last > 0 {
		p.down(0)
	}
	return top
}

func (p *Pool) push(e *entry) {
	p.heap = append(p.heap, e)
	p.up(len(p.heap) - 1)
}

// group collects RunMultiple's outcomes.
type group struct {
	mu   sync.Mutex
	errs []error
	left int
	all  chan struct{}
}

func (g *group) doneFunc(i int) func(error) {
	return func(err error) {
		g.mu.Lock()
		g.errs[i] = err
		g.left--
		last := g.left == 0
		g.mu.Unlock()
		if last {
			close(g.all)
		}
	}
}
