package supervisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fulcrum-lb/fulcrum/supervisor/lease"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
	"github.com/fulcrum-lb/fulcrum/supervisor/source"
)

const maxAdminBody = 64 << 20

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+WorkerPath, s.handleWS)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	admin := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(r) {
				s.m.rejected.WithLabelValues("unauthorized").Inc()
				unauthorized(w)
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /workers", admin(s.getWorkers))
	mux.HandleFunc("GET /tasks", admin(s.getTasks))
	mux.HandleFunc("POST /tasks", admin(s.postTasks))
	mux.HandleFunc("POST /rebalance", admin(s.postRebalance))
	mux.HandleFunc("GET /status", admin(s.getStatus))
	mux.HandleFunc("POST /workers/{id}/drain", admin(s.postDrain))
	mux.Handle("GET /metrics", admin(promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}).ServeHTTP))
	mux.HandleFunc("GET /{$}", admin(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"service": "fulcrum supervisor", "endpoints": endpoints})
	}))
	return mux
}

// endpoints is the index GET / answers with (docs/supervisor.md#admin-api).
var endpoints = []string{
	"GET /ws         worker endpoint (WebSocket, docs/supervisor-protocol.md)",
	"GET /healthz    liveness, no token",
	"GET /status     phase, role, workers, deficit, sink counters",
	"GET /workers    live workers, loads",
	"GET /tasks      who holds what (?deficit=true: only tasks short of holders)",
	"POST /tasks     add and remove tasks: {\"add\": [...], \"remove\": [...]}",
	"POST /rebalance move the fewest holdings to even loads (?threshold=0.1)",
	"POST /workers/{id}/drain  planned stop: place its tasks elsewhere first, end them there once the new holders run",
	"GET /metrics    Prometheus metrics",
}

// Status is GET /status: what `fulcrum supervisor status` prints.
type Status struct {
	Phase      string       `json:"phase"`
	Role       string       `json:"role"`             // alone, leader or standby
	Term       uint64       `json:"term,omitempty"`   // leadership term (high availability)
	Leader     string       `json:"leader,omitempty"` // the leader's worker URL, as far as known
	Redundancy int          `json:"redundancy"`
	Tasks      int          `json:"tasks"`
	Deficit    DeficitView  `json:"deficit"`
	Workers    []WorkerView `json:"workers"`
	Sink       SinkView     `json:"sink"`
}

// DeficitView counts tasks short of holders and the holdings missing.
type DeficitView struct {
	Tasks   int `json:"tasks"`
	Holders int `json:"holders"`
}

// SinkView is the sink's counters.
type SinkView struct {
	Type      string `json:"type"`
	Offered   uint64 `json:"offered"`   // payloads handed to it (first of their key)
	Published uint64 `json:"published"` // confirmed by the destination
	Dropped   uint64 `json:"dropped"`   // never to be delivered
	Pending   int    `json:"pending"`   // waiting in its buffer
}

func (s *Server) getStatus(w http.ResponseWriter, r *http.Request) {
	out, err := call(r.Context(), s, func(time.Time) Status {
		e := s.core.Engine()
		ws := e.Workers()
		vs := make([]WorkerView, len(ws))
		for i, wi := range ws {
			vs[i] = WorkerView{WorkerInfo: wi, Connected: s.conns[wi.ID] != nil}
		}
		_, tasks, d, missing := e.Counts()
		st := Status{Phase: s.core.Phase().String(), Role: "alone", Redundancy: e.K(), Tasks: tasks,
			Deficit: DeficitView{d, missing}, Workers: vs}
		s.roleStatus(&st)
		return st
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	out.Sink = SinkView{Type: s.cfg.Sink.Type, Offered: s.offered.Load(), Published: s.sink.Published(),
		Dropped: s.sink.Dropped(), Pending: s.sink.Pending()}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]string{"error": fmt.Sprintf(format, args...)})
}

