package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestShortContest is the CI smoke test: the contest scenario in the short
// mode through the library contender, the gateway's learned capacity and
// one row of each peer (skipped, with a message, when not installed). It
// checks the run's outputs and that Fulcrum's learned capacity does its
// job; the full figures are docs/benchmarks.md's, taken by hand.
func TestShortContest(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark for about a minute")
	}
	out := t.TempDir()
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := run(ctx, options{
		scenario: "scenarios/contest.yaml",
		short:    true,
		out:      out,
		only:     `^(library capacity|fulcrum capacity \(learned\)|nginx round robin|haproxy leastconn|caddy least_conn)`,
	}, &log)
	t.Log("\n" + log.String())
	if err != nil {
		t.Fatal(err)
	}
	minShare := 0.5
	if raceEnabled {
		minShare = 0.2
	}
	got := map[string]Record{}
	for _, r := range rep.Records {
		got[r.Contender] = r
		if r.Skipped != "" {
			continue
		}
		if r.Successes <= 0 || len(r.PerSecond) == 0 {
			t.Errorf("%s: %d successes, %d seconds of throughput", r.Contender, r.Successes, len(r.PerSecond))
		}
		if r.Share <= 0 || r.Share > 1.1 {
			t.Errorf("%s: share of the maximum %.3f is impossible", r.Contender, r.Share)
		}
	}
	for _, name := range []string{"library capacity (learned)", "library capacity (configured)"} {
		r, ok := got[name]
		switch {
		case !ok || r.Skipped != "":
			t.Errorf("%s did not run: %+v", name, r)
		case r.Share < minShare:
			// Loose: seconds-long runs on a shared 2-core machine. A
			// balancer that lost its permits or its queue scores far less.
			t.Errorf("%s: %.1f%% of the maximum in the short run, want at least %.0f%%", name, 100*r.Share, 100*minShare)
		}
	}
	// The outputs: JSON with one record per contender, an SVG that parses,
	// the markdown table.
	b, err := os.ReadFile(filepath.Join(out, "contest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("contest.json: %v", err)
	}
	if len(back.Records) != len(rep.Records) || back.TheoreticalMax != rep.TheoreticalMax {
		t.Errorf("contest.json holds %d records (max %v), want %d (max %v)", len(back.Records), back.TheoreticalMax, len(rep.Records), rep.TheoreticalMax)
	}
	svg, err := os.ReadFile(filepath.Join(out, "contest.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Errorf("contest.svg is not well-formed XML: %v", err)
	}
	for _, r := range rep.Records {
		if r.Skipped == "" && !bytes.Contains(svg, []byte(esc(r.Contender))) {
			t.Errorf("contest.svg has no line for %s", r.Contender)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "contest.md"))
	if err != nil || !strings.Contains(string(md), "| library capacity (learned) |") {
		t.Errorf("contest.md: %v %q", err, md)
	}
}

func TestRunRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("load: {connections: 0, duration: 1s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    options
		want string
	}{
		{options{}, "-scenario is required"},
		{options{scenario: filepath.Join(dir, "missing.yaml")}, "no such file"},
		{options{scenario: bad}, "load.connections"},
		{options{scenario: "scenarios/steady.yaml", only: "("}, "-only"},
	} {
		_, err := run(context.Background(), tc.o, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one containing %q", tc.o, err, tc.want)
		}
	}
}
