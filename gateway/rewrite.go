package gateway

import (
	"bytes"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// A route's changes to what passes through it, compiled once: the path
// prefix stripped or replaced, headers removed, set and added both ways,
// or a redirect answered in place of the request. Every transport applies
// them the same way: the fast path and the own exchange as they write the
// head (parse.go, transport_h2.go) and the response's (relay.go,
// transport_h2.go), ReverseProxy's in its Rewrite and ModifyResponse.

type rewrite struct {
	prefixLen int    // how much of the path the route matched
	with      string // what replaces it ("" strips)
}

type headerOps struct {
	drop []string // lower case: removed, and replaced by set
	set  []kv     // canonical name, value
	add  []kv
}

type redirect struct {
	status   int
	location string
}

func compileRoute(r *route, rc *config.Route) {
	if rc.StripPrefix || rc.RewritePrefix != "" {
		n := len(rc.Match.PathPrefix)
		if rc.Match.Path != "" {
			n = len(rc.Match.Path)
		}
		r.rewrite = &rewrite{prefixLen: n, with: rc.RewritePrefix}
	}
	if rd := rc.Redirect; rd != nil {
		r.redirect = &redirect{status: rd.Status, location: rd.Location}
	}
	r.reqHdr = compileOps(rc.RequestHeaders)
	r.respHdr = compileOps(rc.ResponseHeaders)
}

func compileOps(h config.HeaderOps) *headerOps {
	if len(h.Set)+len(h.Add)+len(h.Remove) == 0 {
		return nil
	}
	ops := &headerOps{}
	for _, n := range h.Remove {
		ops.drop = append(ops.drop, strings.ToLower(n))
	}
	for _, n := range slices.Sorted(maps.Keys(h.Set)) {
		ops.drop = append(ops.drop, strings.ToLower(n))
		ops.set = append(ops.set, kv{http.CanonicalHeaderKey(n), h.Set[n]})
	}
	for _, n := range slices.Sorted(maps.Keys(h.Add)) {
		ops.add = append(ops.add, kv{http.CanonicalHeaderKey(n), h.Add[n]})
	}
	return ops
}

// drops reports whether a header of this name is removed (or replaced).
func (o *headerOps) drops(name []byte) bool {
	if o == nil {
		return false
	}
	for _, d := range o.drop {
		if len(d) == len(name) && h1.EqFold(name, d) {
			return true
		}
	}
	return false
}

// appendTo writes the set and added fields as HTTP/1.1 lines.
func (o *headerOps) appendTo(out []byte) []byte {
	if o == nil {
		return out
	}
	for _, l := range [][]kv{o.set, o.add} {
		for _, h := range l {
			out = append(out, h.name...)
			out = append(out, ": "...)
			out = append(out, h.value...)
			out = append(out, "\r\n"...)
		}
	}
	return out
}

// apply changes a net/http header map.
func (o *headerOps) apply(h http.Header) {
	if o == nil {
		return
	}
	for k := range h {
		if o.drops([]byte(k)) {
			delete(h, k)
		}
	}
	for _, x := range o.set {
		h[x.name] = []string{x.value}
	}
	for _, x := range o.add {
		h[x.name] = append(h[x.name], x.value)
	}
}

// appendURI appends uri (path and query, as received) with the path's
// matched prefix replaced; at least "/" is left.
func (rw *rewrite) appendURI(out, uri []byte) []byte {
	if rw == nil {
		return append(out, uri...)
	}
	path, query := uri, []byte(nil)
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		path, query = uri[:i], uri[i:]
	}
	rest, w := path[min(rw.prefixLen, len(path)):], rw.with
	if len(rest) > 0 && rest[0] == '/' && len(w) > 0 && w[len(w)-1] == '/' {
		rest = rest[1:] // one slash where the two meet
	}
	out = append(out, w...)
	switch {
	case len(rest) == 0:
		if len(w) == 0 {
			out = append(out, '/')
		}
	case rest[0] != '/' && (len(w) == 0 || w[len(w)-1] != '/'):
		out = append(out, '/')
	}
	out = append(out, rest...)
	return append(out, query...)
}

// location expands the redirect's {host}, {path} and {uri}.
func (rd *redirect) appendLocation(out, host, uri []byte) []byte {
	path := uri
	if i := bytes.IndexByte(uri, '?'); i >= 0 {
		path = uri[:i]
	}
	loc := rd.location
	for len(loc) > 0 {
		i := strings.IndexByte(loc, '{')
		if i < 0 {
			return append(out, loc...)
		}
		out = append(out, loc[:i]...)
		loc = loc[i:]
		switch {
		case strings.HasPrefix(loc, "{host}"):
			out, loc = append(out, host...), loc[len("{host}"):]
		case strings.HasPrefix(loc, "{path}"):
			out, loc = append(out, path...), loc[len("{path}"):]
		case strings.HasPrefix(loc, "{uri}"):
			out, loc = append(out, uri...), loc[len("{uri}"):]
		default:
			out, loc = append(out, '{'), loc[1:]
		}
	}
	return out
}
