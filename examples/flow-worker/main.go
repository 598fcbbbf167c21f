// Command flow-worker is a runnable example of the flow worker SDK: a
// three-stage task type, "article", that goes fetch -> transform -> store.
//
//	fulcrum flow serve                        # terminal 1: the server (SQLite in ./)
//	go run ./examples/flow-worker -submit 5   # terminal 2: submit 5 tasks and work them
//
// fetch reads the page at the task's URL (or, for a "demo:" URL, makes up a
// text), transform counts its words, and store writes a JSON summary into
// -out. Each stage hands the next one its result through the task context.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
	"github.com/fulcrum-lb/fulcrum/flow/worker"
)

// article is the task context the three stages share.
type article struct {
	URL      string         `json:"url"`
	Text     string         `json:"text,omitempty"`      // set by fetch, dropped by transform
	Words    int            `json:"words,omitempty"`     // set by transform
	Top      map[string]int `json:"top,omitempty"`       // most frequent words, by transform
	StoredAt string         `json:"stored_at,omitempty"` // file written by store
}

// maxText bounds what fetch reads; the fetch stage trims it further so the
// context stays within the 4096-byte limit.
const maxText = 3000

// newArticleType is the task type's schedule config: pull every 500ms, a stage
// may run 10s (-lease) before its lease needs renewing (the SDK renews it),
// three retries 1s, 2s, 4s apart.
func newArticleType(lease time.Duration) flow.TaskType {
	return flow.TaskType{
		TaskType: "article", ScheduleLimit: 16, ScheduleIntervalMS: 500,
		MaxProcessingMS: lease.Milliseconds(), MaxRetryNum: 3, RetryIntervalMS: 1000, MaxRetryIntervalMS: 10_000,
	}
}

func main() {
	var (
		servers     = flag.String("server", "http://127.0.0.1:7070", "flow server URLs, comma-separated")
		out         = flag.String("out", filepath.Join(os.TempDir(), "flow-worker-out"), "directory the store stage writes to")
		submit      = flag.Int("submit", 0, "submit this many demo tasks before working")
		concurrency = flag.Int("concurrency", 4, "stages run at once")
		stageDelay  = flag.Duration("stage-delay", 0, "sleep this long in every stage (to watch, or to test crashes)")
		workerID    = flag.String("id", "", "worker id (default: host-pid-random)")
		exitIdle    = flag.Bool("exit-when-done", false, "exit once every article task has ended")
		lease       = flag.Duration("lease", 10*time.Second, "max_processing_time of the article type (the SDK renews it at a third)")
	)
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, newArticleType(*lease), strings.Split(*servers, ","), *out, *submit, *concurrency, *stageDelay, *workerID, *exitIdle); err != nil {
		log.Error("flow-worker", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, articleType flow.TaskType, servers []string, out string, submit, concurrency int, stageDelay time.Duration, id string, exitIdle bool) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	c, err := client.New(servers, client.Options{Logger: log})
	if err != nil {
		return err
	}
	defer c.Close()
	w, err := worker.New(worker.Config{Client: c, WorkerID: id, Concurrency: concurrency, Logger: log})
	if err != nil {
		return err
	}
	w.Register(articleType)
	pause := func(ctx context.Context) error {
		if stageDelay <= 0 {
			return nil
		}
		select {
		case <-time.After(stageDelay):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	hc := &http.Client{Timeout: 10 * time.Second}

	w.Handle("article", "fetch", func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		var a article
		if err := t.Decode(&a); err != nil {
			return worker.Fail(err.Error()), nil // a bad context never gets better
		}
		if err := pause(ctx); err != nil {
			return worker.Result{}, err
		}
		text, err := fetch(ctx, hc, a.URL)
		if err != nil {
			return worker.Result{}, err // retried with backoff
		}
		a.Text = text
		for b, _ := json.Marshal(a); len(b) > flow.MaxContextBytes; b, _ = json.Marshal(a) {
			a.Text = a.Text[:len(a.Text)/2] // escaping can grow the text; halve until it fits
		}
		log.Info("fetched", "task_id", t.ID, "url", a.URL, "bytes", len(text))
		return worker.Next("transform", a), nil
	})
	w.Handle("article", "transform", func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		var a article
		if err := t.Decode(&a); err != nil {
			return worker.Fail(err.Error()), nil
		}
		if err := pause(ctx); err != nil {
			return worker.Result{}, err
		}
		a.Words, a.Top = countWords(a.Text, 5)
		a.Text = "" // the next stage does not need it
		log.Info("transformed", "task_id", t.ID, "words", a.Words)
		return worker.Next("store", a), nil
	})
	w.Handle("article", "store", func(ctx context.Context, t *worker.Task) (worker.Result, error) {
		var a article
		if err := t.Decode(&a); err != nil {
			return worker.Fail(err.Error()), nil
		}
		if err := pause(ctx); err != nil {
			return worker.Result{}, err
		}
		path := filepath.Join(out, t.ID+".json")
		b, _ := json.MarshalIndent(a, "", "  ")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			return worker.Result{}, err
		}
		a.StoredAt = path
		log.Info("stored", "task_id", t.ID, "file", path)
		return worker.Done(a), nil
	})

	// Register the type first so the submitted tasks find it.
	if err := c.RegisterTask(ctx, articleType); err != nil {
		return err
	}
	if submit > 0 {
		tasks := make([]flow.NewTask, submit)
		for i := range tasks {
			b, _ := json.Marshal(article{URL: fmt.Sprintf("demo:article-%d", i+1)})
			tasks[i] = flow.NewTask{TaskType: "article", TaskStage: "fetch", TaskContext: b}
		}
		ids, err := c.CreateTasks(ctx, tasks)
		if err != nil {
			return fmt.Errorf("submit: %w", err)
		}
		log.Info("submitted", "tasks", len(ids))
	}
	if exitIdle {
		go func() {
			for ctx.Err() == nil {
				time.Sleep(500 * time.Millisecond)
				st, err := c.Stats(ctx)
				if err == nil && openArticles(st) == 0 {
					w.Stop()
					return
				}
			}
		}()
	}
	log.Info("working", "worker", w.ID(), "servers", c.Servers(), "out", out)
	return w.Run(ctx)
}

func openArticles(st *flow.StatsResponse) int64 {
	for _, t := range st.Types {
		if t.TaskType == "article" {
			return t.Counts["pending"] + t.Counts["processing"]
		}
	}
	return 0
}

// fetch returns the text at url: an HTTP GET for http(s) URLs, made-up
// text for demo: URLs.
func fetch(ctx context.Context, hc *http.Client, url string) (string, error) {
	if name, ok := strings.CutPrefix(url, "demo:"); ok {
		return strings.Repeat("the quick brown fox jumps over the lazy dog "+name+" ", 20), nil
	}
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return "", errors.New("url must be http(s):// or demo:")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxText))
	return string(b), err
}

// countWords returns the number of words and the n most frequent ones.
func countWords(text string, n int) (int, map[string]int) {
	counts := map[string]int{}
	words := strings.Fields(strings.ToLower(text))
	for _, w := range words {
		counts[w]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if counts[keys[i]] != counts[keys[j]] {
			return counts[keys[i]] > counts[keys[j]]
		}
		return keys[i] < keys[j]
	})
	top := map[string]int{}
	for _, k := range keys[:min(n, len(keys))] {
		top[k] = counts[k]
	}
	return len(words), top
}
