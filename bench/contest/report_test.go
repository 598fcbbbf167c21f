package main

import (
	"reflect"
	"strings"
	"testing"
)

// TestStageRows: the per-stage table splits the measured phase at the
// change points, in whole seconds, and puts Fulcrum's rows against the
// best peer of each stage.
func TestStageRows(t *testing.T) {
	sc := mustScenario(t, `
name: stages
seed: 1
load: {connections: 10, warmup: 2s, duration: 8s}
providers:
  - name: a
    stages: [{at: 0s, permits: 5, avg_rtt: 50ms}, {at: 4s, permits: 8, avg_rtt: 50ms}]
  - name: b
    stages: [{at: 0s, permits: 5, avg_rtt: 50ms}, {at: 6500ms, permits: 2, avg_rtt: 50ms}]
`)
	rep := &Report{Scenario: sc, MaxPerSecond: sc.MaxSeries()}
	if got, want := stageWindows(rep), [][2]int{{2, 4}, {4, 7}, {7, 10}}; !reflect.DeepEqual(got, want) {
		t.Fatalf("windows %v, want %v (6.5 s starts at 7)", got, want)
	}
	per := func(v float64) []float64 {
		xs := make([]float64, 10)
		for i := range xs {
			xs[i] = v
		}
		return xs
	}
	ours := per(100)
	ours[4] = 40 // a stage lost to a late answer
	rep.Records = []Record{
		{Contender: "fulcrum capacity (learned)", Kind: "fulcrum", PerSecond: ours},
		{Contender: "nginx round robin", Kind: "peer", PerSecond: per(100)},
		{Contender: "haproxy roundrobin", Kind: "peer", PerSecond: per(90)},
	}
	head, rows := stageRows(rep)
	if want := []string{"contender", "2-4s", "4-7s", "7-10s"}; !reflect.DeepEqual(head, want) {
		t.Fatalf("head %v, want %v", head, want)
	}
	if want := []string{"fulcrum capacity (learned)", "200 (+0.0%)", "240 (-20.0%)", "300 (+0.0%)"}; !reflect.DeepEqual(rows[1], want) {
		t.Errorf("our row %v, want %v", rows[1], want)
	}
	if want := []string{"nginx round robin", "200", "300", "300"}; !reflect.DeepEqual(rows[2], want) {
		t.Errorf("peer row %v, want %v", rows[2], want)
	}
	if md := markdownStages(rep); !strings.Contains(md, "| fulcrum capacity (learned) | 200 (+0.0%) | 240 (-20.0%) | 300 (+0.0%) |") {
		t.Errorf("markdown:\n%s", md)
	}
}
