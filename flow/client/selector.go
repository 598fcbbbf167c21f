package client

import (
	"errors"
	"fmt"
	"sync"
)

// selector picks the server for one attempt of a call. done reports the
// attempt's outcome (nil, or the transport error).
type selector interface {
	pick(key string) (server string, done func(error), err error)
	setHealthy(server string, ok bool)
}

// newSelector builds the selector for a strategy name.
func newSelector(strategy string, servers []string) (selector, error) {
	if strategy != "round_robin" {
		return nil, fmt.Errorf("unknown strategy (want round_robin)")
	}
	rr := &roundRobin{servers: servers, down: map[string]bool{}}
	return rr, nil
}

// roundRobin cycles through the healthy servers.
type roundRobin struct {
	mu      sync.Mutex
	servers []string
	down    map[string]bool
	next    int
}

func (r *roundRobin) pick(string) (string, func(error), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for range r.servers {
		s := r.servers[r.next%len(r.servers)]
		r.next++
		if !r.down[s] {
			return s, func(error) {}, nil
		}
	}
	return "", nil, errors.New("every server is marked unhealthy")
}

func (r *roundRobin) setHealthy(s string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		delete(r.down, s)
	} else {
		r.down[s] = true
	}
}
