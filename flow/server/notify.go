package server

import "sync"

// waker wakes long-polling holds: wait returns a channel that closes at the
// next signal for the type. Taking the channel before the claim and waiting
// on it after means a signal in between is not lost.
type waker struct {
	mu sync.Mutex
	ch map[string]chan struct{}
}

func newWaker() *waker { return &waker{ch: map[string]chan struct{}{}} }

func (w *waker) wait(taskType string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.ch[taskType]
	if !ok {
		c = make(chan struct{})
		w.ch[taskType] = c
	}
	return c
}

// signal wakes the waiters of taskType; "" wakes everyone.
func (w *waker) signal(taskType string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for t, c := range w.ch {
		if taskType == "" || t == taskType {
			close(c)
			delete(w.ch, t)
		}
	}
}
