package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fulcrum-lb/fulcrum/balance"
	_ "github.com/fulcrum-lb/fulcrum/balance/capacity" // Options.Strategy may name "capacity"
	"github.com/fulcrum-lb/fulcrum/flow"
)

// Options tune a Client. The zero value is usable.
type Options struct {
	// HTTPClient sends the requests. Default: a client with a keep-alive
	// transport sized for many concurrent calls per server and no overall
	// timeout (each call is bounded by Timeout and its context).
	HTTPClient *http.Client
	// Timeout bounds one attempt of a call, on top of the wait of a
	// long-polling hold. Default 30s; negative means none.
	Timeout time.Duration
	// Strategy is the balance strategy (package balance) that picks a
	// server per call when there are several. Default "round_robin".
	Strategy string
	// ProbeInterval is how often an unhealthy server is probed to let it
	// back in. Default 2s.
	ProbeInterval time.Duration
	// Logger receives health changes. Default slog.Default().
	Logger *slog.Logger
	// Token is sent as "Authorization: Bearer TOKEN" (servers started with
	// --token require it).
	Token string
}

// Client calls one or more flow servers. It is safe for concurrent use.
type Client struct {
	servers []string // base URLs, no trailing slash
	hc      *http.Client
	timeout time.Duration
	bal     *balance.Balancer
	probe   time.Duration
	log     *slog.Logger
	auth    string // Authorization header, "" for none

	mu        sync.Mutex
	unhealthy map[string]bool
	probing   bool
	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
}

// New returns a Client for the given server base URLs (e.g.
// "http://127.0.0.1:7070"). A URL without a scheme gets http://.
func New(servers []string, opts Options) (*Client, error) {
	if len(servers) == 0 {
		return nil, errors.New("flow client: servers: at least one server URL is needed")
	}
	c := &Client{
		hc:        opts.HTTPClient,
		timeout:   opts.Timeout,
		probe:     opts.ProbeInterval,
		log:       opts.Logger,
		unhealthy: map[string]bool{},
		closed:    make(chan struct{}),
	}
	if opts.Token != "" {
		c.auth = "Bearer " + opts.Token
	}
	seen := map[string]bool{}
	for i, s := range servers {
		u, err := normalize(s)
		if err != nil {
			return nil, fmt.Errorf("flow client: servers[%d] %q: %w", i, s, err)
		}
		if seen[u] {
			return nil, fmt.Errorf("flow client: servers[%d] %q: listed twice", i, s)
		}
		seen[u] = true
		c.servers = append(c.servers, u)
	}
	if c.hc == nil {
		c.hc = &http.Client{Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        256,
			MaxIdleConnsPerHost: 128,
			IdleConnTimeout:     90 * time.Second,
		}}
	}
	if c.timeout == 0 {
		c.timeout = 30 * time.Second
	}
	if c.probe <= 0 {
		c.probe = 2 * time.Second
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	strategy := opts.Strategy
	if strategy == "" {
		strategy = "round_robin"
	}
	bal, err := balance.New(strategy, balance.Options{})
	if err != nil {
		return nil, fmt.Errorf("flow client: strategy %q: %w", strategy, err)
	}
	targets := make([]balance.Target, len(c.servers))
	for i, s := range c.servers {
		targets[i] = balance.Target{Addr: s, Weight: 1}
	}
	if err := bal.Update(targets); err != nil {
		return nil, fmt.Errorf("flow client: servers: %w", err)
	}
	c.bal = bal
	return c, nil
}

func normalize(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", errors.New("empty URL")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("scheme %q is not http or https", u.Scheme)
	}
	if u.Host == "" {
		return "", errors.New("no host")
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.Path, "/"), nil
}

// Servers returns the base URLs the client calls.
func (c *Client) Servers() []string { return append([]string(nil), c.servers...) }

// Unhealthy returns the servers taken out of rotation because they could
// not be reached; the prober lets each back in once it answers.
func (c *Client) Unhealthy() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, s := range c.servers {
		if c.unhealthy[s] {
			out = append(out, s)
		}
	}
	return out
}

