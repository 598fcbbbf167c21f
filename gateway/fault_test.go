package gateway_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// TestMain lets the test binary run as a slow recording upstream in a
// process of its own (the fault test kills it with SIGKILL).
func TestMain(m *testing.M) {
	if os.Getenv("FULCRUM_TEST_UPSTREAM") == "1" {
		recordingUpstream()
		return
	}
	os.Exit(m.Run())
}

// recordingUpstream listens on a free port, prints "addr ADDR", then for
// every request prints "METHOD ID" the moment it arrives and answers 100
// ms later: a SIGKILL catches requests mid-way, and stdout says which
// reached it. With FULCRUM_TEST_HOLD_POST=1 it never answers a POST, so
// the POSTs it printed are certainly in flight when it is killed.
func recordingUpstream() {
	hold := os.Getenv("FULCRUM_TEST_HOLD_POST") == "1"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	var mu sync.Mutex
	fmt.Printf("addr %s\n", ln.Addr())
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		fmt.Printf("%s %s\n", r.Method, r.Header.Get("X-Request-Id"))
		mu.Unlock()
		if hold && r.Method == "POST" {
			select {} // until SIGKILL
		}
		time.Sleep(100 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
}

// upstreamProc is a recording upstream running as its own process.
type upstreamProc struct {
	cmd  *exec.Cmd
	addr string
	mu   sync.Mutex
	seen map[string]int // request id -> arrivals
	n    atomic.Int64
	post atomic.Int64 // POST arrivals
	done chan struct{}
}

// startUpstreamProc starts a recording upstream process; env adds to its
// environment.
func startUpstreamProc(t *testing.T, env ...string) *upstreamProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), "FULCRUM_TEST_UPSTREAM=1"), env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &upstreamProc{cmd: cmd, seen: map[string]int{}, done: make(chan struct{})}
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done; _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "addr ") {
		t.Fatalf("upstream process: %q", sc.Text())
	}
	p.addr = strings.TrimPrefix(sc.Text(), "addr ")
	go func() {
		defer close(p.done)
		for sc.Scan() {
			method, id, _ := strings.Cut(sc.Text(), " ")
			p.mu.Lock()
			p.seen[id]++
			p.mu.Unlock()
			p.n.Add(1)
			if method == "POST" {
				p.post.Add(1)
			}
		}
	}()
	return p
}

// kill sends SIGKILL and waits until everything the process printed has
// been read.
func (p *upstreamProc) kill(t *testing.T) {
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

func (p *upstreamProc) count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[id]
}

// Three slow upstreams as real processes, POST and GET load through the
// gateway, one upstream killed with SIGKILL mid-request. A POST may have
// run on the killed upstream, so it must not run anywhere else: every
// POST id reaches at most one upstream, a POST that failed (502) reached
// at most the killed one (it may have died with the request unread in
// its socket), one that succeeded exactly one upstream. Every
// GET succeeds (retried elsewhere). The killed upstream holds every POST
// it gets and dies only once it holds one, so each run has a POST that
// certainly ran there when it died: it must get 502 and reach no other
// upstream (a replay would answer it 200 from a second one).
func TestSIGKILLUnderLoadNoReplayedPOST(t *testing.T) {
	for _, strategy := range []string{"round_robin", "p2c", "least_active", "capacity"} {
		t.Run(strategy, func(t *testing.T) {
			ups := []*upstreamProc{startUpstreamProc(t), startUpstreamProc(t, "FULCRUM_TEST_HOLD_POST=1"), startUpstreamProc(t)}
			var ts strings.Builder
			for _, u := range ups {
				fmt.Fprintf(&ts, "      - {url: \"http://%s\"}\n", u.addr)
			}
			g := start(t, base+"upstreams:\n  api:\n    strategy: "+strategy+"\n    targets:\n"+ts.String()+
				"    health: {passive: {max_failures: 2}}\n    retry: {attempts: 3, budget: 1, min_per_second: 100}\n")
			url := "http://" + g.Addr() + "/"
			// Each worker sends at least perWorker requests and goes on
			// until the victim is killed: on a busy machine a strategy may
			// route the first dozens elsewhere, and the victim must get a
			// POST while the load runs. maxPerWorker bounds a run whose
			// victim never gets one (the wait below fails it).
			const workers, perWorker, maxPerWorker = 6, 12, 5000
			var killed atomic.Bool
			defer killed.Store(true)
			type outcome struct {
				id, method string
				code       int
			}
			var mu sync.Mutex
			var outs []outcome
			var wg sync.WaitGroup
			c := client()
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					method := "POST"
					if w%2 == 1 {
						method = "GET"
					}
					for i := 0; i < maxPerWorker && (i < perWorker || !killed.Load()); i++ {
						id := fmt.Sprintf("%s-%d-%d", method, w, i)
						var body io.Reader
						if method == "POST" {
							body = strings.NewReader("order " + id)
						}
						req, _ := http.NewRequest(method, url, body)
						req.Header.Set("X-Request-Id", id)
						code := 0
						if res, err := c.Do(req); err == nil {
							io.Copy(io.Discard, res.Body)
							res.Body.Close()
							code = res.StatusCode
						}
						mu.Lock()
						outs = append(outs, outcome{id, method, code})
						mu.Unlock()
					}
				}()
			}
			// Kill the second upstream once it holds a POST in flight.
			victim := ups[1]
			testenv.Eventually(t, "the victim holds a POST", func() bool { return victim.post.Load() >= 1 })
			victim.kill(t)
			killed.Store(true)
			wg.Wait()

			var posts, postOK, postFailed, getOK, sentPOST, sentGET int
			for _, o := range outs {
				if o.method == "POST" {
					sentPOST++
				} else {
					sentGET++
				}
				total := 0
				for _, u := range ups {
					total += u.count(o.id)
				}
				switch {
				case o.method == "GET":
					if o.code != 200 {
						t.Errorf("GET %s: %d, want 200 (retried elsewhere)", o.id, o.code)
					}
					getOK++
				case o.code == 200:
					posts++
					postOK++
					if total != 1 {
						t.Errorf("POST %s answered 200 but reached %d upstreams", o.id, total)
					}
				case o.code == 502:
					posts++
					postFailed++
					// It was written to the killed upstream (which may have
					// died before reading it) and nowhere else.
					if total > 1 || victim.count(o.id) != total {
						t.Errorf("POST %s answered 502: reached %d upstreams (%d the killed one), want at most the killed one", o.id, total, victim.count(o.id))
					}
				default:
					posts++
					t.Errorf("POST %s: status %d", o.id, o.code)
				}
			}
			if heldFailed := victim.post.Load(); postFailed < int(heldFailed) {
				t.Errorf("%d POSTs answered 502, want at least the %d the killed upstream held", postFailed, heldFailed)
			}
			if want := workers / 2 * perWorker; sentPOST < want || sentGET < want {
				t.Errorf("%d POSTs and %d GETs sent, want at least %d each", sentPOST, sentGET, want)
			}
			if posts != sentPOST || getOK != sentGET {
				t.Errorf("%d POSTs and %d GETs answered, want the %d and %d sent", posts, getOK, sentPOST, sentGET)
			}
			t.Logf("%s: %d POSTs (%d ok, %d failed with the killed upstream), %d GETs ok", strategy, posts, postOK, postFailed, getOK)
		})
	}
}
