package flow

import (
	"sort"
	"strings"
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

// Pruning on PostgreSQL walks task ids up to the floor of its cutoff: every
// id made before the cutoff's millisecond sorts below it, none made at or
// after it does.
func TestTaskIDFloorSplitsByCreationTime(t *testing.T) {
	at := time.Date(2026, 11, 25, 1, 2, 3, 456789000, time.UTC)
	floor := TaskIDFloor(at)
	for i := 0; i < 1000; i++ {
		for _, id := range NewTaskIDs(at.Add(-time.Millisecond), 3) {
			if id >= floor {
				t.Fatalf("id %s made a millisecond before sorts at or above the floor %s", id, floor)
			}
		}
		for _, id := range NewTaskIDs(at, 3) {
			if id < floor {
				t.Fatalf("id %s made at the cutoff sorts below the floor %s", id, floor)
			}
		}
	}
	if f := TaskIDFloor(time.Unix(0, 0).Add(-time.Hour)); f != strings.Repeat("0", TaskIDLen) {
		t.Fatalf("floor before the epoch = %s", f)
	}
}
