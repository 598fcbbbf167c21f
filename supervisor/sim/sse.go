package sim

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Event types on a room's stream.
const (
	EventMessage   = "message"
	EventHeartbeat = "heartbeat"
	EventClosed    = "closed"
)

// Event is one Server-Sent Event.
type Event struct {
	Type string // message, heartbeat or closed
	ID   string // the message id (messages only)
	Data []byte // the message as JSON (messages only)
}

// encode writes e in text/event-stream form. Data is JSON from
// json.Marshal, so it holds no newline.
func (e Event) encode() []byte {
	var b bytes.Buffer
	b.WriteString("event: " + e.Type + "\n")
	if e.ID != "" {
		b.WriteString("id: " + e.ID + "\n")
	}
	b.WriteString("data: ")
	if len(e.Data) > 0 {
		b.Write(e.Data)
	} else {
		b.WriteString("{}")
	}
	b.WriteString("\n\n")
	return b.Bytes()
}

// maxLine bounds one line of the stream.
const maxLine = 1 << 20

// ReadEvents parses a text/event-stream and calls fn for each event until the
// stream ends (nil) or breaks (the error).
func ReadEvents(r io.Reader, fn func(Event) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxLine)
	var e Event
	var data [][]byte
	typed := false
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 { // blank line: dispatch
			if typed || len(data) > 0 {
				if e.Type == "" {
					e.Type = EventMessage
				}
				e.Data = bytes.Join(data, []byte("\n"))
				if err := fn(e); err != nil {
					return err
				}
			}
			e, data, typed = Event{}, nil, false
			continue
		}
		if line[0] == ':' { // comment
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			e.Type, typed = string(value), true
		case "id":
			e.ID = string(value)
		case "data":
			data = append(data, append([]byte(nil), value...))
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("sim: reading the stream: %w", err)
	}
	return nil
}

// Watch reads one room's stream at url, calling fn for each message and
// heartbeat, until ctx ends (ctx's error), the room closes (ErrRoomClosed),
// fn fails (its error) or the stream breaks.
func Watch(ctx context.Context, client *http.Client, url string, fn func(Event)) error {
	if client == nil {
		client = http.DefaultClient
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return fmt.Errorf("sim: GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	err = ReadEvents(resp.Body, func(e Event) error {
		if e.Type == EventClosed {
			return ErrRoomClosed
		}
		fn(e)
		return nil
	})
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		err = fmt.Errorf("sim: %s: stream ended", url)
	}
	return err
}