// WorkerView is one worker in GET /workers.
type WorkerView struct {
	WorkerInfo
	Connected bool `json:"connected"`
}

func (s *Server) getWorkers(w http.ResponseWriter, r *http.Request) {
	type resp struct {
		Phase   string       `json:"phase"`
		Workers []WorkerView `json:"workers"`
	}
	out, err := call(r.Context(), s, func(time.Time) resp {
		ws := s.core.Engine().Workers()
		vs := make([]WorkerView, len(ws))
		for i, wi := range ws {
			vs[i] = WorkerView{WorkerInfo: wi, Connected: s.conns[wi.ID] != nil}
		}
		return resp{s.core.Phase().String(), vs}
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTasks(w http.ResponseWriter, r *http.Request) {
	onlyDeficit := false
	if v := r.URL.Query().Get("deficit"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, "deficit: %q is not a boolean", v)
			return
		}
		onlyDeficit = b
	}
	type deficit struct {
		Tasks   int `json:"tasks"`
		Holders int `json:"holders"`
	}
	type resp struct {
		Phase      string     `json:"phase"`
		Redundancy int        `json:"redundancy"`
		Deficit    deficit    `json:"deficit"`
		Tasks      []TaskInfo `json:"tasks"`
	}
	// The event loop only copies; the sorting happens here, so a large
	// listing holds up reports and timeouts as little as it can.
	out, err := call(r.Context(), s, func(time.Time) resp {
		e := s.core.Engine()
		_, _, d, missing := e.Counts()
		return resp{s.core.Phase().String(), e.K(), deficit{d, missing}, e.TasksUnsorted(onlyDeficit)}
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	SortTasks(out.Tasks)
	writeJSON(w, http.StatusOK, out)
}

// TasksRequest is the body of POST /tasks.
type TasksRequest struct {
	Add    json.RawMessage `json:"add,omitempty"`    // tasks, as a source lists them
	Remove []string        `json:"remove,omitempty"` // task ids
}

func (s *Server) postTasks(w http.ResponseWriter, r *http.Request) {
	var req TasksRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "body: %v", err)
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "body: more than one JSON value")
		return
	}
	var add []protocol.Task
	if len(req.Add) > 0 {
		var err error
		if add, err = source.Parse(req.Add); err != nil {
			writeError(w, http.StatusBadRequest, "add: %v", err)
			return
		}
	}
	adding := map[string]bool{}
	for _, t := range add {
		adding[t.TaskID] = true
	}
	for i, id := range req.Remove {
		if err := checkID(fmt.Sprintf("remove[%d]", i), id); err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		if adding[id] {
			writeError(w, http.StatusBadRequest, "remove[%d]: %q is also in add", i, id)
			return
		}
	}
	if len(add) == 0 && len(req.Remove) == 0 {
		writeError(w, http.StatusBadRequest, "body: nothing to add or remove")
		return
	}
	// High availability: stored first (only while this process holds the
	// lease), so the change outlives it; then applied.
	term := s.el.Term()
	if !s.el.Leads(term) {
		s.standbyAnswer(w)
		return
	}
	if s.ha != nil {
		if err := s.ha.SaveTasks(r.Context(), term, add, req.Remove); err != nil {
			if errors.Is(err, lease.ErrNotLeader) {
				s.standbyAnswer(w)
				return
			}
			writeError(w, http.StatusServiceUnavailable, "not stored in the database, nothing changed: %v", err)
			return
		}
	}
	type resp struct {
		Phase   string `json:"phase"`
		Queued  bool   `json:"queued,omitempty"` // while warming up
		Added   int    `json:"added"`            // new tasks
		Removed int    `json:"removed"`          // tasks that existed
		Tasks   int    `json:"tasks"`
	}
	out, err := call(r.Context(), s, func(now time.Time) *resp {
		if !s.actsFor(term) {
			// Stored under term, which is over: the next leader applies
			// it at the end of its warm-up; this process must not.
			return nil
		}
		e := s.core.Engine()
		var res resp
		if s.core.Phase() == Warming {
			res.Queued = true
		}
		for _, t := range add {
			if !e.HasTask(t.TaskID) {
				res.Added++
			}
		}
		for _, id := range req.Remove {
			if e.HasTask(id) {
				res.Removed++
			}
		}
		s.core.AdminTasks(add, req.Remove)
		s.settle(now)
		res.Phase, res.Tasks = s.core.Phase().String(), len(e.tasks)
		return &res
	})
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	if out == nil {
		s.standbyAnswer(w)
		return
	}
	code := http.StatusOK
	if out.Queued {
		code = http.StatusAccepted
	}
	writeJSON(w, code, out)
}

