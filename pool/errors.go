package pool

import (
	"errors"
	"fmt"
)

var (
	// ErrClosed is returned by every run after Close has been called.
	ErrClosed = errors.New("pool: closed")
	// ErrInvalidLoad is returned when a load figure is negative.
	ErrInvalidLoad = errors.New("pool: load must not be negative")
	// ErrInvalidCount is returned when RunMultiple's k is outside [1, runners].
	ErrInvalidCount = errors.New("pool: runner count out of range")
	// ErrNoRunners is returned by NewWithRunners given no runners or a nil one.
	ErrNoRunners = errors.New("pool: no runners")
)

// PanicError is returned when a function run by the pool panics.
type PanicError struct {
	// Value is what the function passed to panic.
	Value any
	// Stack is the panicking goroutine's stack, as from runtime/debug.Stack.
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("pool: function panicked: %v", e.Value)
}

// Unwrap returns the panic value when it is an error, so errors.Is and
// errors.As see through a panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
