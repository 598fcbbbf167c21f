package supervisor

import (
	"net/http"

	"github.com/fulcrum-lb/fulcrum/console"
)

// withConsole serves the web console's pages (docs/console.md) at /ui/
// without a token: they hold no data, and read GET /workers, GET /tasks and
// GET /metrics with the token the user gives them. Everything else goes
// to api.
func (s *Server) withConsole(api http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ui/", console.Handler("supervisor"))
	mux.Handle("/ui", console.Handler("supervisor"))
	mux.Handle("/", api)
	return mux
}
