package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
)

// httpError is an error with the status code to answer.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var he *httpError
	var fe *flow.FieldError
	switch {
	case errors.As(err, &he):
		return he.code
	case errors.As(err, new(*overloadedError)):
		return http.StatusServiceUnavailable
	case errors.As(err, &fe):
		return http.StatusBadRequest
	case errors.Is(err, flow.ErrUnknownType), errors.Is(err, flow.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, flow.ErrStaleLease), errors.Is(err, flow.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

type endpoint struct {
	method string
	fn     func(w http.ResponseWriter, r *http.Request) (any, error)
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	api := map[string]endpoint{
		"/v1/register_task":     {http.MethodPost, s.registerTask},
		"/v1/create_task":       {http.MethodPost, s.createTask},
		"/v1/hold_tasks":        {http.MethodPost, s.holdTasks},
		"/v1/set_task":          {http.MethodPost, s.setTask},
		"/v1/set_tasks":         {http.MethodPost, s.setTasks},
		"/v1/renew_lease":       {http.MethodPost, s.renewLease},
		"/v1/heartbeat":         {http.MethodPost, s.heartbeat},
		"/v1/worker_gone":       {http.MethodPost, s.workerGone},
		"/v1/cancel_task":       {http.MethodPost, s.cancelTask},
		"/v1/retry_task":        {http.MethodPost, s.retryTask},
		"/v1/delete_task":       {http.MethodPost, s.deleteTask},
		"/v1/pause_task_type":   {http.MethodPost, s.pauseTaskType},
		"/v1/resume_task_type":  {http.MethodPost, s.resumeTaskType},
		"/v1/get_task":          {http.MethodGet, s.getTask},
		"/v1/get_task_type":     {http.MethodGet, s.getTaskType},
		"/v1/get_task_list":     {http.MethodGet, s.getTaskList},
		"/v1/get_task_children": {http.MethodGet, s.getTaskChildren},
		"/v1/stats":             {http.MethodGet, s.stats},
		"/v1/rebuild_counts":    {http.MethodPost, s.rebuildCounts},
		"/healthz":              {http.MethodGet, s.health},
	}
	index := []string{"GET /metrics"}
	for path, ep := range api {
		mux.Handle(path, s.handle(path, ep))
		index = append(index, ep.method+" "+path)
	}
	sort.Strings(index)
	mux.Handle("/metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			writeJSON(w, http.StatusOK, map[string]any{"service": "fulcrum flow", "docs": "docs/flow-api.md", "endpoints": index})
			return
		}
		writeJSON(w, http.StatusNotFound, flow.ErrorResponse{Error: "no endpoint " + r.URL.Path + "; GET / lists them"})
	})
	return s.guard(mux)
}

