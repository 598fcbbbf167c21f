package console_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	flowserver "github.com/fulcrum-lb/fulcrum/flow/server"
	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/demo"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
	"github.com/fulcrum-lb/fulcrum/supervisor/sink"
	"github.com/fulcrum-lb/fulcrum/supervisor/source"
	workersdk "github.com/fulcrum-lb/fulcrum/supervisor/worker"
)

// The browser tests run console/e2e/run.mjs in headless Chromium against
// real components started here; they need node, Chromium
// (FULCRUM_CHROMIUM, default /usr/bin/chromium) and `npm ci --prefix
// console/e2e`. Outside CI a missing piece skips them with a message;
// under CI=true it fails them. FULCRUM_CONSOLE_SCREENSHOTS=docs/img
// (relative to the repository root) writes the pages' screenshots.

const adminToken = "console-e2e-token"

type browser struct{ node, chromium, dir string }

func needBrowser(t *testing.T) browser {
	t.Helper()
	missing := func(what, how string) {
		msg := fmt.Sprintf("console browser tests need %s (%s)", what, how)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + "; CI must not skip them")
		}
		t.Skip(msg)
	}
	b := browser{chromium: os.Getenv("FULCRUM_CHROMIUM")}
	if b.chromium == "" {
		b.chromium = "/usr/bin/chromium"
	}
	var err error
	if b.node, err = exec.LookPath("node"); err != nil {
		missing("node", "apt-get install nodejs npm")
	}
	if _, err := os.Stat(b.chromium); err != nil {
		missing("Chromium at "+b.chromium, "apt-get install chromium, or set FULCRUM_CHROMIUM")
	}
	b.dir, _ = filepath.Abs("e2e")
	if _, err := os.Stat(filepath.Join(b.dir, "node_modules", "playwright-core", "package.json")); err != nil {
		missing("playwright-core in console/e2e/node_modules", "npm ci --prefix console/e2e")
	}
	return b
}

