package flow

import (
	"sort"
	"testing"
	"time"
)

func TestTaskIDs(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	a := NewTaskIDs(now, 1000)
	b := NewTaskIDs(now.Add(time.Millisecond), 3)
	if !sort.StringsAreSorted(a) {
		t.Fatal("a batch's ids are not in request order")
	}
	if b[0] <= a[len(a)-1] {
		t.Fatal("a later millisecond sorts before an earlier one")
	}
	seen := map[string]bool{}
	for _, id := range append(a, b...) {
		if err := ValidateTaskID("task_id", id); err != nil {
			t.Fatal(err)
		}
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
	if err := ValidateTaskID("cursor", "01arz3ndektsv4rrffq69g5fav"); err == nil {
		t.Fatal("lower case accepted")
	}
}