func (s *Server) postDrain(w http.ResponseWriter, r *http.Request) {
	term := s.el.Term()
	if !s.el.Leads(term) {
		s.standbyAnswer(w)
		return
	}
	id := r.PathValue("id")
	if err := checkID("worker id", id); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	type resp struct {
		Worker    string `json:"worker"`
		Draining  bool   `json:"draining"`
		Load      int    `json:"load"` // tasks it still holds; 0: drained
		notLeader bool
	}
	out, err := call(r.Context(), s, func(now time.Time) *resp {
		if !s.actsFor(term) {
			return &resp{notLeader: true}
		}
		if s.core.Phase() == Warming {
			return &resp{}
		}
		if !s.core.Drain(id) {
			return nil
		}
		s.settle(now)
		load := 0
		for _, wi := range s.core.Engine().Workers() {
			if wi.ID == id {
				load = wi.Load
			}
		}
		return &resp{Worker: id, Draining: true, Load: load}
	})
	switch {
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "%v", err)
	case out != nil && out.notLeader:
		s.standbyAnswer(w)
	case out == nil:
		writeError(w, http.StatusNotFound, "worker %q: not a live worker", id)
	case !out.Draining:
		writeError(w, http.StatusConflict, "warming up: nothing is assigned yet")
	default:
		writeJSON(w, http.StatusOK, out)
	}
}

// actsFor reports, on the event loop, whether an admin call accepted under
// term may act now: the loop's lifecycle is term's and the lease is still
// trusted. A call queued while the leader was stopped (SIGSTOP, a stalled
// loop) and taken after its lease ran out is refused, though it was
// accepted while leading.
func (s *Server) actsFor(term uint64) bool {
	return s.leading == term && s.el.Leads(term)
}

func (s *Server) postRebalance(w http.ResponseWriter, r *http.Request) {
	th := s.cfg.Rebalance.Threshold
	term := s.el.Term()
	if !s.el.Leads(term) {
		s.standbyAnswer(w)
		return
	}
	if v := r.URL.Query().Get("threshold"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 1) {
			writeError(w, http.StatusBadRequest, "threshold: %q is not a number between 0 and 1", v)
			return
		}
		th = f
	}
	if _, err := io.Copy(io.Discard, io.LimitReader(r.Body, 1<<10)); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "body: %v", err)
		return
	}
	type resp struct {
		Moved     int     `json:"moved"`
		Threshold float64 `json:"threshold"`
		notLeader bool
	}
	out, err := call(r.Context(), s, func(now time.Time) *resp {
		if !s.actsFor(term) {
			return &resp{notLeader: true}
		}
		if s.core.Phase() == Warming {
			return nil
		}
		n := s.core.Rebalance(th)
		s.settle(now)
		return &resp{Moved: n, Threshold: th}
	})
	switch {
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "%v", err)
	case out != nil && out.notLeader:
		s.standbyAnswer(w)
	case out == nil:
		writeError(w, http.StatusConflict, "warming up: nothing is assigned yet")
	default:
		writeJSON(w, http.StatusOK, out)
	}
}