// guard runs before every handler: it checks the token (all but /healthz)
// and starts the clock on reading a request body, so a client that
// trickles one is cut off; handle stops that clock once the body is read.
func (s *Server) guard(next http.Handler) http.Handler {
	want := []byte("Bearer " + s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Token != "" && r.URL.Path != "/healthz" &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fulcrum flow"`)
			writeJSON(w, http.StatusUnauthorized, flow.ErrorResponse{Error: "missing or wrong token (Authorization: Bearer TOKEN)"})
			return
		}
		if r.ContentLength != 0 {
			// Recorders in tests do not support deadlines; nothing to bound there.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.ReadTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

// overloadedError is answered 503 with Retry-After: nothing was done, the
// request may be sent again.
type overloadedError struct{ what string }

func (e *overloadedError) Error() string { return "server busy: " + e.what + "; retry later" }

// admit counts a request in flight, or refuses it past MaxInFlight.
func (s *Server) admit() bool {
	if s.inflight.Add(1) > int64(s.cfg.MaxInFlight) {
		s.inflight.Add(-1)
		return false
	}
	return true
}

// readBody reads a POST body whole under the limits: 413 when it is or
// grows over MaxBodyBytes, 503 when the bodies being read already use
// MaxBodyMemory. release gives the reservation back; call it when the
// decoded request is no longer needed.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), err error) {
	release = func() {}
	n, limit := r.ContentLength, s.cfg.MaxBodyBytes
	if n > limit {
		return nil, release, &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body is %d bytes, over %d bytes", n, limit)}
	}
	reserve := n
	if n < 0 {
		reserve = limit
	}
	if s.bodyMem.Add(reserve) > s.cfg.MaxBodyMemory {
		s.bodyMem.Add(-reserve)
		return nil, release, &overloadedError{what: "request bodies being read are at their memory cap"}
	}
	release = func() { s.bodyMem.Add(-reserve) }
	rd := http.MaxBytesReader(w, r.Body, limit)
	if n >= 0 {
		// A pooled buffer: what a request decodes into is copied out of
		// its body (strings, contexts), so the body is garbage once the
		// request is answered, and release hands it back.
		bp := bodyBufs.Get().(*[]byte)
		if cap(*bp) < int(n) {
			*bp = make([]byte, n)
		}
		body = (*bp)[:n]
		release = func() {
			s.bodyMem.Add(-reserve)
			if cap(*bp) <= 1<<20 { // keep buffers of the usual size, not the largest ever
				bodyBufs.Put(bp)
			}
		}
		_, err = io.ReadFull(rd, body)
	} else {
		body, err = io.ReadAll(rd)
	}
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case err == nil:
		// The body is in: a hold may now wait as long as it asked. (On
		// an error the deadline stays, and bounds the server's discarding
		// of what is left of the body.)
		_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		return body, release, nil
	case errors.As(err, &mbe):
		return nil, release, &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body is over %d bytes", mbe.Limit)}
	case errors.As(err, &ne) && ne.Timeout():
		return nil, release, &httpError{code: http.StatusRequestTimeout, msg: fmt.Sprintf("body not received within %v", s.cfg.ReadTimeout)}
	}
	return nil, release, badRequest("reading the body: %v", err)
}

// bodyBufs are readBody's buffers.
var bodyBufs = sync.Pool{New: func() any { return new([]byte) }}

// memBody is a request body read whole (readBody), kept as bytes for
// decodePlain.
type memBody struct {
	*bytes.Reader
	b []byte
}

func (*memBody) Close() error { return nil }

// handle wraps an endpoint: method check, JSON answer, error mapping,
// metrics.
func (s *Server) handle(path string, ep endpoint) http.Handler {
	name := strings.TrimPrefix(path, "/v1/")
	s.m.endpoint(name)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		code := http.StatusOK
		defer func() {
			s.m.requests.WithLabelValues(name, strconv.Itoa(code)).Inc()
			s.m.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
		}()
		if r.Method != ep.method {
			w.Header().Set("Allow", ep.method)
			code = http.StatusMethodNotAllowed
			writeJSON(w, code, flow.ErrorResponse{Error: fmt.Sprintf("%s %s: use %s", r.Method, path, ep.method)})
			return
		}
		fail := func(err error) {
			code = statusOf(err)
			if code == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			if code >= 500 && code != http.StatusServiceUnavailable {
				s.log.Error("flow server: request failed", "endpoint", path, "err", err)
			}
			writeJSON(w, code, flow.ErrorResponse{Error: err.Error()})
		}
		if path != "/healthz" {
			if !s.admit() {
				fail(&overloadedError{what: fmt.Sprintf("%d requests in flight", s.cfg.MaxInFlight)})
				return
			}
			defer s.inflight.Add(-1)
		}
		if ep.method == http.MethodPost {
			body, release, err := s.readBody(w, r)
			defer release()
			if err != nil {
				fail(err)
				return
			}
			r.Body = &memBody{Reader: bytes.NewReader(body), b: body}
		}
		out, err := ep.fn(w, r)
		if err != nil {
			code = statusOf(err)
			if code == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			if code >= 500 {
				s.log.Error("flow server: request failed", "endpoint", path, "err", err)
			}
			writeJSON(w, code, flow.ErrorResponse{Error: err.Error()})
			return
		}
		writeJSON(w, code, out)
	})
}

