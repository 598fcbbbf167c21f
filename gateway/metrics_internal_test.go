package gateway

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// Every family the gateway defines is on /metrics right after start, at
// 0, before any request, check or discovery update: dashboards and alerts
// can be built first. (The split and rate-limit families are per route:
// they exist for the routes that have a split or a rate limit.) The families are read from the collectors
// themselves, so a metric added later without its series made at start
// fails here.
func TestEveryMetricFamilyFromTheStart(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "targets.yaml"), []byte("- {url: \"http://127.0.0.1:2\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "gw.yaml")
	body := "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\naccess_log: {enabled: false}\n" +
		"upstreams:\n  api:\n    targets: [{url: \"http://127.0.0.1:1\"}]\n" +
		"  web:\n    discovery: {file: {path: targets.yaml}}\n" +
		"routes: [{match: {path_prefix: /web}, upstream: web},\n" +
		"  {match: {path_prefix: /canary}, split: [{upstream: api, weight: 9}, {upstream: web, weight: 1}]},\n" +
		"  {upstream: api, rate_limit: {per_second: 10}}]\n"
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, Options{ConfigPath: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown(context.Background())
	got := testenv.ScrapeFamilies(t, "http://"+g.AdminAddr()+"/metrics", "")
	for _, name := range testenv.DescribedFamilies(g.metrics.own) {
		if !got[name] {
			t.Errorf("%s is not on /metrics at start", name)
		}
	}
}
