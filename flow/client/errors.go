package client

import (
	"errors"
	"fmt"
	"net/http"
)

// ErrStaleLease is matched (errors.Is) by the error of a call the server
// refused with 409: the lease is no longer the task's (it expired and the task
// was held again, or the task ended). Nothing was changed.
var ErrStaleLease = errors.New("flow: stale lease")

// ErrNotFound is matched (errors.Is) by the error of a call the server
// answered with 404 (no such task).
var ErrNotFound = errors.New("flow: not found")

// ErrUnavailable is matched by the error of a call no server could take:
// every server tried was unreachable.
var ErrUnavailable = errors.New("flow: no server available")

// APIError is a 4xx or 5xx answer: the HTTP status and the server's message.
type APIError struct {
	Status  int    // HTTP status code
	Message string // the "error" field of the body, or the body itself
	Server  string // base URL of the server that answered
	Path    string // endpoint path, e.g. /v1/set_task
	// RetryAfter: the server said it was busy (503 with Retry-After) and
	// did nothing; the call may be sent again.
	RetryAfter bool
}

func (e *APIError) Error() string {
	return fmt.Sprintf("flow %s: %d %s: %s", e.Path, e.Status, http.StatusText(e.Status), e.Message)
}

// Is makes errors.Is(err, ErrStaleLease) true for a 409 and
// errors.Is(err, ErrNotFound) true for a 404.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrStaleLease:
		return e.Status == http.StatusConflict
	case ErrNotFound:
		return e.Status == http.StatusNotFound
	}
	return false
}

// unavailableError wraps the last transport error of a call that no server
// could take, so callers can match ErrUnavailable and still see the cause.
type unavailableError struct {
	path string
	last error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("flow %s: no server available: %v", e.path, e.last)
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.last} }