// holdBufs are hold answers' buffers, reused between requests.
var holdBufs = sync.Pool{New: func() any { return new([]byte) }}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	// The hot answers, written without reflection (holdjson.go).
	var b []byte
	ok := false
	switch a := v.(type) {
	case heldAnswer:
		bp := holdBufs.Get().(*[]byte)
		defer holdBufs.Put(bp)
		// A buffer of about the answer's size at once: grown by doubling
		// from what a garbage collection left in the pool (often nothing),
		// a 500-task answer cost twice its size in garbage.
		if n := 512 * len(a); cap(*bp) < n {
			*bp = make([]byte, 0, n)
		}
		b, ok = appendHeldJSON((*bp)[:0], a)
		if cap(b) <= 1<<20 { // keep a buffer of usual size, not the largest ever
			*bp = b
		}
		if !ok {
			v = a.response()
		}
	case flow.SetTasksResponse:
		b, ok = appendSetAnswer(make([]byte, 0, 32+40*len(a.Results)), a), true
	case flow.CreateTaskResponse:
		b, ok = appendCreateAnswer(make([]byte, 0, 32+29*len(a.TaskIDs)), a), true
	}
	if ok {
		// With its length, the answer goes out unchunked and the client
		// reads it into one buffer of that size.
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(code)
		w.Write(b) // the client may have gone; nothing to do then
		return
	}
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v) // the client may have gone; nothing to do then
}

// decode reads one JSON object into v. Unknown fields are refused so that
// a misspelt field is an error, not a silent default.
func decode(r *http.Request, v any) error {
	if b, ok := r.Body.(*memBody); ok && decodePlain(b.b, v) {
		return nil
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return decodeError(err)
		}
		return badRequest("bad JSON: data after the JSON object")
	}
	return nil
}