// Close stops the background prober and closes idle connections.
func (c *Client) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	c.wg.Wait()
	c.hc.CloseIdleConnections()
	return nil
}

// RegisterTask creates or updates a task type's schedule config.
func (c *Client) RegisterTask(ctx context.Context, tt flow.TaskType) error {
	return c.do(ctx, call{method: http.MethodPost, path: "/v1/register_task", body: tt, idempotent: true})
}

// CreateTask creates one task and returns its id.
func (c *Client) CreateTask(ctx context.Context, t flow.NewTask) (string, error) {
	var resp flow.CreateTaskResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: "/v1/create_task", body: flow.CreateTaskRequest{NewTask: t}, out: &resp}); err != nil {
		return "", err
	}
	if len(resp.TaskIDs) != 1 {
		return "", fmt.Errorf("flow /v1/create_task: answer has %d task ids, want 1", len(resp.TaskIDs))
	}
	return resp.TaskIDs[0], nil
}

// CreateTasks creates a batch of tasks in one request and returns their ids
// in order. The server stores all of them or none.
func (c *Client) CreateTasks(ctx context.Context, ts []flow.NewTask) ([]string, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	var resp flow.CreateTaskResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: "/v1/create_task", body: flow.CreateTaskRequest{Tasks: ts}, out: &resp}); err != nil {
		return nil, err
	}
	if len(resp.TaskIDs) != len(ts) {
		return nil, fmt.Errorf("flow /v1/create_task: answer has %d task ids for %d tasks", len(resp.TaskIDs), len(ts))
	}
	return resp.TaskIDs, nil
}

// CreateTaskInfo creates one task and says whether the id is that of a
// task that already existed (t.UniqueKey live for the type).
func (c *Client) CreateTaskInfo(ctx context.Context, t flow.NewTask) (id string, existing bool, err error) {
	var resp flow.CreateTaskResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: "/v1/create_task", body: flow.CreateTaskRequest{NewTask: t}, out: &resp}); err != nil {
		return "", false, err
	}
	if len(resp.TaskIDs) != 1 {
		return "", false, fmt.Errorf("flow /v1/create_task: answer has %d task ids, want 1", len(resp.TaskIDs))
	}
	return resp.TaskIDs[0], resp.Existing, nil
}

// CreateTasksInfo creates a batch and returns the whole answer: the ids in
// order and the positions whose id is an existing task's (unique keys).
func (c *Client) CreateTasksInfo(ctx context.Context, ts []flow.NewTask) (*flow.CreateTaskResponse, error) {
	var resp flow.CreateTaskResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: "/v1/create_task", body: flow.CreateTaskRequest{Tasks: ts}, out: &resp}); err != nil {
		return nil, err
	}
	if len(resp.TaskIDs) != len(ts) {
		return nil, fmt.Errorf("flow /v1/create_task: answer has %d task ids for %d tasks", len(resp.TaskIDs), len(ts))
	}
	return &resp, nil
}

// PauseTaskType stops holds of a type (on every server) until
// ResumeTaskType; it returns the type's config.
func (c *Client) PauseTaskType(ctx context.Context, taskType string) (*flow.TaskType, error) {
	var t flow.TaskType
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/pause_task_type", body: flow.TaskTypeRequest{TaskType: taskType}, out: &t, idempotent: true})
	return &t, err
}

// ResumeTaskType lets a paused type's tasks be held again.
func (c *Client) ResumeTaskType(ctx context.Context, taskType string) (*flow.TaskType, error) {
	var t flow.TaskType
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/resume_task_type", body: flow.TaskTypeRequest{TaskType: taskType}, out: &t, idempotent: true})
	return &t, err
}

