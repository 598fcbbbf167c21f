// Package source lists the tasks the supervisor should keep running (the
// room crawler's list, say). A source is a static list in the config, a YAML or JSON
// file, or an HTTP URL that returns the list; the supervisor calls List at the
// end of warm-up and every query_interval and diffs the result against what it
// runs.
//
// The list format, for a file and an HTTP body alike, is either
//
//	{"tasks": [{"task_id": "room-1", "spec": {"url": "wss://…"}}, …]}
//
// or the bare array. task_id is required and unique; spec is any value and is
// handed to workers unchanged (as JSON).
package source