func decodeError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &httpError{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("body is over %d bytes", mbe.Limit)}
	case errors.Is(err, io.EOF):
		return badRequest("bad JSON: empty body, want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("bad JSON: body ends inside the JSON object")
	case errors.As(err, &se):
		return badRequest("bad JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field == "" {
			return badRequest("bad JSON: want an object, got %s", te.Value)
		}
		return badRequest("%s: want %s, got %s", te.Field, te.Type, te.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return badRequest("bad JSON: %v", err)
}

func (s *Server) registerTask(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.TaskType
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	tt, err := flow.NormalizeTaskType(req)
	if err != nil {
		return nil, err
	}
	if err := s.st.RegisterType(r.Context(), tt, s.cfg.Clock().UTC().Truncate(time.Microsecond)); err != nil {
		return nil, err
	}
	s.types.put(tt)
	s.m.taskType(tt.TaskType)
	return tt, nil
}

func (s *Server) createTask(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.CreateTaskRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	tasks, prefix := req.Tasks, "tasks[%d]."
	single := req.NewTask.TaskType != "" || req.NewTask.TaskStage != "" || req.NewTask.TaskContext != nil || req.NewTask.Priority != 0 ||
		req.NewTask.DelayMS != 0 || req.NewTask.UniqueKey != "" || req.NewTask.SequenceKey != "" || req.NewTask.RateKey != "" || req.NewTask.FairnessKey != ""
	switch {
	case single && len(tasks) > 0:
		return nil, badRequest("tasks: give one task inline or a batch in tasks, not both")
	case single:
		tasks, prefix = []flow.NewTask{req.NewTask}, ""
	case req.Tasks == nil:
		return nil, &flow.FieldError{Field: "task_type", Msg: "required"}
	case len(tasks) == 0:
		return nil, badRequest("tasks: empty batch")
	case len(tasks) > flow.MaxBatch:
		return nil, badRequest("tasks: %d tasks, at most %d in one request", len(tasks), flow.MaxBatch)
	}
	t := now()
	ids := flow.NewTaskIDs(t, len(tasks))
	recs := make([]flow.Record, len(tasks))
	for i := range tasks {
		if err := flow.ValidateNewTask("", &tasks[i]); err != nil {
			if prefix != "" { // the field's path only on the way out: a Sprintf per task cost more than the check
				err = flow.ValidateNewTask(fmt.Sprintf(prefix, i), &tasks[i])
			}
			return nil, err
		}
		tt, err := s.types.get(r.Context(), tasks[i].TaskType)
		if err != nil {
			return nil, err
		}
		recs[i] = flow.NewRecord(ids[i], tasks[i], tt, t)
	}
	if err := s.st.CreateTasks(r.Context(), recs); err != nil {
		return nil, err
	}
	out := flow.CreateTaskResponse{TaskIDs: ids}
	for i, rec := range recs {
		ids[i] = rec.TaskID // an existing task's, for a unique key already live
		if rec.Existing {
			out.Existing = prefix == ""
			if prefix != "" {
				out.ExistingIndex = append(out.ExistingIndex, i)
			}
			continue
		}
		s.m.created.WithLabelValues(rec.TaskType).Inc()
	}
	return out, nil
}

func (s *Server) holdTasks(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.HoldTasksRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := flow.ValidateTaskTypeName(req.TaskType); err != nil {
		return nil, err
	}
	if err := flow.ValidateWorkerID(req.WorkerID); err != nil {
		return nil, err
	}
	if req.Limit < 0 {
		return nil, &flow.FieldError{Field: "limit", Msg: fmt.Sprintf("%d is negative", req.Limit)}
	}
	if req.WaitMS < 0 {
		return nil, &flow.FieldError{Field: "wait_ms", Msg: fmt.Sprintf("%d is negative", req.WaitMS)}
	}
	ctx := r.Context()
	tt, err := s.types.get(ctx, req.TaskType)
	if err != nil {
		return nil, err
	}
	limit := req.Limit
	if limit == 0 || limit > tt.ScheduleLimit {
		limit = tt.ScheduleLimit
	}
	wait := min(time.Duration(req.WaitMS)*time.Millisecond, s.cfg.MaxWait)
	deadline := time.Now().Add(wait)
	for {
		woken := s.wake.wait(req.TaskType)                        // before the claim: a signal during it is not lost
		if tt, err = s.types.get(ctx, req.TaskType); err != nil { // cached: sees a pause within TypeCacheTTL
			return nil, err
		}
		if tt.Paused {
			// Nothing is handed out (the claim checks the pause too);
			// wait for a resume here or a look at the type again.
			if !s.waitPaused(ctx, woken, deadline) {
				return heldAnswer{}, nil
			}
			continue
		}
		t := now()
		recs, err := s.st.Hold(ctx, store.HoldParams{TaskType: req.TaskType, WorkerID: req.WorkerID, Limit: limit,
			Lease: flow.NewLease(), Now: t, LeaseExpiry: t.Add(time.Duration(tt.MaxProcessingMS) * time.Millisecond), OmitLog: req.OmitScheduleLog,
			Fair: tt.Fair, FairnessWeights: tt.FairnessWeights})
		if err != nil {
			return nil, err
		}
		left := time.Until(deadline)
		if len(recs) > 0 || left <= 0 {
			s.m.held.WithLabelValues(req.TaskType).Add(float64(len(recs)))
			if len(recs) > 0 {
				wait := s.m.wait.WithLabelValues(req.TaskType)
				for i := range recs {
					wait.Observe(max(t.Sub(recs[i].OrderTime), 0).Seconds())
				}
			}
			return heldAnswer(recs), nil
		}
		// Nothing due: sleep until a signal, the next delayed task's
		// order_time, the poll interval or the deadline, whichever is first.
		sleep := min(left, s.cfg.PollInterval)
		if next, ok, err := s.st.NextDue(ctx, req.TaskType); err != nil {
			return nil, err
		} else if ok {
			// A due task we did not get is being claimed by another hold;
			// look again shortly.
			sleep = min(sleep, max(time.Until(next), 5*time.Millisecond))
		}
		timer := time.NewTimer(sleep)
		select {
		case <-woken:
		case <-timer.C:
		case <-s.stop:
			deadline = time.Now() // answer now with what there is (nothing)
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		}
		timer.Stop()
	}
}

// waitPaused sleeps a hold of a paused type until a signal, the poll
// interval or the deadline; false when the hold should answer now.
func (s *Server) waitPaused(ctx context.Context, woken <-chan struct{}, deadline time.Time) bool {
	left := time.Until(deadline)
	if left <= 0 {
		return false
	}
	timer := time.NewTimer(min(left, s.cfg.PollInterval))
	defer timer.Stop()
	select {
	case <-woken:
	case <-timer.C:
	case <-s.stop:
		return false
	case <-ctx.Done():
		return false
	}
	return true
}

func (s *Server) setTask(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.SetTaskRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := flow.ValidateSet("", &req); err != nil {
		s.m.set.WithLabelValues("invalid").Inc()
		return nil, err
	}
	if err := s.buildChildren(r.Context(), "", &req); err != nil {
		s.m.set.WithLabelValues("invalid").Inc()
		return nil, err
	}
	errs, err := s.st.SetTasks(r.Context(), []flow.SetTaskRequest{req}, now())
	if err != nil {
		return nil, err
	}
	s.countSet(errs[0])
	if errs[0] != nil {
		return nil, errs[0]
	}
	return flow.SetResult{TaskID: req.TaskID, Code: http.StatusOK}, nil
}

// buildChildren makes the records of a fan-out's children (ids, each
// type's retry policy); an unregistered type is a 400 naming the child.
func (s *Server) buildChildren(ctx context.Context, prefix string, req *flow.SetTaskRequest) error {
	if len(req.Children) == 0 {
		return nil
	}
	t := now()
	ids := flow.NewTaskIDs(t, len(req.Children))
	req.ChildRecords = make([]flow.Record, len(req.Children))
	for i, c := range req.Children {
		tt, err := s.types.get(ctx, c.TaskType)
		if errors.Is(err, flow.ErrUnknownType) {
			return &flow.FieldError{Field: fmt.Sprintf("%schildren[%d].task_type", prefix, i), Msg: fmt.Sprintf("%q is not registered", c.TaskType)}
		}
		if err != nil {
			return err
		}
		req.ChildRecords[i] = flow.NewRecord(ids[i], c, tt, t)
	}
	return nil
}

func (s *Server) countSet(err error) {
	switch {
	case err == nil:
		s.m.set.WithLabelValues("ok").Inc()
	case errors.Is(err, flow.ErrStaleLease):
		s.m.set.WithLabelValues("stale").Inc()
	case errors.Is(err, flow.ErrNotFound):
		s.m.set.WithLabelValues("not_found").Inc()
	}
}

// setTasks applies a batch in one transaction. Each element gets its own
// result; an invalid or refused element changes nothing, the others apply.
func (s *Server) setTasks(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.SetTasksRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if len(req.Tasks) == 0 {
		return nil, badRequest("tasks: empty batch")
	}
	if len(req.Tasks) > flow.MaxBatch {
		return nil, badRequest("tasks: %d tasks, at most %d in one request", len(req.Tasks), flow.MaxBatch)
	}
	out := flow.SetTasksResponse{Results: make([]flow.SetResult, len(req.Tasks))}
	// valid is the batch itself while every element is (the usual case);
	// from the first invalid one on, a copy of the valid ones, with at
	// mapping its positions back to the request's.
	valid := req.Tasks
	var at []int
	for i := range req.Tasks {
		out.Results[i].TaskID = req.Tasks[i].TaskID
		err := flow.ValidateSet("", &req.Tasks[i])
		if err != nil {
			err = flow.ValidateSet(fmt.Sprintf("tasks[%d].", i), &req.Tasks[i]) // the path only on the way out
		} else if req.Tasks[i].Children != nil {
			err = s.buildChildren(r.Context(), fmt.Sprintf("tasks[%d].", i), &req.Tasks[i])
		}
		if err != nil {
			s.m.set.WithLabelValues("invalid").Inc()
			out.Results[i].Code, out.Results[i].Error = http.StatusBadRequest, err.Error()
			if at == nil {
				valid, at = slices.Clone(req.Tasks[:i]), make([]int, i)
				for k := range at {
					at[k] = k
				}
			}
			continue
		}
		if at != nil {
			valid, at = append(valid, req.Tasks[i]), append(at, i)
		}
	}
	if len(valid) > 0 {
		errs, err := s.st.SetTasks(r.Context(), valid, now())
		if err != nil {
			return nil, err
		}
		for k, e := range errs {
			s.countSet(e)
			i := k
			if at != nil {
				i = at[k]
			}
			res := &out.Results[i]
			res.Code = http.StatusOK
			if e != nil {
				res.Code, res.Error = statusOf(e), e.Error()
			}
		}
	}
	return out, nil
}

func (s *Server) renewLease(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.RenewLeaseRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := flow.ValidateTaskID("task_id", req.TaskID); err != nil {
		return nil, err
	}
	if req.Lease == "" {
		return nil, &flow.FieldError{Field: "lease", Msg: "required"}
	}
	if req.ExtendMS < 0 || req.ExtendMS > (7*24*time.Hour).Milliseconds() {
		return nil, &flow.FieldError{Field: "extend_ms", Msg: fmt.Sprintf("%d is outside 0 to 7 days", req.ExtendMS)}
	}
	ctx := r.Context()
	ext := time.Duration(req.ExtendMS) * time.Millisecond
	if ext == 0 {
		rec, err := s.st.GetTask(ctx, req.TaskID)
		if err != nil {
			return nil, err
		}
		tt, err := s.types.get(ctx, rec.TaskType)
		if err != nil {
			return nil, err
		}
		ext = time.Duration(tt.MaxProcessingMS) * time.Millisecond
	}
	exp := now().Add(ext)
	if err := s.st.RenewLease(ctx, req.TaskID, req.Lease, exp); err != nil {
		return nil, err
	}
	return flow.RenewLeaseResponse{LeaseExpiry: exp}, nil
}

func (s *Server) heartbeat(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.HeartbeatRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := flow.ValidateWorkerID(req.WorkerID); err != nil {
		return nil, err
	}
	leases, err := s.st.Heartbeat(r.Context(), req.WorkerID, now())
	if err != nil {
		return nil, err
	}
	return flow.HeartbeatResponse{Tasks: leases}, nil
}

func (s *Server) workerGone(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.WorkerGoneRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := flow.ValidateWorkerID(req.WorkerID); err != nil {
		return nil, err
	}
	n, err := s.st.RescueWorker(r.Context(), req.WorkerID, now())
	if err != nil {
		return nil, err
	}
	s.m.rescued.Add(float64(n))
	return flow.WorkerGoneResponse{Rescued: n}, nil
}

func (s *Server) cancelTask(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.CancelTaskRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := flow.ValidateTaskID("task_id", req.TaskID); err != nil {
		return nil, err
	}
	if err := s.st.CancelTask(r.Context(), req.TaskID, now()); err != nil {
		return nil, err
	}
	rec, err := s.st.GetTask(r.Context(), req.TaskID)
	if err != nil {
		return nil, err
	}
	return view(rec), nil
}

func (s *Server) retryTask(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.RetryTaskRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := flow.ValidateTaskID("task_id", req.TaskID); err != nil {
		return nil, err
	}
	if err := flow.ValidateStage("task_stage", req.TaskStage); err != nil {
		return nil, err
	}
	c, err := flow.ValidateContext("task_context", req.TaskContext)
	if err != nil {
		return nil, err
	}
	rec, err := s.st.RetryTask(r.Context(), req.TaskID, req.TaskStage, c, now())
	if err != nil {
		return nil, err
	}
	return view(rec), nil
}

func (s *Server) deleteTask(_ http.ResponseWriter, r *http.Request) (any, error) {
	var req flow.DeleteTaskRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := flow.ValidateTaskID("task_id", req.TaskID); err != nil {
		return nil, err
	}
	if err := s.st.DeleteTask(r.Context(), req.TaskID); err != nil {
		return nil, err
	}
	return map[string]string{"task_id": req.TaskID, "status": "deleted"}, nil
}

func (s *Server) pauseTaskType(_ http.ResponseWriter, r *http.Request) (any, error) {
	return s.setPaused(r, true)
}

func (s *Server) resumeTaskType(_ http.ResponseWriter, r *http.Request) (any, error) {
	return s.setPaused(r, false)
}

// setPaused answers the type's config as it now is.
func (s *Server) setPaused(r *http.Request, paused bool) (any, error) {
	var req flow.TaskTypeRequest
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := flow.ValidateTaskTypeName(req.TaskType); err != nil {
		return nil, err
	}
	if err := s.st.SetPaused(r.Context(), req.TaskType, paused, now()); err != nil {
		return nil, err
	}
	tt, err := s.st.GetType(r.Context(), req.TaskType)
	if err != nil {
		return nil, err
	}
	s.types.put(tt)
	s.m.taskType(tt.TaskType)
	return tt, nil
}

// view is a task as get_task shows it: the lease token is only ever given
// to the holder, in the hold_tasks answer.
func view(r flow.Record) flow.Task {
	t := r.Task
	t.Lease = ""
	return t
}

// query checks that a GET has only the parameters named.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q := r.URL.Query()
	for k, v := range q {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			return nil, badRequest("unknown parameter %q (known: %s)", k, strings.Join(allowed, ", "))
		}
		if len(v) > 1 {
			return nil, badRequest("parameter %s given %d times", k, len(v))
		}
	}
	return q, nil
}

