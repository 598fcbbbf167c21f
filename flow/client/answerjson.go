package client

import (
	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/internal/plainjson"
)

// parseAnswer reads the answers a worker and a producer get most (holds,
// set_tasks results, created ids) in the plain shape the server writes,
// without reflection; false for any other answer or shape, with out
// untouched, and the caller then decodes with encoding/json.
func parseAnswer(data []byte, out any) bool {
	switch o := out.(type) {
	case *flow.HoldTasksResponse:
		return parseHold(data, o)
	case *flow.SetTasksResponse:
		var r flow.SetTasksResponse
		p := plainjson.Parser{B: data}
		if !p.Lit(`{"results":`) {
			return false
		}
		if !p.Lit("null") {
			r.Results = make([]flow.SetResult, 0, 64)
			if !p.Array(func() bool {
				var res flow.SetResult
				if !p.Object(func(key []byte) bool {
					var ok bool
					switch string(key) {
					case "task_id":
						res.TaskID, ok = p.Str()
					case "code":
						res.Code, ok = p.Int()
					case "error":
						res.Error, ok = p.Str()
					}
					return ok
				}) {
					return false
				}
				r.Results = append(r.Results, res)
				return true
			}) {
				return false
			}
		}
		if !p.Lit("}") || !p.End() {
			return false
		}
		*o = r
		return true
	case *flow.CreateTaskResponse:
		var r flow.CreateTaskResponse
		p := plainjson.Parser{B: data}
		if !p.Object(func(key []byte) bool {
			switch string(key) {
			case "task_ids":
				r.TaskIDs = make([]string, 0, 64)
				return p.Array(func() bool {
					id, ok := p.Str()
					r.TaskIDs = append(r.TaskIDs, id)
					return ok
				})
			case "existing":
				r.Existing = true
				return p.Lit("true")
			case "existing_index":
				r.ExistingIndex = []int{}
				return p.Array(func() bool {
					n, ok := p.Int()
					r.ExistingIndex = append(r.ExistingIndex, n)
					return ok
				})
			}
			return false
		}) || !p.End() {
			return false
		}
		*o = r
		return true
	}
	return false
}
