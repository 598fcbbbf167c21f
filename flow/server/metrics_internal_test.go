package server

import (
	"context"
	"testing"

	"github.com/fulcrum-lb/fulcrum/flow"
	"github.com/fulcrum-lb/fulcrum/flow/client"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

// Every family the server defines is on /metrics at 0 before its first
// event. The families labelled by task type need a type to exist: they
// appear, at 0, as soon as one is registered, before any task of it.
func TestEveryMetricFamilyFromTheStart(t *testing.T) {
	s := start(t, Config{})
	perType := map[string]bool{"fulcrum_flow_tasks_created_total": true, "fulcrum_flow_tasks_held_total": true,
		"fulcrum_flow_queue_wait_seconds": true, "fulcrum_flow_tasks": true, "fulcrum_flow_oldest_pending_age_seconds": true}
	names := testenv.DescribedFamilies(s.m.own)
	got := testenv.ScrapeFamilies(t, s.URL()+"/metrics", "")
	for _, name := range names {
		if !got[name] && !perType[name] {
			t.Errorf("%s is not on /metrics at start", name)
		}
	}
	c, err := client.New([]string{s.URL()}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.RegisterTask(context.Background(), flow.TaskType{TaskType: "video"}); err != nil {
		t.Fatal(err)
	}
	got = testenv.ScrapeFamilies(t, s.URL()+"/metrics", "")
	for _, name := range names {
		if !got[name] {
			t.Errorf("%s is not on /metrics once a type is registered", name)
		}
	}
}