func (s *Server) getTask(_ http.ResponseWriter, r *http.Request) (any, error) {
	q, err := query(r, "task_id")
	if err != nil {
		return nil, err
	}
	id := q.Get("task_id")
	if err := flow.ValidateTaskID("task_id", id); err != nil {
		return nil, err
	}
	rec, err := s.st.GetTask(r.Context(), id)
	if err != nil {
		return nil, err
	}
	t := view(rec)
	if t.Children, err = s.st.ChildCounts(r.Context(), id); err != nil {
		return nil, err
	}
	return t, nil
}

// getTaskChildren lists a fan-out parent's children for its join stage:
// each one's status, context and error.
func (s *Server) getTaskChildren(_ http.ResponseWriter, r *http.Request) (any, error) {
	q, err := query(r, "task_id", "limit", "cursor")
	if err != nil {
		return nil, err
	}
	id, after := q.Get("task_id"), q.Get("cursor")
	if err := flow.ValidateTaskID("task_id", id); err != nil {
		return nil, err
	}
	if after != "" {
		if err := flow.ValidateTaskID("cursor", after); err != nil {
			return nil, err
		}
	}
	limit := flow.MaxBatch // one fan-out's children in one page
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			return nil, &flow.FieldError{Field: "limit", Msg: fmt.Sprintf("%q is not a number", v)}
		case n < 0 || n > flow.MaxBatch:
			return nil, &flow.FieldError{Field: "limit", Msg: fmt.Sprintf("%d is outside 0 to %d", n, flow.MaxBatch)}
		case n > 0:
			limit = n
		}
	}
	if _, err := s.st.GetTask(r.Context(), id); err != nil {
		return nil, err // 404 for no such parent, rather than an empty list
	}
	recs, err := s.st.TaskChildren(r.Context(), id, after, limit)
	if err != nil {
		return nil, err
	}
	out := flow.TaskChildrenResponse{Children: make([]flow.TaskChild, len(recs))}
	for i := range recs {
		out.Children[i] = flow.ChildOf(recs[i])
	}
	if len(recs) == limit {
		out.NextCursor = recs[len(recs)-1].TaskID
	}
	return out, nil
}

