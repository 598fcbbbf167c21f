package flow

import (
	"encoding/json"
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
	for in, want := range map[string]Status{"pending": 1, "2": 2, "success": 3, "failed": 4, "5": 5, "waiting": 6} {
		if got, err := ParseStatus(in); err != nil || got != want {
			t.Errorf("ParseStatus(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "0", "7", "done"} {
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

// FuzzMarshalLog checks MarshalLog against json.Marshal, which the stored
// logs were written with before it had its own encoder: readers and the
// SQLite store's text append rely on the same bytes.
func FuzzMarshalLog(f *testing.F) {
	f.Add(int64(1795500653), int64(680339114), 0, "host-1/42", "download", "held", "")
	f.Add(int64(0), int64(0), 3600, "", "", "created", "")
	f.Add(int64(-62135596800), int64(5), -5400, `w "{"at":\`, "s<1>&", "failed", "boom\n\u2028 ü \xff")
	f.Add(int64(253402300800), int64(0), 0, "w", "s", "retry", "upstream 503")
	f.Add(int64(1), int64(1), 37, "w", "s", "pending", "")
	f.Add(int64(1), int64(0), 24*3600, "w", "s", "held", "") // an offset RFC 3339 cannot write
	f.Add(int64(1), int64(0), 0, "w", "a<b", "held", "")     // escaped alone
	f.Add(int64(1), int64(0), 0, `w"1`, "s", "held", "")     // escaped alone
	f.Add(int64(1), int64(0), 0, "w", "s", "failed", "x\ty") // escaped alone
	f.Fuzz(func(t *testing.T, sec, nsec int64, offSec int, worker, stage, event, errText string) {
		at := time.Unix(sec, nsec).In(time.FixedZone("z", offSec%(26*3600)))
		l := []LogEntry{{At: at, Worker: worker, Stage: stage, Event: event, Error: errText}, {At: at.UTC(), Event: event}}
		for n := range 3 {
			want, _ := json.Marshal(l[:n]) // nil for a time MarshalJSON refuses, as MarshalLog gives
			if n == 0 {
				want = []byte("[]")
			}
			if got := MarshalLog(l[:n]); string(got) != string(want) {
				t.Fatalf("MarshalLog(%+v)\n got %s\nwant %s", l[:n], got, want)
			}
		}
	})
}
