package server

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"

	"github.com/fulcrum-lb/fulcrum/console"
	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
)

// This file is what the web console (docs/console.md) adds to the flow
// server: its pages at /ui/ and GET /v1/funnel, the tasks of each type by
// stage and status with the age of the oldest due pending task.

// funnelSample is how many tasks of a type and status GET /v1/funnel
// reads for their schedule logs, which order the stages; the counts come
// from the counts the store keeps (Store.Counts), exact at any size.
const funnelSample = 200

// FunnelResponse is GET /v1/funnel.
type FunnelResponse struct {
	Types []TypeFunnel `json:"types"`
}

// TypeFunnel is one type's tasks by stage.
type TypeFunnel struct {
	TaskType string `json:"task_type"`
	// Stages have no declared order; they are ordered by the moves the
	// counted tasks' schedule logs show (a stage before the stages its
	// tasks moved on to), then by name.
	Stages []StageCounts `json:"stages"`
	// Truncated said the counts were a sample; they are exact now and it
	// is never set (kept for clients that read it).
	Truncated bool `json:"truncated,omitempty"`
	// OldestPendingMS is how long the oldest due pending task has been
	// due (0 when none is due).
	OldestPendingMS int64 `json:"oldest_pending_ms"`
}

// StageCounts counts one stage's tasks by status name.
type StageCounts struct {
	Stage  string           `json:"stage"`
	Counts map[string]int64 `json:"counts"`
}

// consoleActions are the operator endpoints the console offers buttons
// for; GET /v1/console says which of them this server has.
var consoleActions = []string{"cancel_task", "retry_task", "delete_task", "pause_task_type", "resume_task_type"}

// withConsole serves the console's pages at /ui/ without a token (they
// hold no data), and GET /v1/funnel and GET /v1/console behind the same
// guard as the API; everything else goes to api.
func (s *Server) withConsole(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ui/", console.Handler("flow"))
	mux.Handle("/ui", console.Handler("flow"))
	mux.Handle("/v1/funnel", s.guard(s.handle("/v1/funnel", endpoint{http.MethodGet, s.funnel})))
	actions := actionProbe{api: api}
	mux.Handle("/v1/console", s.guard(s.handle("/v1/console", endpoint{http.MethodGet, actions.serve})))
	mux.Handle("/", api)
	return mux
}

// actionProbe finds which operator endpoints api serves by asking it, the
// first time, with a GET: those endpoints want POST, so one that exists
// answers 405 and does nothing; an unknown path answers 404. Asking the
// handler itself keeps the console right while the API grows, and spares
// the browser requests that fail on purpose.
type actionProbe struct {
	api  http.Handler
	mu   sync.Mutex
	have map[string]bool
}

// ConsoleResponse is GET /v1/console.
type ConsoleResponse struct {
	Actions map[string]bool `json:"actions"`
}

func (p *actionProbe) serve(_ http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.have == nil {
		have := map[string]bool{}
		for _, a := range consoleActions {
			req := httptest.NewRequest(http.MethodGet, "/v1/"+a, nil)
			req.Header.Set("Authorization", r.Header.Get("Authorization")) // passed the guard already
			rec := httptest.NewRecorder()
			p.api.ServeHTTP(rec, req)
			have[a] = rec.Code != http.StatusNotFound
		}
		p.have = have
	}
	return ConsoleResponse{Actions: p.have}, nil
}

func (s *Server) funnel(_ http.ResponseWriter, r *http.Request) (any, error) {
	q, err := query(r, "task_type")
	if err != nil {
		return nil, err
	}
	var names []string
	if name := q.Get("task_type"); name != "" {
		if err := flow.ValidateTaskTypeName(name); err != nil {
			return nil, err
		}
		if _, err := s.types.get(r.Context(), name); err != nil {
			return nil, err
		}
		names = []string{name}
	} else {
		tts, err := s.st.ListTypes(r.Context())
		if err != nil {
			return nil, err
		}
		for _, tt := range tts {
			names = append(names, tt.TaskType)
		}
	}
	out := FunnelResponse{Types: []TypeFunnel{}}
	t := now()
	for _, name := range names {
		tf := TypeFunnel{TaskType: name, Stages: []StageCounts{}}
		counts := map[string]map[string]int64{}
		cs, err := s.st.Counts(r.Context(), name)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			if counts[c.TaskStage] == nil {
				counts[c.TaskStage] = map[string]int64{}
			}
			counts[c.TaskStage][c.Status.String()] += c.N
		}
		// The sample is of the type's most common status, and of success
		// (whose logs show the whole path) when a tenth of the type or
		// more succeeded: each database lists a type's tasks of one
		// status in id order from an index (SQLite: the type's, skipping
		// other statuses, so a status that common is found within a few
		// thousand entries), where all statuses at once made MySQL sort
		// the whole type.
		byStatus := map[flow.Status]int64{}
		var total int64
		common := flow.StatusSuccess
		for _, c := range cs {
			byStatus[c.Status] += c.N
			total += c.N
			if byStatus[c.Status] > byStatus[common] {
				common = c.Status
			}
		}
		sample := []flow.Status{common}
		if common != flow.StatusSuccess && byStatus[flow.StatusSuccess] > 0 && byStatus[flow.StatusSuccess]*10 >= total {
			sample = append(sample, flow.StatusSuccess)
		}
		moves := map[[2]string]int{} // stage -> next stage, as logged
		for _, st := range sample {
			recs, err := s.st.ListTasks(r.Context(), store.ListFilter{TaskType: name, Status: st, Limit: funnelSample})
			if err != nil {
				return nil, err
			}
			for _, rec := range recs {
				for i := 1; i < len(rec.ScheduleLog); i++ {
					if a, b := rec.ScheduleLog[i-1].Stage, rec.ScheduleLog[i].Stage; a != b && a != "" && b != "" {
						moves[[2]string{a, b}]++
					}
				}
			}
		}
		for _, stage := range stageOrder(counts, moves) {
			tf.Stages = append(tf.Stages, StageCounts{Stage: stage, Counts: counts[stage]})
		}
		due, ok, err := s.st.NextDue(r.Context(), name)
		if err != nil {
			return nil, err
		}
		if ok && due.Before(t) {
			tf.OldestPendingMS = t.Sub(due).Milliseconds()
		}
		out.Types = append(out.Types, tf)
	}
	return out, nil
}

// maxOrderedStages bounds stageOrder's quadratic work.
const maxOrderedStages = 100

// stageOrder sorts stages so that each comes before the stages its tasks
// were seen moving to: repeatedly the stage with the fewest logged moves
// into it from the stages left (a loop back counts against its target
// only), ties by name.
func stageOrder(counts map[string]map[string]int64, moves map[[2]string]int) []string {
	left := map[string]bool{}
	for stage := range counts {
		left[stage] = true
	}
	for m := range moves { // stages only seen in logs are ordered too, then dropped
		left[m[0]], left[m[1]] = true, true
	}
	var order []string
	if len(left) > maxOrderedStages { // a type with that many stages is not a pipeline; spare the CPU
		for stage := range counts {
			order = append(order, stage)
		}
		slices.Sort(order)
		return order
	}
	for len(left) > 0 {
		best, bestIn := "", -1
		for stage := range left {
			in := 0
			for m, n := range moves {
				if m[1] == stage && left[m[0]] {
					in += n
				}
			}
			if bestIn < 0 || in < bestIn || (in == bestIn && stage < best) {
				best, bestIn = stage, in
			}
		}
		delete(left, best)
		if counts[best] != nil {
			order = append(order, best)
		}
	}
	return order
}
