package sink

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
)

// stdoutDialer writes one JSON object per line to w (os.Stdout when nil):
// {"task_id":…,"message_id":…,"data":…}. Data that is not JSON is written as
// a JSON string.
func stdoutDialer(w io.Writer) dialFunc {
	if w == nil {
		w = os.Stdout
	}
	return func(context.Context) (publisher, error) {
		return &stdoutPub{w: bufio.NewWriter(w)}, nil
	}
}

type stdoutPub struct{ w *bufio.Writer }

type stdoutLine struct {
	TaskID    string          `json:"task_id"`
	MessageID string          `json:"message_id,omitempty"`
	Data      json.RawMessage `json:"data"`
}

func (p *stdoutPub) publish(_ context.Context, batch []Message) ([]Message, int, error) {
	enc := json.NewEncoder(p.w)
	for i, m := range batch {
		data := json.RawMessage(m.Data)
		if !json.Valid(data) {
			s, _ := json.Marshal(string(m.Data))
			data = s
		}
		if err := enc.Encode(stdoutLine{m.TaskID, m.MessageID, data}); err != nil {
			return batch[i:], 0, err
		}
	}
	if err := p.w.Flush(); err != nil {
		// What reached the writer is unknown; send the batch again.
		return batch, 0, err
	}
	return nil, 0, nil
}

func (p *stdoutPub) close() error { return p.w.Flush() }
