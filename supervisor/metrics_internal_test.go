package supervisor

import (
	"testing"

	"github.com/fulcrum-lb/fulcrum/internal/testenv"
	"github.com/fulcrum-lb/fulcrum/supervisor/protocol"
)

// Every family the supervisor defines is on /metrics right after start,
// at 0, before any worker connects or any payload arrives.
func TestEveryMetricFamilyFromTheStart(t *testing.T) {
	s := startServer(t, testConfig([]protocol.Task{{TaskID: "a"}}))
	got := testenv.ScrapeFamilies(t, "http://"+s.Addr()+"/metrics", testToken)
	names := testenv.DescribedFamilies(s.m.own)
	if len(names) < 20 {
		t.Fatalf("only %d families described: %v", len(names), names)
	}
	for _, name := range names {
		if !got[name] {
			t.Errorf("%s is not on /metrics at start", name)
		}
	}
}