// RetryTask puts a failed or cancelled task back to pending with its
// retries reset (stage and context replaced when req gives them). Another
// status gives a 409 APIError.
func (c *Client) RetryTask(ctx context.Context, req flow.RetryTaskRequest) (*flow.Task, error) {
	var t flow.Task
	if err := c.do(ctx, call{method: http.MethodPost, path: "/v1/retry_task", body: req, out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteTask deletes a task that is not being processed.
func (c *Client) DeleteTask(ctx context.Context, taskID string) error {
	return c.do(ctx, call{method: http.MethodPost, path: "/v1/delete_task", body: flow.DeleteTaskRequest{TaskID: taskID}})
}

// HoldTasks claims up to req.Limit due tasks of req.TaskType for
// req.WorkerID. With req.WaitMS it long-polls: the call returns as soon as a
// task is due or after the wait with no tasks.
//
// A hold is not retried on another server once the request was sent: a
// second hold could claim tasks the first one also claimed, which would then
// sit unworked until their leases expire.
func (c *Client) HoldTasks(ctx context.Context, req flow.HoldTasksRequest) ([]flow.Task, error) {
	var resp flow.HoldTasksResponse
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/hold_tasks", body: req, out: &resp,
		extra: time.Duration(req.WaitMS) * time.Millisecond})
	return resp.Tasks, err
}

// SetTask reports a held task's outcome. A stale lease gives an error
// matching ErrStaleLease.
func (c *Client) SetTask(ctx context.Context, req flow.SetTaskRequest) error {
	return c.do(ctx, call{method: http.MethodPost, path: "/v1/set_task", body: req})
}

// SetTasks reports several outcomes in one request. The error is for the
// request as a whole; each result carries its own code (200, or the status
// SetTask would have returned) and error. Use ResultErr to turn one into an
// error.
func (c *Client) SetTasks(ctx context.Context, reqs []flow.SetTaskRequest) ([]flow.SetResult, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	var resp flow.SetTasksResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: "/v1/set_tasks", body: flow.SetTasksRequest{Tasks: reqs}, out: &resp}); err != nil {
		return nil, err
	}
	if len(resp.Results) != len(reqs) {
		return nil, fmt.Errorf("flow /v1/set_tasks: answer has %d results for %d tasks", len(resp.Results), len(reqs))
	}
	return resp.Results, nil
}

// ResultErr is nil for a successful batch result and otherwise an *APIError
// (matching ErrStaleLease for a 409), as SetTask would have returned.
func ResultErr(r flow.SetResult) error {
	if r.Code == 0 || (r.Code >= 200 && r.Code < 300 && r.Error == "") {
		return nil
	}
	return &APIError{Status: r.Code, Message: r.Error, Path: "/v1/set_tasks"}
}

// RenewLease extends a held task's lease and returns the new expiry.
func (c *Client) RenewLease(ctx context.Context, req flow.RenewLeaseRequest) (time.Time, error) {
	var resp flow.RenewLeaseResponse
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/renew_lease", body: req, out: &resp, idempotent: true})
	return resp.LeaseExpiry, err
}

// Heartbeat renews every lease workerID holds, in one call, and returns
// them: a task the worker holds that is missing, or listed with another
// lease, is no longer its.
func (c *Client) Heartbeat(ctx context.Context, workerID string) ([]flow.HeldLease, error) {
	var resp flow.HeartbeatResponse
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/heartbeat", body: flow.HeartbeatRequest{WorkerID: workerID}, out: &resp, idempotent: true})
	return resp.Tasks, err
}

// WorkerGone declares a worker dead: every task it holds is rescued now
// (as on lease expiry) and its leases stop working. It returns how many.
func (c *Client) WorkerGone(ctx context.Context, workerID string) (int, error) {
	var resp flow.WorkerGoneResponse
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/worker_gone", body: flow.WorkerGoneRequest{WorkerID: workerID}, out: &resp, idempotent: true})
	return resp.Rescued, err
}

// CancelTask cancels a task that has not ended.
func (c *Client) CancelTask(ctx context.Context, taskID string) error {
	return c.do(ctx, call{method: http.MethodPost, path: "/v1/cancel_task", body: flow.CancelTaskRequest{TaskID: taskID}, idempotent: true})
}

// GetTask returns one task; an unknown id gives an error matching ErrNotFound.
func (c *Client) GetTask(ctx context.Context, taskID string) (*flow.Task, error) {
	var t flow.Task
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/get_task", query: url.Values{"task_id": {taskID}}, out: &t, idempotent: true}); err != nil {
		return nil, err
	}
	return &t, nil
}

