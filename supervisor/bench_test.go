package supervisor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/dedup"
	"github.com/fulcrum-lb/fulcrum/supervisor/lease"
	"github.com/fulcrum-lb/fulcrum/supervisor/sink"
)

// Assignment benchmarks (docs/benchmarks.md, "## supervisor"):
//
//	go test -run '^$' -bench 'Assign|Reassign' -benchmem ./supervisor/

func benchFleet(b *testing.B, workers, maxLoad int) *Engine {
	e, err := NewEngine(3)
	if err != nil {
		b.Fatal(err)
	}
	for i := range workers {
		e.Claim(fmt.Sprintf("w%04d", i), maxLoad, nil)
	}
	return e
}

// BenchmarkAssign100kTasksK3Over1000Workers: the full assignment at the end
// of warm-up, 300,000 holdings, instruction sets included.
func BenchmarkAssign100kTasksK3Over1000Workers(b *testing.B) {
	list := tasks(0, 100_000)
	for b.Loop() {
		b.StopTimer()
		e := benchFleet(b, 1000, 400)
		b.StartTimer()
		e.Assign(list, nil, true)
		if outs := e.Flush(); len(outs) != 1000 {
			b.Fatalf("%d instruction sets", len(outs))
		}
	}
}

// BenchmarkReassignAfterOneWorkerDies: one of 1,000 workers dies holding
// ~300 of the 300,000 holdings; they go to others.
func BenchmarkReassignAfterOneWorkerDies(b *testing.B) {
	e := benchFleet(b, 1000, 400)
	e.Assign(tasks(0, 100_000), nil, true)
	e.Flush()
	i := 0
	for b.Loop() {
		id := fmt.Sprintf("w%04d", i%1000)
		e.RemoveWorker(id)
		e.Flush()
		b.StopTimer()
		e.Report(id, 400, nil, true) // it comes back (empty), ready to die again
		e.Flush()
		i++
		b.StartTimer()
	}
}

// BenchmarkPublishPath is a single supervisor's publish path per message:
// the dedup check, the sink's buffer and delivery goroutine (stdout, to
// /dev/null), and, with the window kept in a file (dedup.path), its
// records (each batch's keys as uncertain before the write, as delivered
// after: one write call per batch, the delivered records going with the
// next batch's); "postgres" is a leader's path with the window in the lease's
// database (a statement waited for per batch before it is written, one
// more queued after). msgs/s counts messages confirmed by the sink
// (docs/supervisor.md):
//
//	go test -run '^$' -bench PublishPath -benchtime 2000000x ./supervisor/
func BenchmarkPublishPath(b *testing.B) {
	for _, store := range []string{"memory", "file", "postgres"} {
		b.Run(store, func(b *testing.B) {
			devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer devnull.Close()
			stdout := os.Stdout
			os.Stdout = devnull // the stdout sink writes where os.Stdout is at Open
			sk, err := sink.Open(context.Background(), sink.Config{Type: sink.TypeStdout, Buffer: 65536, FlushTimeout: time.Minute}, nil)
			os.Stdout = stdout
			if err != nil {
				b.Fatal(err)
			}
			dd := dedup.New(5*time.Minute, 1_000_000)
			var st dedup.Store
			switch store {
			case "file":
				fs, err := dedup.OpenFile(filepath.Join(b.TempDir(), "window"), 5*time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				st = fs
			case "postgres": // a leader's path with high availability, for comparison
				dsn, name := testenv.Postgres(b), fmt.Sprintf("bench-%d", time.Now().UnixNano())
				l, err := lease.Open(context.Background(), dsn, name, "bench", "ws://bench/ws", time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Close()
				defer dropDedupRows(b, dsn, name)
				st = l.DedupLog(5*time.Minute, func(err error) { b.Error(err) })
			}
			if st != nil {
				defer st.Close()
				sk.OnSending(recordWith(st.Sending, slog.New(slog.DiscardHandler)))
				sk.OnDelivered(recordWith(st.Append, slog.New(slog.DiscardHandler)))
				sk.OnIdle(func() { _ = st.Flush() })
			}
			rooms := make([]string, 1000)
			for i := range rooms {
				rooms[i] = fmt.Sprintf("room-%04d", i)
			}
			data := []byte(`{"room":"room-0000","seq":123456,"text":"a message of about a hundred bytes, as a room sends"}`)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				task := rooms[i%len(rooms)]
				id := strconv.Itoa(i)
				now := time.Now()
				k := dedup.Key(task, id, nil)
				if !dd.FirstKey(k, now) {
					b.Fatal("a distinct message taken for a duplicate")
				}
				for sk.Pending() > 60000 { // keep up with the sink rather than drop
					runtime.Gosched()
				}
				if err := sk.Publish(ctx, sink.Message{TaskID: task, MessageID: id, Data: data, Key: k, At: now.UnixNano()}); err != nil {
					b.Fatal(err)
				}
			}
			if err := sk.Close(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if got := sk.Published(); got != uint64(b.N) {
				b.Fatalf("published %d of %d", got, b.N)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