// getTaskType answers a type's config, so a worker that did not register
// the type itself can learn its schedule_interval and lease length.
func (s *Server) getTaskType(_ http.ResponseWriter, r *http.Request) (any, error) {
	q, err := query(r, "task_type")
	if err != nil {
		return nil, err
	}
	name := q.Get("task_type")
	if err := flow.ValidateTaskTypeName(name); err != nil {
		return nil, err
	}
	tt, err := s.st.GetType(r.Context(), name)
	if err != nil {
		return nil, err
	}
	// The paused rate keys, from the database: a pause made through any
	// server shows on every one.
	if tt.PausedKeys, err = s.st.PausedKeys(r.Context(), name, now(), maxPausedKeys); err != nil {
		return nil, err
	}
	return tt, nil
}

// maxPausedKeys is how many paused keys get_task_type lists.
const maxPausedKeys = 1000

// List page sizes.
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

func (s *Server) getTaskList(_ http.ResponseWriter, r *http.Request) (any, error) {
	q, err := query(r, "task_type", "status", "task_stage", "limit", "cursor")
	if err != nil {
		return nil, err
	}
	f := store.ListFilter{TaskType: q.Get("task_type"), TaskStage: q.Get("task_stage"), After: q.Get("cursor"), Limit: defaultListLimit}
	if f.TaskType != "" {
		if err := flow.ValidateTaskTypeName(f.TaskType); err != nil {
			return nil, err
		}
	}
	if v := q.Get("status"); v != "" {
		st, err := flow.ParseStatus(v)
		if err != nil {
			return nil, &flow.FieldError{Field: "status", Msg: err.Error()}
		}
		f.Status = st
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			return nil, &flow.FieldError{Field: "limit", Msg: fmt.Sprintf("%q is not a number", v)}
		case n < 0:
			return nil, &flow.FieldError{Field: "limit", Msg: fmt.Sprintf("%d is negative", n)}
		case n > maxListLimit:
			return nil, &flow.FieldError{Field: "limit", Msg: fmt.Sprintf("%d is over %d", n, maxListLimit)}
		case n > 0:
			f.Limit = n
		}
	}
	if f.After != "" {
		if err := flow.ValidateTaskID("cursor", f.After); err != nil {
			return nil, err
		}
	}
	recs, err := s.st.ListTasks(r.Context(), f)
	if err != nil {
		return nil, err
	}
	out := flow.TaskListResponse{Tasks: make([]flow.Task, len(recs))}
	for i := range recs {
		out.Tasks[i] = view(recs[i])
	}
	if len(recs) == f.Limit {
		out.NextCursor = recs[len(recs)-1].TaskID
	}
	return out, nil
}

func (s *Server) stats(_ http.ResponseWriter, r *http.Request) (any, error) {
	if _, err := query(r); err != nil {
		return nil, err
	}
	st, err := s.st.Stats(r.Context())
	if err != nil {
		return nil, err
	}
	if st == nil {
		st = []flow.TypeStats{}
	}
	return flow.StatsResponse{Types: st}, nil
}

// rebuildCounts recounts the task counts behind stats, the funnel and the
// metrics from the tasks table (Store.RebuildCounts), without stopping
// writers, and answers stats as they now are. The body is {}.
func (s *Server) rebuildCounts(w http.ResponseWriter, r *http.Request) (any, error) {
	var req struct{}
	if err := decode(r, &req); err != nil {
		return nil, err
	}
	if err := s.st.RebuildCounts(r.Context()); err != nil {
		return nil, err
	}
	return s.stats(w, r)
}

func (s *Server) health(_ http.ResponseWriter, r *http.Request) (any, error) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if _, err := s.st.ListTypes(ctx); err != nil {
		return nil, &httpError{code: http.StatusServiceUnavailable, msg: "database: " + err.Error()}
	}
	return map[string]string{"status": "ok"}, nil
}