// run runs one scenario of run.mjs with the components' addresses and a
// control server for what the page cannot do itself.
func (b browser) run(t *testing.T, scenario string, env map[string]any, control map[string]func(body []byte) (any, error)) {
	t.Helper()
	mux := http.NewServeMux()
	for name, fn := range control {
		mux.HandleFunc("POST /"+name, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			out, err := fn(body)
			if err != nil {
				t.Errorf("control %s: %v", name, err)
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_ = json.NewEncoder(w).Encode(out)
		})
	}
	ctl := httptest.NewServer(mux)
	defer ctl.Close()
	env["control"] = ctl.URL
	env["chromium"] = b.chromium
	env["failures"] = t.TempDir()
	if dir := os.Getenv("FULCRUM_CONSOLE_SCREENSHOTS"); dir != "" {
		abs, err := filepath.Abs(filepath.Join("..", dir))
		if err != nil {
			t.Fatal(err)
		}
		env["screenshots"] = abs
	}
	cfg, _ := json.Marshal(env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // bounds a hang
	defer cancel()
	cmd := exec.CommandContext(ctx, b.node, "run.mjs", scenario)
	cmd.Dir = b.dir
	cmd.Env = append(os.Environ(), "FULCRUM_E2E="+string(cfg))
	out, err := cmd.CombinedOutput()
	t.Logf("node run.mjs %s:\n%s", scenario, out)
	if err != nil {
		t.Fatalf("browser scenario %s failed: %v (failure screenshot in %s)", scenario, err, env["failures"])
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// A gateway with an admin token in front of three real upstreams, active
// health checks and traffic: the page asks for the token, shows the
// targets, shows a killed target turn unhealthy, and disables another
// through its button, which the gateway then reports.
func TestConsoleGateway(t *testing.T) {
	b := needBrowser(t)
	ups, err := demo.StartAll([]string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { demo.CloseAll(ups) })
	var cfgText strings.Builder
	fmt.Fprintf(&cfgText, "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0, token: %s}\naccess_log: {enabled: false}\n", adminToken)
	cfgText.WriteString("upstreams:\n  web:\n    strategy: least_active\n    health:\n      active: {path: /healthz, interval: 100ms, timeout: 1s, healthy_threshold: 1, unhealthy_threshold: 1}\n    targets:\n")
	var addrs []string
	for i, u := range ups {
		fmt.Fprintf(&cfgText, "      - {url: \"http://%s\", weight: %d}\n", u.Addr, i+1)
		addrs = append(addrs, u.Addr)
	}
	cfg, err := config.Parse([]byte(cfgText.String()))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, cfgText.String())
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	stop := traffic(t, "http://"+g.Addr()+"/")
	defer stop()

	target := func(addr string) gateway.TargetView {
		for _, u := range g.Upstreams() {
			for _, tv := range u.Targets {
				if tv.URL == "http://"+addr {
					return tv
				}
			}
		}
		t.Fatalf("no target %s", addr)
		return gateway.TargetView{}
	}
	b.run(t, "gateway", map[string]any{"url": "http://" + g.AdminAddr(), "token": adminToken, "targets": addrs},
		map[string]func([]byte) (any, error){
			"kill-target": func([]byte) (any, error) {
				ups[2].Close()
				return map[string]string{"addr": ups[2].Addr}, nil
			},
			"check-disabled": func(body []byte) (any, error) {
				var req struct{ Addr string }
				if err := json.Unmarshal(body, &req); err != nil {
					return nil, err
				}
				if tv := target(req.Addr); !tv.Disabled {
					return nil, fmt.Errorf("the page disabled %s but the gateway says %+v", req.Addr, tv)
				}
				return map[string]bool{"ok": true}, nil
			},
		})
	if tv := target(addrs[0]); tv.Requests == 0 {
		t.Errorf("target %s kept no requests across the page's change: %+v", addrs[0], tv)
	}
}

// A gateway whose routes table has a rate-limited login, a split with a
// ramping side and a 70/30 split to a canary that answers every 4th
// request with a 500: the page shows the routes, both sides' requests,
// the canary's 5xx against the stable side's none, and, once the traffic
// stops, the gateway's own counts.
func TestConsoleGatewayRoutes(t *testing.T) {
	b := needBrowser(t)
	ups, err := demo.StartAll([]string{"127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { demo.CloseAll(ups) })
	var n atomic.Int64
	canary := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%4 == 0 {
			http.Error(w, "canary broke", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "v2")
	}))
	t.Cleanup(canary.Close)
	cfg, err := config.Parse([]byte(fmt.Sprintf(`listen: 127.0.0.1:0
admin: {listen: 127.0.0.1:0, token: %s}
access_log: {enabled: false}
upstreams:
  v1: {targets: [{url: "http://%s"}]}
  v2: {targets: [{url: "%s"}]}
routes:
  - match: {path: /login, methods: [POST]}
    upstream: v1
    rate_limit: {key: client_ip, per_second: 1, burst: 5}
  - match: {path_prefix: /next/}
    split: [{upstream: v1, weight: 90}, {upstream: v2, weight: 10, ramp: 1h}]
    split_key: header:X-User
  - match: {path_prefix: /}
    split: [{upstream: v1, weight: 70}, {upstream: v2, weight: 30}]
    response_headers: {set: {Cache-Control: no-store}}
`, adminToken, ups[0].Addr, canary.URL)))
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(cfg, gateway.Options{Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	stop := traffic(t, "http://"+g.Addr()+"/")
	defer stop()
	type counts struct {
		Requests  int64 `json:"requests"`
		Errors    int64 `json:"errors"`
		Responses int64 `json:"responses"`
	}
	b.run(t, "routes", map[string]any{"url": "http://" + g.AdminAddr(), "token": adminToken, "limited": 0, "ramp": 1, "split": 2},
		map[string]func([]byte) (any, error){
			// The counts the page must show once the traffic stops: the
			// last responses are counted when their relays end, just
			// after the client has them, so wait for those.
			"stop-traffic": func([]byte) (any, error) {
				stop()
				deadline := time.Now().Add(10 * time.Second)
				for {
					out := map[string]counts{}
					settled := true
					for _, s := range g.Routes()[2].Split {
						out[s.Upstream] = counts{s.Requests, s.UpstreamErrors, s.UpstreamResponses}
						settled = settled && s.UpstreamResponses == s.Requests
					}
					if settled {
						if out["v2"].Errors == 0 || out["v1"].Errors != 0 {
							return nil, fmt.Errorf("the canary should have failed and v1 not: %+v", out)
						}
						return out, nil
					}
					if time.Now().After(deadline) {
						return nil, fmt.Errorf("responses never caught up with the split's requests: %+v", out)
					}
					time.Sleep(10 * time.Millisecond) // polling a counter, bounded above
				}
			},
		})
}

// traffic sends requests until stopped, so the sparklines have something
// to draw.
func traffic(t *testing.T, url string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 2 * time.Second}
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				if resp, err := c.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				time.Sleep(5 * time.Millisecond) // a steady trickle, not a load test
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// A flow server on SQLite (token required) with a three-stage type
// part-way through: the page asks for the token, shows the funnel, counts a task created while it watches, lists it
// and cancels it from the task's page, which the server then reports.
func TestConsoleFlow(t *testing.T) {
	b := needBrowser(t)
	s, err := flowserver.Start(context.Background(), flowserver.Config{
		Listen: "127.0.0.1:0", DB: "sqlite://" + filepath.Join(t.TempDir(), "flow.db"), Logger: quietLog(), Token: adminToken,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	api := func(path string, in, out any) error {
		method, body := http.MethodGet, []byte(nil)
		if in != nil {
			method = http.MethodPost
			body, _ = json.Marshal(in)
		}
		req, _ := http.NewRequest(method, s.URL()+path, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, data)
		}
		if out != nil {
			return json.Unmarshal(data, out)
		}
		return nil
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const typ = "articles"
	must(api("/v1/register_task", flow.TaskType{TaskType: typ, ScheduleLimit: 50, MaxProcessingMS: 60000, MaxRetryNum: 2, RetryIntervalMS: 1000, MaxRetryIntervalMS: 5000}, nil))
	var nts []flow.NewTask
	for i := range 40 {
		nts = append(nts, flow.NewTask{TaskType: typ, TaskStage: "fetch", TaskContext: json.RawMessage(fmt.Sprintf(`{"url":"https://example.org/a/%d"}`, i))})
	}
	must(api("/v1/create_task", flow.CreateTaskRequest{Tasks: nts}, nil))
	// Move tasks along fetch -> summarize -> publish: each round holds
	// every due task and decides its fate by stage and a count, so each
	// stage ends with tasks pending, held (processing), failed or done.
	round := func(fate func(stage string, i int) (flow.Status, string)) {
		var held flow.HoldTasksResponse
		must(api("/v1/hold_tasks", flow.HoldTasksRequest{TaskType: typ, Limit: 1000, WorkerID: "console-e2e"}, &held))
		seen := map[string]int{}
		for _, tk := range held.Tasks {
			st, next := fate(tk.TaskStage, seen[tk.TaskStage])
			seen[tk.TaskStage]++
			switch st {
			case flow.StatusProcessing: // stays held
			case flow.StatusFailed:
				must(api("/v1/set_task", flow.SetTaskRequest{TaskID: tk.TaskID, Lease: tk.Lease, Status: st, Error: "upstream answered 500"}, nil))
			default:
				must(api("/v1/set_task", flow.SetTaskRequest{TaskID: tk.TaskID, Lease: tk.Lease, Status: st, TaskStage: next}, nil))
			}
		}
	}
	split := func(i int, parts ...int) int { // which part index i falls in
		for p, n := range parts {
			if i < n {
				return p
			}
			i -= n
		}
		return len(parts)
	}
	round(func(stage string, i int) (flow.Status, string) {
		return [...]flow.Status{flow.StatusPending, flow.StatusProcessing, flow.StatusFailed, flow.StatusPending}[split(i, 30, 4, 2)],
			[...]string{"summarize", "", "", "fetch"}[split(i, 30, 4, 2)]
	})
	round(func(stage string, i int) (flow.Status, string) {
		if stage != "summarize" {
			return flow.StatusPending, stage
		}
		return [...]flow.Status{flow.StatusPending, flow.StatusFailed, flow.StatusProcessing, flow.StatusPending}[split(i, 18, 3, 3)],
			[...]string{"publish", "", "", "summarize"}[split(i, 18, 3, 3)]
	})
	round(func(stage string, i int) (flow.Status, string) {
		if stage != "publish" {
			return flow.StatusPending, stage
		}
		return [...]flow.Status{flow.StatusSuccess, flow.StatusProcessing, flow.StatusPending}[split(i, 12, 2)],
			[...]string{"", "", "publish"}[split(i, 12, 2)]
	})

	// A second type worked steadily in the background, so throughput and
	// queue wait move; the page's checks are on the first type only.
	const busy = "thumbnails"
	// It is fair (premium weighs 3): its card shows the weights.
	must(api("/v1/register_task", flow.TaskType{TaskType: busy, ScheduleLimit: 10, MaxProcessingMS: 60000, Fair: true, FairnessWeights: map[string]int{"premium": 3}}, nil))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			_ = api("/v1/create_task", flow.CreateTaskRequest{Tasks: []flow.NewTask{{TaskType: busy, TaskStage: "resize"}, {TaskType: busy, TaskStage: "resize"}}}, nil)
			var held flow.HoldTasksResponse
			_ = api("/v1/hold_tasks", flow.HoldTasksRequest{TaskType: busy, Limit: 1, WorkerID: "thumbnailer"}, &held)
			for _, tk := range held.Tasks {
				_ = api("/v1/set_task", flow.SetTaskRequest{TaskID: tk.TaskID, Lease: tk.Lease, Status: flow.StatusSuccess}, nil)
			}
			time.Sleep(50 * time.Millisecond) // a steady trickle, not a load test
		}
	}()
	defer func() { cancel(); wg.Wait() }()

	// The operator actions this server has (retry, pause/resume) are
	// exercised too; cancel always is.
	var actions struct {
		Actions map[string]bool `json:"actions"`
	}
	must(api("/v1/console", nil, &actions))
	t.Logf("operator actions: %v", actions.Actions)
	b.run(t, "flow", map[string]any{"url": s.URL(), "token": adminToken, "taskType": typ, "actions": actions.Actions},
		map[string]func([]byte) (any, error){
			// A parent that fanned out into three children, for the task page's children.
			"fan-out": func([]byte) (any, error) {
				for _, tt := range []string{"bundle", "piece"} {
					if err := api("/v1/register_task", flow.TaskType{TaskType: tt}, nil); err != nil {
						return nil, err
					}
				}
				var out flow.CreateTaskResponse
				if err := api("/v1/create_task", flow.NewTask{TaskType: "bundle", TaskStage: "split"}, &out); err != nil {
					return nil, err
				}
				var held flow.HoldTasksResponse
				if err := api("/v1/hold_tasks", flow.HoldTasksRequest{TaskType: "bundle", Limit: 1, WorkerID: "console-e2e"}, &held); err != nil {
					return nil, err
				}
				if len(held.Tasks) != 1 {
					return nil, fmt.Errorf("held %d bundles", len(held.Tasks))
				}
				kids := []flow.NewTask{{TaskType: "piece", TaskStage: "a"}, {TaskType: "piece", TaskStage: "b"}, {TaskType: "piece", TaskStage: "c"}}
				err := api("/v1/set_task", flow.SetTaskRequest{TaskID: held.Tasks[0].TaskID, Lease: held.Tasks[0].Lease, Status: flow.StatusWaiting, JoinStage: "join", Children: kids}, nil)
				return map[string]string{"task_id": out.TaskIDs[0]}, err
			},
			// A worker's 429: the type's rate key "api" paused for an hour.
			"pause-key": func([]byte) (any, error) {
				if err := api("/v1/create_task", flow.NewTask{TaskType: typ, TaskStage: "fetch", RateKey: "api", Priority: 1000}, nil); err != nil {
					return nil, err
				}
				var held flow.HoldTasksResponse
				if err := api("/v1/hold_tasks", flow.HoldTasksRequest{TaskType: typ, Limit: 1, WorkerID: "console-e2e"}, &held); err != nil {
					return nil, err
				}
				if len(held.Tasks) != 1 || held.Tasks[0].RateKey != "api" {
					return nil, fmt.Errorf("held %+v, want the task with rate key api", held.Tasks)
				}
				err := api("/v1/set_task", flow.SetTaskRequest{TaskID: held.Tasks[0].TaskID, Lease: held.Tasks[0].Lease, Status: flow.StatusPending, PauseRateKeyMS: 3600_000, Error: "429"}, nil)
				return map[string]string{"rate_key": "api"}, err
			},
			"create-task": func([]byte) (any, error) {
				var out flow.CreateTaskResponse
				err := api("/v1/create_task", flow.NewTask{TaskType: typ, TaskStage: "fetch", TaskContext: json.RawMessage(`{"url":"https://example.org/new"}`)}, &out)
				if err != nil {
					return nil, err
				}
				return map[string]string{"task_id": out.TaskIDs[0]}, nil
			},
			"check-status": func(body []byte) (any, error) {
				var req struct {
					TaskID string `json:"task_id"`
					Status string `json:"status"`
				}
				if err := json.Unmarshal(body, &req); err != nil {
					return nil, err
				}
				var tk flow.Task
				if err := api("/v1/get_task?task_id="+req.TaskID, nil, &tk); err != nil {
					return nil, err
				}
				if tk.Status.String() != req.Status {
					return nil, fmt.Errorf("the page made %s %s but the server says %v", req.TaskID, req.Status, tk.Status)
				}
				return map[string]bool{"ok": true}, nil
			},
			"check-deleted": func(body []byte) (any, error) {
				var req struct {
					TaskID string `json:"task_id"`
				}
				if err := json.Unmarshal(body, &req); err != nil {
					return nil, err
				}
				err := api("/v1/get_task?task_id="+req.TaskID, nil, nil)
				if err == nil || !strings.Contains(err.Error(), ": 404 ") {
					return nil, fmt.Errorf("the page deleted %s but get_task answers %v", req.TaskID, err)
				}
				return map[string]bool{"ok": true}, nil
			},
			"check-paused": func(body []byte) (any, error) {
				var req struct{ Paused bool }
				if err := json.Unmarshal(body, &req); err != nil {
					return nil, err
				}
				var st map[string][]struct {
					TaskType string `json:"task_type"`
					Paused   bool   `json:"paused"`
				}
				if err := api("/v1/stats", nil, &st); err != nil {
					return nil, err
				}
				for _, ts := range st["types"] {
					if ts.TaskType == typ && ts.Paused == req.Paused {
						return map[string]bool{"ok": true}, nil
					}
				}
				return nil, fmt.Errorf("the page set %s paused=%v but /v1/stats says %+v", typ, req.Paused, st)
			},
		})
}

// A supervisor (token required) with three real SDK workers over
// WebSocket holding six tasks twice each: the page shows the workers and
// the holders; a worker stopped while it watches leaves the list, its
// death shows among the events.
func TestConsoleSupervisor(t *testing.T) {
	b := needBrowser(t)
	var tasks []protocol.Task
	for i := range 6 {
		tasks = append(tasks, protocol.Task{TaskID: fmt.Sprintf("room-%d", i+1), Spec: json.RawMessage(fmt.Sprintf(`{"room":%d}`, i+1))})
	}
	c := supervisor.DefaultConfig()
	c.Listen = "127.0.0.1:0"
	c.Token = adminToken
	c.Warmup = 200 * time.Millisecond
	c.WorkerTimeout = 1500 * time.Millisecond
	c.TaskTimeout = 5 * time.Second
	c.Tick = 50 * time.Millisecond
	c.Redundancy = 2
	c.Source = source.Config{Type: source.TypeStatic, Tasks: tasks}
	c.Sink = sink.Config{Type: sink.TypeStdout}
	s, err := supervisor.Start(context.Background(), c, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stops := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	var ids []string
	for i := range 3 {
		id := fmt.Sprintf("worker-%d", i+1)
		ids = append(ids, id)
		w, err := workersdk.New(workersdk.Config{
			URL: "ws://" + s.Addr() + supervisor.WorkerPath, Token: adminToken, WorkerID: id, MaxLoad: 5 + i,
			ReportInterval: 100 * time.Millisecond,
			Session: workersdk.SessionFunc(func(ctx context.Context, task protocol.Task, out *workersdk.Output) error {
				tick := time.NewTicker(250 * time.Millisecond)
				defer tick.Stop()
				for n := 0; ; n++ {
					select {
					case <-ctx.Done():
						return nil
					case <-tick.C:
						out.Seen()
						out.Emit(fmt.Sprintf("%s-%d", task.TaskID, n), []byte(`{}`))
					}
				}
			}),
		})
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		stops[id] = stop
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(wctx) }()
	}
	defer func() { cancel(); wg.Wait() }()
	admin := func(path string, out any) error {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr()+path, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(out)
	}
	// Drain is exercised when this supervisor has it.
	var actions struct {
		Actions map[string]bool `json:"actions"`
	}
	if err := admin("/console/actions", &actions); err != nil {
		t.Fatal(err)
	}
	t.Logf("operator actions: %v", actions.Actions)
	b.run(t, "supervisor", map[string]any{"url": "http://" + s.Addr(), "token": adminToken, "workers": ids, "actions": actions.Actions},
		map[string]func([]byte) (any, error){
			"kill-worker": func([]byte) (any, error) {
				stops["worker-2"]()
				return map[string]string{"worker": "worker-2"}, nil
			},
			"check-draining": func(body []byte) (any, error) {
				var req struct{ Worker string }
				if err := json.Unmarshal(body, &req); err != nil {
					return nil, err
				}
				var ws struct {
					Workers []struct {
						ID       string `json:"id"`
						Draining bool   `json:"draining"`
					} `json:"workers"`
				}
				if err := admin("/workers", &ws); err != nil {
					return nil, err
				}
				for _, w := range ws.Workers {
					if w.ID == req.Worker && w.Draining {
						return map[string]bool{"ok": true}, nil
					}
				}
				return nil, fmt.Errorf("the page drained %s but GET /workers says %+v", req.Worker, ws)
			},
		})
}

// `fulcrum demo` prints the console's address, and the page there shows
// the demo's three targets live: built and run as the README says, with
// ports of its own.
func TestConsoleDemo(t *testing.T) {
	b := needBrowser(t)
	bin := filepath.Join(t.TempDir(), "fulcrum")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/fulcrum-lb/fulcrum/cmd/fulcrum").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/fulcrum: %v\n%s", err, out)
	}
	ports := freePorts(t, 5)
	cmd := exec.Command(bin, "demo", "--listen", ports[0], "--admin", ports[1], "--upstreams", strings.Join(ports[2:], ","))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var printed bytes.Buffer
	console := ""
	buf := make([]byte, 4096)
	for console == "" {
		n, err := stdout.Read(buf)
		printed.Write(buf[:n])
		for _, line := range strings.Split(printed.String(), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "Console:" {
				console = f[1]
			}
		}
		if err != nil && console == "" {
			t.Fatalf("demo ended without printing the console's address: %v\n%s", err, printed.String())
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	if want := "http://" + ports[1] + "/ui/"; console != want {
		t.Fatalf("demo printed console %q, want %q", console, want)
	}
	up := func() bool {
		resp, err := http.Get("http://" + ports[1] + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}
	testenv.Eventually(t, "the demo's admin address answering", up)
	stop := traffic(t, "http://"+ports[0]+"/")
	defer stop()
	b.run(t, "demo", map[string]any{"url": strings.TrimSuffix(console, "/ui/"), "targets": ports[2:]}, nil)
}

// freePorts returns n loopback addresses that were free a moment ago (the
// demo takes fixed addresses, not port 0).
func freePorts(t *testing.T, n int) []string {
	var out []string
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}
