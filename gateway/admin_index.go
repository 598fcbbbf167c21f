package gateway

import (
	"net/http"
	"net/http/httptest"
)

// adminEndpoints are what the admin listener's index lists, in order; an
// entry shows only when the mux serves it (the console is optional).
var adminEndpoints = []struct{ method, path, what string }{
	{"GET", "/upstreams", "every upstream and its targets, live"},
	{"GET", "/upstreams/{name}", "one upstream"},
	{"GET", "/routes", "the routes in file order: splits with their ramps and requests, rate limits and their refusals, rewrites"},
	{"PUT", "/upstreams/{name}/targets", "replace an upstream's targets (JSON or YAML list)"},
	{"POST", "/reload", "re-read the config file"},
	{"GET", "/metrics", "Prometheus metrics"},
	{"GET", "/healthz", "200, or 503 while draining"},
	{"GET", "/debug/pprof/", "Go profiles"},
	{"GET", "/ui/", "the console"},
}

// adminIndex answers GET / with the endpoints this listener serves, so a
// first curl of the admin address shows where to go next.
func adminIndex(mux *http.ServeMux) http.HandlerFunc {
	type entry struct {
		Method string `json:"method"`
		Path   string `json:"path"`
		What   string `json:"what"`
	}
	return func(w http.ResponseWriter, r *http.Request) {
		var es []entry
		for _, e := range adminEndpoints {
			probe := httptest.NewRequest(e.method, e.path, nil)
			if _, pattern := mux.Handler(probe); pattern == "" {
				continue
			}
			es = append(es, entry{e.method, e.path, e.what})
		}
		writeJSON(w, 200, map[string]any{"service": "fulcrum gateway admin", "endpoints": es})
	}
}
