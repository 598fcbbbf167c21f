package supervisor

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

// Limits on what a worker may send.
const (
	maxIDBytes     = 256
	maxReportTasks = 1_000_000
	// maxMaxLoad bounds a worker's max load, so that sums of free capacity
	// over a fleet cannot overflow (a worker could claim 2^63-1).
	maxMaxLoad = 1_000_000
)

// decodeMessage decodes and validates one worker message: a *protocol.Report
// or a *protocol.Payload. The error is the reason sent back in a
// protocol.Error; a rejected message has no effect.
func decodeMessage(data []byte) (any, error) {
	var env protocol.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, fmt.Errorf("malformed JSON: %v", err)
	}
	switch env.Type {
	case protocol.TypeReport:
		var r protocol.Report
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("report: %v", err)
		}
		if err := checkID("report: worker_id", r.WorkerID); err != nil {
			return nil, err
		}
		if r.MaxLoad < 1 {
			return nil, fmt.Errorf("report: max_load must be positive, got %d", r.MaxLoad)
		}
		if r.MaxLoad > maxMaxLoad {
			return nil, fmt.Errorf("report: max_load %d is above %d", r.MaxLoad, maxMaxLoad)
		}
		if len(r.Tasks) > maxReportTasks {
			return nil, fmt.Errorf("report: %d tasks, more than %d", len(r.Tasks), maxReportTasks)
		}
		seen := make(map[string]struct{}, len(r.Tasks))
		for i, t := range r.Tasks {
			if err := checkID(fmt.Sprintf("report: tasks[%d].task_id", i), t.TaskID); err != nil {
				return nil, err
			}
			if _, dup := seen[t.TaskID]; dup {
				return nil, fmt.Errorf("report: tasks[%d].task_id: %q listed twice", i, t.TaskID)
			}
			seen[t.TaskID] = struct{}{}
		}
		return &r, nil
	case protocol.TypePayload:
		var p protocol.Payload
		if err := json.Unmarshal(data, &p); err != nil {
			return nil, fmt.Errorf("payload: %v", err)
		}
		if err := checkID("payload: worker_id", p.WorkerID); err != nil {
			return nil, err
		}
		if err := checkID("payload: task_id", p.TaskID); err != nil {
			return nil, err
		}
		if len(p.MessageID) > maxIDBytes {
			return nil, fmt.Errorf("payload: message_id: %d bytes, more than %d", len(p.MessageID), maxIDBytes)
		}
		if len(bytes.TrimSpace(p.Data)) == 0 || bytes.Equal(p.Data, []byte("null")) {
			return nil, fmt.Errorf("payload: data is missing")
		}
		return &p, nil
	case "":
		return nil, fmt.Errorf("type is missing")
	case protocol.TypeInstruction, protocol.TypeError:
		return nil, fmt.Errorf("type %q is sent by the supervisor, not to it", env.Type)
	default:
		return nil, fmt.Errorf("unknown type %q", env.Type)
	}
}

func checkID(field, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%s is missing", field)
	case len(id) > maxIDBytes:
		return fmt.Errorf("%s: %d bytes, more than %d", field, len(id), maxIDBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s: %q has a control character", field, id)
		}
	}
	return nil
}
