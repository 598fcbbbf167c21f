package gateway

import (
	"testing"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// The console's view and actions on an https upstream: the same URLs and
// source as GET /upstreams, and a change keeps the targets https (the
// console once mapped targets on its own, as http:// with no source).
func TestConsoleViewAndChangeOnHTTPSUpstream(t *testing.T) {
	g := newTestGateway(t, "upstreams:\n  secure: {tls: {}, targets: [{url: \"https://127.0.0.1:1\"}, {url: \"https://127.0.0.1:2\"}]}\n")
	check := func(when string) {
		t.Helper()
		for i, tv := range g.ConsoleUpstreams()[0].Targets {
			if want := g.Upstreams()[0].Targets[i]; tv.TargetView != want || tv.URL[:8] != "https://" {
				t.Errorf("%s: console view %+v, GET /upstreams %+v; want the same, https", when, tv.TargetView, want)
			}
		}
	}
	check("from the config")
	w := 3
	if err := g.ChangeTarget("secure", "127.0.0.1:1", TargetChange{Weight: &w}); err != nil {
		t.Fatal(err)
	}
	check("after a change")
	for _, ct := range g.rt.Load().ups["secure"].set.Load().targets {
		if err := config.SchemeFits(ct.URL, true); err != nil {
			t.Errorf("target set after a change: %v", err)
		}
	}
}

// A target drained from the console stays drained across a reload that
// keeps the file's targets, as a PUT's change does (the console changed
// the live targets but not the admin set a reload keeps, so the drained
// target came back).
func TestConsoleDrainSurvivesReload(t *testing.T) {
	text := "upstreams:\n  api: {targets: [{url: \"http://127.0.0.1:1\"}]}\n"
	g := newTestGateway(t, text)
	ts, err := config.ParseTargets([]byte(`[{url: "http://127.0.0.1:1"}, {url: "http://127.0.0.1:2"}, {url: "http://127.0.0.1:3"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.SetTargets("api", ts); err != nil {
		t.Fatal(err)
	}
	if err := g.ChangeTarget("api", "127.0.0.1:3", TargetChange{Drain: true}); err != nil {
		t.Fatal(err)
	}
	if err := g.ApplyConfig(testConfig(t, text)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tv := range g.Upstreams()[0].Targets {
		got = append(got, tv.URL+" "+tv.Source)
	}
	if len(got) != 2 || got[0] != "http://127.0.0.1:1 admin" || got[1] != "http://127.0.0.1:2 admin" {
		t.Fatalf("targets after the reload: %q, want the admin set without the drained one", got)
	}
}
