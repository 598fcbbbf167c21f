package supervisor

import (
	"net/http"
	"net/http/httptest"
	"sync"

	"github.com/fulcrum-lb/fulcrum/console"
)

// withConsole serves the web console's pages (docs/console.md) at /ui/
// without a token: they hold no data, and read GET /workers, GET /tasks and
// GET /metrics with the token the user gives them. GET /console/actions
// (with the token) says which operator endpoints the API has. Everything
// else goes to api.
func (s *Server) withConsole(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ui/", console.Handler("supervisor"))
	mux.Handle("/ui", console.Handler("supervisor"))
	probe := &actionProbe{api: api}
	mux.HandleFunc("GET /console/actions", func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			unauthorized(w)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"actions": probe.get(r.Header.Get("Authorization"))})
	})
	mux.Handle("/", api)
	return mux
}

// consoleActions are the operator endpoints the console has buttons for,
// by name, with a path that answers a GET with 405 when the POST exists.
var consoleActions = map[string]string{
	"drain":     "/workers/x/drain",
	"rebalance": "/rebalance",
}

// actionProbe asks api once which of consoleActions it serves: a GET to a
// POST-only route answers 405 and does nothing, an unknown one 404.
type actionProbe struct {
	api  http.Handler
	mu   sync.Mutex
	have map[string]bool
}

func (p *actionProbe) get(auth string) map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.have == nil {
		have := map[string]bool{}
		for name, path := range consoleActions {
			req := httptest.NewRequest(http.MethodGet, path, nil)
			req.Header.Set("Authorization", auth)
			rec := httptest.NewRecorder()
			p.api.ServeHTTP(rec, req)
			have[name] = rec.Code == http.StatusMethodNotAllowed
		}
		p.have = have
	}
	return p.have
}
