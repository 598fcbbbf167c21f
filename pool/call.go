package pool

import (
	"context"
	"errors"
	"runtime/debug"
	"sync/atomic"
)

// errLateCall is what a foreign runner gets if it calls the function after
// its Run has already returned; the function is not run then, because its
// load has already been released.
var errLateCall = errors.New("pool: runner called the function after its Run returned")

// call is one accepted function on its way through a runner.
type call struct {
	p    *Pool
	e    *entry
	load int
	ctx  context.Context
	fn   func(context.Context) error
	mfn  func(context.Context, int) error // RunMultiple's form; gets e.id

	async bool          // Go / RunMultiple: report to done, not res
	done  func(error)   // may be nil when async
	res   chan error    // cap 1; the synchronous waiter's
	state atomic.Uint32 // foreign runners only: pending, started, abandoned
}

const (
	statePending uint32 = iota
	stateStarted
	stateAbandoned
)

// invoke calls the user's function, turning a panic into a *PanicError.
func (c *call) invoke(ctx context.Context) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	if c.mfn != nil {
		return c.mfn(ctx, c.e.id)
	}
	return c.fn(ctx)
}

// runLocal runs c on a goroutine runner, then releases its load and reports.
func (c *call) runLocal() {
	err := c.ctx.Err()
	if err == nil {
		err = c.invoke(c.ctx)
	}
	p := c.p
	p.release(c.e, c.load)
	if !c.async {
		c.res <- err // the last touch: the waiter may reuse c at once
		return
	}
	done := c.done
	if c.mfn == nil { // Go's calls come from the pool; RunMultiple's do not
		p.putCall(c)
	}
	if done != nil {
		done(err)
	}
}

// runForeign runs c on a Runner given to NewWithRunners. The load is
// released exactly once: by the wrapper when fn ends, or here when the
// runner returned without ever starting fn.
func (c *call) runForeign(ctx context.Context) error {
	err := c.e.r.Run(ctx, c.wrapped)
	if c.state.CompareAndSwap(statePending, stateAbandoned) {
		c.p.release(c.e, c.load)
	}
	return err
}

func (c *call) wrapped(ctx context.Context) error {
	if !c.state.CompareAndSwap(statePending, stateStarted) {
		return errLateCall
	}
	err := c.invoke(ctx)
	c.p.release(c.e, c.load)
	return err
}