// GetTaskChildren lists a fan-out parent's children (ids, final status,
// context and error), for its join stage; cursor is the last id of the
// previous page ("" for the first), limit 0 the server's page (1,000).
func (c *Client) GetTaskChildren(ctx context.Context, taskID, cursor string, limit int) (*flow.TaskChildrenResponse, error) {
	q := url.Values{"task_id": {taskID}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out flow.TaskChildrenResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/get_task_children", query: q, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTaskType returns a task type's config (GET /v1/get_task_type), with
// the rate keys paused now and until when (PausedKeys).
func (c *Client) GetTaskType(ctx context.Context, taskType string) (*flow.TaskType, error) {
	var t flow.TaskType
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/get_task_type", query: url.Values{"task_type": {taskType}}, out: &t, idempotent: true}); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListFilter selects tasks for ListTasks. Zero fields do not filter.
type ListFilter struct {
	TaskType  string
	TaskStage string
	Status    flow.Status
	Limit     int
	Cursor    string // NextCursor of the previous page
}

// ListTasks returns one page of tasks; pass resp.NextCursor back in
// ListFilter.Cursor for the next page ("" means there is none).
func (c *Client) ListTasks(ctx context.Context, f ListFilter) (*flow.TaskListResponse, error) {
	q := url.Values{}
	if f.TaskType != "" {
		q.Set("task_type", f.TaskType)
	}
	if f.TaskStage != "" {
		q.Set("task_stage", f.TaskStage)
	}
	if f.Status != 0 {
		q.Set("status", strconv.Itoa(int(f.Status)))
	}
	if f.Limit != 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Cursor != "" {
		q.Set("cursor", f.Cursor)
	}
	var resp flow.TaskListResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/get_task_list", query: q, out: &resp, idempotent: true}); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Stats returns task counts by type and status.
func (c *Client) Stats(ctx context.Context) (*flow.StatsResponse, error) {
	var resp flow.StatsResponse
	if err := c.do(ctx, call{method: http.MethodGet, path: "/v1/stats", out: &resp, idempotent: true}); err != nil {
		return nil, err
	}
	return &resp, nil
}

// call describes one API call.
type call struct {
	method     string
	path       string
	query      url.Values
	body       any
	out        any
	idempotent bool          // safe to send again to another server
	extra      time.Duration // added to the attempt timeout (long-poll wait)
}

// do sends a call, choosing a server per attempt. A server that cannot be
// reached is marked unhealthy; the call moves on to another server when it
// is idempotent or when the request provably never reached the first one.
func (c *Client) do(ctx context.Context, cl call) error {
	var payload []byte
	if cl.body != nil {
		var err error
		if payload, err = json.Marshal(cl.body); err != nil {
			return fmt.Errorf("flow %s: encode request: %w", cl.path, err)
		}
	}
	var (
		last  error
		tried []*balance.Endpoint
	)
	for range c.servers {
		p, err := c.bal.PickWith(balance.PickInfo{Key: cl.path, Exclude: tried})
		if err != nil {
			if last == nil {
				last = err
			}
			break
		}
		server := p.Addr()
		tried = append(tried, p.Endpoint())
		err = c.send(ctx, server, cl, payload)
		var apiErr *APIError
		switch {
		case err == nil:
			p.Done(nil)
			return nil
		case errors.As(err, &apiErr):
			// The server answered: it is up, whatever it said.
			p.Done(nil)
			// A busy server (503 with Retry-After) did nothing: any call
			// may go on to another one.
			if apiErr.Status == http.StatusServiceUnavailable && (cl.idempotent || apiErr.RetryAfter) {
				last = err
				continue
			}
			return err
		case ctx.Err() != nil:
			p.Done(nil) // our own cancellation says nothing about the server
			return fmt.Errorf("flow %s: %w", cl.path, ctx.Err())
		default:
			p.Done(err)
			c.markUnhealthy(server, err)
			last = err
			if !cl.idempotent && !neverSent(err) {
				return fmt.Errorf("flow %s on %s: %w", cl.path, server, err)
			}
		}
	}
	return &unavailableError{path: cl.path, last: last}
}

// neverSent reports whether a transport error happened before any byte of
// the request could reach the server (the connection was never made).
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func (c *Client) send(ctx context.Context, server string, cl call, payload []byte) error {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout+cl.extra)
		defer cancel()
	}
	u := server + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var body io.Reader
	if payload != nil {
		body = bytes.NewReader(payload)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, body)
	if err != nil {
		return fmt.Errorf("flow %s: build request: %w", cl.path, err)
	}
	if payload != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, release, err := readAnswer(resp)
	defer release()
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 400 {
		msg := strings.TrimSpace(string(data))
		var er flow.ErrorResponse
		if json.Unmarshal(data, &er) == nil && er.Error != "" {
			msg = er.Error
		}
		return &APIError{Status: resp.StatusCode, Message: msg, Server: server, Path: cl.path, RetryAfter: resp.Header.Get("Retry-After") != ""}
	}
	if cl.out == nil {
		return nil
	}
	if parseAnswer(data, cl.out) { // the hot answers, without reflection (answerjson.go)
		return nil
	}
	if err := json.Unmarshal(data, cl.out); err != nil {
		// A 2xx we cannot read is the server's fault, not a transport failure.
		return &APIError{Status: resp.StatusCode, Message: "undecodable answer: " + err.Error(), Server: server, Path: cl.path}
	}
	return nil
}

// readAnswer reads an answer of up to 64 MiB, into a buffer of its
// length where the server sent one (hold answers run to hundreds of
// kilobytes; growing a buffer by doubling made most of the client's
// garbage). The buffer comes from a pool when it can: call release once
// nothing refers to data (what the answer is decoded into is copied out
// of it: strings, contexts).
func readAnswer(resp *http.Response) (data []byte, release func(), err error) {
	const most = 64 << 20
	release = func() {}
	if n := resp.ContentLength; n >= 0 && n <= most {
		bp := answerBufs.Get().(*[]byte)
		if cap(*bp) < int(n) {
			*bp = make([]byte, n)
		}
		data = (*bp)[:n]
		release = func() {
			if cap(*bp) <= 1<<20 { // keep buffers of the usual size, not the largest ever
				answerBufs.Put(bp)
			}
		}
		if _, err := io.ReadFull(resp.Body, data); err != nil {
			release()
			return nil, func() {}, err
		}
		return data, release, nil
	}
	data, err = io.ReadAll(io.LimitReader(resp.Body, most))
	return data, release, err
}

// answerBufs are readAnswer's buffers.
var answerBufs = sync.Pool{New: func() any { return new([]byte) }}

// markUnhealthy takes a server out of rotation and starts the prober that
// lets it back in when it answers again. The last server is never taken out:
// with nothing else to try, calls keep going to it.
func (c *Client) markUnhealthy(server string, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.unhealthy[server] || len(c.unhealthy) >= len(c.servers)-1 {
		return
	}
	c.unhealthy[server] = true
	_ = c.bal.SetHealthy(server, false) // a known address: cannot fail
	c.log.Warn("flow server unreachable; skipping it", "server", server, "err", cause)
	if !c.probing {
		c.probing = true
		c.wg.Add(1)
		go c.probeLoop()
	}
}

// probeLoop probes unhealthy servers every ProbeInterval until none is left
// or the client is closed.
func (c *Client) probeLoop() {
	defer c.wg.Done()
	t := time.NewTicker(c.probe)
	defer t.Stop()
	for {
		select {
		case <-c.closed:
			return
		case <-t.C:
		}
		c.mu.Lock()
		var down []string
		for s := range c.unhealthy {
			down = append(down, s)
		}
		c.mu.Unlock()
		for _, s := range down {
			if c.alive(s) {
				c.mu.Lock()
				delete(c.unhealthy, s)
				_ = c.bal.SetHealthy(s, true)
				c.mu.Unlock()
				c.log.Info("flow server answers again", "server", s)
			}
		}
		c.mu.Lock()
		if len(c.unhealthy) == 0 {
			c.probing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
	}
}

// alive asks a server for /healthz (which checks its database).
func (c *Client) alive(server string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), c.probe)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, server+"/healthz", nil)
	if err != nil {
		return false
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return false
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
