// Package console serves Fulcrum's web console: one set of static pages,
// embedded in the binary, that every admin listener (the gateway's admin
// address, `flow serve`, the supervisor's admin address) mounts at /ui/.
// The pages read and act only through that listener's admin API, in the
// browser, with the admin token the user types in; the assets themselves
// hold no data and are served without a token.
package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed ui
var files embed.FS

// Prefix is where Handler serves the console.
const Prefix = "/ui/"

// Components are the pages the console has, one per admin listener.
var Components = []string{"gateway", "flow", "supervisor"}

type options struct {
	peers map[string]string
}

// Option configures Handler.
type Option func(*options)

// Peer gives the console URL of another component (for example
// Peer("flow", "http://127.0.0.1:7070/ui/")), so the navigation links to it.
// Components without a peer are shown as not served here.
func Peer(component, url string) Option {
	return func(o *options) { o.peers[component] = url }
}

var indexTmpl = template.Must(template.ParseFS(files, "ui/index.html"))

// Handler serves the console for component ("gateway", "flow" or
// "supervisor") under /ui/. Mount it with mux.Handle("/ui/", h). It panics
// on an unknown component: that is a programming error, not input.
func Handler(component string, opts ...Option) http.Handler {
	known := false
	for _, c := range Components {
		known = known || c == component
	}
	if !known {
		panic(fmt.Sprintf("console: unknown component %q (known: %s)", component, strings.Join(Components, ", ")))
	}
	o := options{peers: map[string]string{}}
	for _, f := range opts {
		f(&o)
	}
	type navItem struct{ Name, URL, State string }
	var nav []navItem
	for _, c := range Components {
		switch {
		case c == component:
			nav = append(nav, navItem{c, Prefix, "current"})
		case o.peers[c] != "":
			nav = append(nav, navItem{c, o.peers[c], "peer"})
		default:
			nav = append(nav, navItem{c, "", "absent"})
		}
	}
	var index bytes.Buffer
	if err := indexTmpl.Execute(&index, map[string]any{"Component": component, "Nav": nav}); err != nil {
		panic("console: index template: " + err.Error()) // the template is embedded and fixed
	}
	page := index.Bytes()
	sub, _ := fs.Sub(files, "ui") // "ui" is embedded above
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "console: use GET", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		// Everything the pages load comes from this listener; nothing is
		// framed, nothing is guessed.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// The assets change with the binary, so the browser revalidates.
		h.Set("Cache-Control", "no-cache")
		name := strings.TrimPrefix(r.URL.Path, strings.TrimSuffix(Prefix, "/"))
		if name == "" {
			http.Redirect(w, r, Prefix, http.StatusMovedPermanently)
			return
		}
		name = strings.TrimPrefix(path.Clean(name), "/")
		if name == "" || name == "index.html" {
			h.Set("Content-Type", "text/html; charset=utf-8")
			if r.Method == http.MethodGet {
				_, _ = w.Write(page)
			}
			return
		}
		data, err := fs.ReadFile(sub, name)
		if err != nil || name == "index.html" {
			http.Error(w, "console: no file "+name, http.StatusNotFound)
			return
		}
		h.Set("Content-Type", contentType(name))
		if r.Method == http.MethodGet {
			_, _ = w.Write(data)
		}
	})
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	case ".json":
		return "application/json"
	}
	return "application/octet-stream"
}
