package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
	"github.com/fulcrum-lb/fulcrum/supervisor/worker"
)

// RoomSession is the demo session type of `fulcrum supervisor worker`: it
// watches one simulated room and emits each message as a payload (message id
// = the room's id for it), and each heartbeat as a sign of life.
type RoomSession struct {
	// Client for the streams (default: a client without timeout, since a
	// stream is long-lived).
	Client *http.Client
	// Base is the simulator's URL (http://127.0.0.1:7400), used for tasks
	// whose spec carries no "url".
	Base string
}

// Run implements worker.Session. The task's spec is {"url": "<stream URL>"};
// without it the stream is Base + /rooms/<task id>/events.
func (s *RoomSession) Run(ctx context.Context, task protocol.Task, out *worker.Output) error {
	u, err := s.streamURL(task)
	if err != nil {
		return err
	}
	return Watch(ctx, s.Client, u, func(e Event) {
		switch e.Type {
		case EventMessage:
			out.Emit(e.ID, e.Data)
		case EventHeartbeat:
			out.Seen()
		}
	})
}

func (s *RoomSession) streamURL(task protocol.Task) (string, error) {
	var spec struct {
		URL string `json:"url"`
	}
	if len(task.Spec) > 0 && json.Unmarshal(task.Spec, &spec) == nil && spec.URL != "" {
		return spec.URL, nil
	}
	if s.Base == "" {
		return "", fmt.Errorf("task %s: spec has no url and no simulator base URL is set", task.TaskID)
	}
	return strings.TrimSuffix(s.Base, "/") + "/rooms/" + url.PathEscape(task.TaskID) + "/events", nil
}
