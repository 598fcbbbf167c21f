package supervisor

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The console's pages need no token; GET /console/actions does, and names
// the operator endpoints this server has.
func TestConsoleRoutes(t *testing.T) {
	s := startServer(t, testConfig(nil))
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.Addr()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/ui/", ""); code != 200 || !strings.Contains(body, `data-component="supervisor"`) {
		t.Errorf("GET /ui/: %d %.200s", code, body)
	}
	if code, body := get("/console/actions", "wrong"); code != 401 {
		t.Errorf("GET /console/actions with a wrong token: %d %s", code, body)
	}
	code, body := get("/console/actions", testToken)
	var out struct{ Actions map[string]bool }
	if code != 200 || json.Unmarshal([]byte(body), &out) != nil || !out.Actions["rebalance"] || len(out.Actions) != len(consoleActions) {
		t.Errorf("GET /console/actions: %d %s, want rebalance present and every action named", code, body)
	}
}
