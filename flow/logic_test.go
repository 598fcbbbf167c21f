package flow

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestBackoff(t *testing.T) {
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second}, {5, 10 * time.Second}, {60, 10 * time.Second}} {
		if got := Backoff(time.Second, 10*time.Second, c.n); got != c.want {
			t.Errorf("Backoff(1s, 10s, %d) = %v, want %v", c.n, got, c.want)
		}
	}
}

func TestNormalizeTaskTypeDefaults(t *testing.T) {
	got, err := NormalizeTaskType(TaskType{TaskType: "t"})
	if err != nil {
		t.Fatal(err)
	}
	want := TaskType{TaskType: "t", ScheduleLimit: 100, ScheduleIntervalMS: 1000, MaxProcessingMS: 60000, RetryIntervalMS: 1000, MaxRetryIntervalMS: 300000}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func TestParseStatus(t *testing.T) {
	for in, want := range map[string]Status{"pending": 1, "2": 2, "success": 3, "failed": 4, "5": 5} {
		if got, err := ParseStatus(in); err != nil || got != want {
			t.Errorf("ParseStatus(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "0", "6", "done"} {
		if _, err := ParseStatus(bad); err == nil {
			t.Errorf("ParseStatus(%q) accepted", bad)
		}
	}
}

// Property: a set refused for its lease leaves the record exactly as it
// was, and an accepted one always releases the hold and never leaves the
// task processing.
func TestApplySetProperties(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	rapid.Check(t, func(t *rapid.T) {
		exp := now.Add(time.Minute)
		r := Record{Task: Task{TaskID: "T", TaskStage: "s", Status: Status(rapid.IntRange(1, 5).Draw(t, "status")),
			Lease: rapid.SampledFrom([]string{"", "L"}).Draw(t, "lease"), Owner: "w", LeaseExpiry: &exp,
			CrtRetryNum: rapid.IntRange(0, 3).Draw(t, "crt"), MaxRetryNum: rapid.IntRange(0, 3).Draw(t, "max")},
			RetryIntervalMS: 100, MaxRetryIntervalMS: 1000}
		req := SetTaskRequest{TaskID: "T", Lease: rapid.SampledFrom([]string{"L", "M"}).Draw(t, "reqLease"),
			Status:    rapid.SampledFrom([]Status{StatusPending, StatusSuccess, StatusFailed}).Draw(t, "reqStatus"),
			TaskStage: rapid.SampledFrom([]string{"", "s", "next"}).Draw(t, "stage"),
			Error:     rapid.SampledFrom([]string{"", "boom"}).Draw(t, "err"), DelayMS: rapid.Int64Range(0, 5000).Draw(t, "delay")}
		before := r
		before.ScheduleLog = append([]LogEntry(nil), r.ScheduleLog...)
		err := ApplySet(&r, req, now)
		if err != nil {
			if !errors.Is(err, ErrStaleLease) || !reflect.DeepEqual(r, before) {
				t.Fatalf("refused set changed the record or wrong error: %v", err)
			}
			if before.Status == StatusProcessing && before.Lease == req.Lease {
				t.Fatalf("a matching lease was refused")
			}
			return
		}
		if r.Status == StatusProcessing || r.Lease != "" || r.Owner != "" || r.LeaseExpiry != nil {
			t.Fatalf("after set: %+v", r)
		}
		if r.CrtRetryNum > r.MaxRetryNum && r.CrtRetryNum != before.CrtRetryNum {
			t.Fatalf("retries %d over max %d", r.CrtRetryNum, r.MaxRetryNum)
		}
		if r.Status == StatusPending && r.OrderTime.Before(now.Add(time.Duration(req.DelayMS)*time.Millisecond)) {
			t.Fatalf("pending before its delay: %v", r.OrderTime)
		}
		if len(r.ScheduleLog) == 0 || len(r.ScheduleLog) > ScheduleLogSize {
			t.Fatalf("log length %d", len(r.ScheduleLog))
		}
	})
}
