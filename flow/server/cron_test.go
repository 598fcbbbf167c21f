package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/store"
	"github.com/fulcrum-lb/fulcrum/flow/store/storetest"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// cronSpeed: the children's clocks run this much faster than real time,
// so a one-minute cron ticks every 100 ms.
const cronSpeed = 600

// TestHelperCronServe is not a test: it is a server process of
// TestCronExactlyOnceServerKilled, on a fast clock shared by all of them.
func TestHelperCronServe(t *testing.T) {
	db := os.Getenv("FLOW_TEST_CRON_DB")
	if db == "" {
		t.Skip("helper process for TestCronExactlyOnceServerKilled")
	}
	r0, _ := strconv.ParseInt(os.Getenv("FLOW_TEST_CRON_R0"), 10, 64)
	base := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return base.Add(time.Duration(time.Now().UnixNano()-r0) * cronSpeed) }
	s, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DB: db, TablePrefix: os.Getenv("FLOW_TEST_CRON_PREFIX"),
		CronInterval: 10 * time.Millisecond, Clock: clock, Logger: quiet()})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("ADDR", s.Addr())
	select {} // until killed
}

// Three servers on one PostgreSQL database fire a per-minute cron; one is
// killed with SIGKILL while they fire. Every tick from the registration to
// the end has exactly one task: none missed, none doubled.
func TestCronExactlyOnceServerKilled(t *testing.T) {
	dsn, p := testenv.Postgres(t), storetest.Prefix()
	dropTables(t, dsn, p)
	r0 := strconv.FormatInt(time.Now().UnixNano(), 10)
	var procs []*exec.Cmd
	var addrs []string
	for i := 0; i < 3; i++ {
		cmd, addr := startHelper(t, "TestHelperCronServe", "FLOW_TEST_CRON_DB="+dsn, "FLOW_TEST_CRON_PREFIX="+p, "FLOW_TEST_CRON_R0="+r0)
		procs, addrs = append(procs, cmd), append(addrs, addr)
	}
	code, b := call(t, "POST", "http://"+addrs[0]+"/v1/register_task", `{"task_type":"tick","cron":"* * * * *","cron_stage":"run"}`)
	if code != 200 {
		t.Fatalf("register: %d %s", code, b)
	}
	st, err := store.Open(context.Background(), dsn, store.Options{TablePrefix: p, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	count := func() int64 {
		s, err := st.Stats(context.Background())
		if err != nil || len(s) == 0 {
			return 0
		}
		return s[0].Counts["pending"]
	}
	testenv.Eventually(t, "20 ticks fired", func() bool { return count() >= 20 })
	procs[2].Process.Kill() // SIGKILL, in the middle of firing
	procs[2].Wait()
	killedAt := count()
	testenv.Eventually(t, "20 more ticks fired by the survivors", func() bool { return count() >= killedAt+20 })
	for _, c := range procs[:2] {
		c.Process.Kill()
		c.Wait()
	}
	recs, err := st.ListTasks(context.Background(), store.ListFilter{TaskType: "tick", Limit: 100000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Time]int{}
	var first, last time.Time
	for _, r := range recs {
		seen[r.OrderTime]++
		if first.IsZero() || r.OrderTime.Before(first) {
			first = r.OrderTime
		}
		if r.OrderTime.After(last) {
			last = r.OrderTime
		}
	}
	tt, err := st.GetType(context.Background(), "tick")
	if err != nil {
		t.Fatal(err)
	}
	sch, _ := flow.ParseCron(tt.Cron)
	ticks := 0
	for tick := first; !tick.After(last); tick = sch.Next(tick) {
		ticks++
		if seen[tick] != 1 {
			t.Errorf("tick %v has %d tasks, want 1", tick, seen[tick])
		}
	}
	if ticks != len(recs) {
		t.Errorf("%d tasks for %d ticks from %v to %v", len(recs), ticks, first, last)
	}
	t.Logf("%d ticks, one task each; the third server was killed after %d", ticks, killedAt)
}
