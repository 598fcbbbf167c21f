package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/internal/h1"
)

// The router: the routes compiled so that finding a request's costs the
// same at 10 routes and at 10,000. First match in file order still wins;
// the structure only narrows the candidates. Hosts go through a map (exact
// names, then each wildcard suffix of the name, then the routes for any
// host); within a host, paths through a map of exact paths and a radix
// tree of prefixes; the few candidates left are checked for methods,
// headers and query in file order.

// route is one compiled route.
type route struct {
	index    int // in the file: the lowest matching one wins
	up       *upstream
	cfg      *config.Route
	split    *split       // a weighted split, nil when the route names one upstream
	rewrite  *rewrite     // strip_prefix or rewrite_prefix; nil: the path as sent
	redirect *redirect    // answered in place of the request
	reqHdr   *headerOps   // request_headers; nil: none
	respHdr  *headerOps   // response_headers; nil: none
	limit    *rateLimiter // rate_limit, nil when none
	limited  prometheus.Counter
	methods  []string
	headers  []kv // lower-case name, value ("*": present)
	query    []kv // name, value ("*": present)
}

type kv struct{ name, value string }

// extra reports whether a request meets the route's conditions beyond
// host and path.
func (r *route) extra(q reqView) bool {
	if len(r.methods) > 0 {
		m, ok := q.method(), false
		for _, want := range r.methods {
			if string(m) == want {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for _, h := range r.headers {
		v, ok := q.header(h.name)
		if !ok || (h.value != "*" && string(v) != h.value) {
			return false
		}
	}
	for _, p := range r.query {
		v, ok := rawQueryValue(q.rawQuery(), p.name)
		if !ok || (p.value != "*" && string(v) != p.value) {
			return false
		}
	}
	return true
}

// reqView is what the router reads of a request, the same for both
// transports (a pointer in an interface: no allocation).
type reqView interface {
	method() []byte
	header(lowerName string) ([]byte, bool) // the first value
	cookie(name string) (string, bool)
	rawQuery() []byte
	path() []byte // the target's path as sent, without the query
}

// router holds the compiled routes of one configuration.
type router struct {
	hosts    map[string]*pathSet // exact host, lower case
	wild     map[string]*pathSet // ".example.com" for *.example.com, lower case
	wildLens [256]bool           // the lengths of wild's keys: only those suffixes are looked up
	any      *pathSet            // routes for any host
	all      []*route            // in file order
}

// pathSet is the routes of one host: exact paths and a prefix tree.
type pathSet struct {
	exact  map[string][]*route
	prefix radix
}

// newRouter compiles routes. A route whose rate_limit is unchanged from
// old's route at the same place keeps its limiter (its buckets); the
// limiters made new are in made, for the caller to close should the
// configuration not go live. Without a running gateway (g or its metrics
// nil: a --check, a test of the lookup) no limiter is made and nothing is
// counted.
func newRouter(routes []config.Route, ups map[string]*upstream, old *router, g *Gateway) (_ *router, made []*rateLimiter, _ error) {
	rt := &router{hosts: map[string]*pathSet{}, wild: map[string]*pathSet{}}
	set := func(m map[string]*pathSet, k string) *pathSet {
		if m[k] == nil {
			m[k] = &pathSet{exact: map[string][]*route{}}
		}
		return m[k]
	}
	for i, rc := range routes {
		r := &route{index: i, up: ups[rc.Upstream], cfg: &routes[i], methods: rc.Match.Methods}
		compileRoute(r, &routes[i])
		if len(rc.Split) > 0 {
			var was *split
			if old != nil && i < len(old.all) && old.all[i].split != nil && sameMatch(&old.all[i].cfg.Match, &rc.Match) {
				was = old.all[i].split
			}
			r.split = newSplit(&routes[i], i, ups, was, g, time.Now())
		}
		if rl := rc.RateLimit; rl != nil && g != nil && g.metrics != nil {
			if old != nil && i < len(old.all) && old.all[i].limit != nil && *old.all[i].cfg.RateLimit == *rl {
				r.limit = old.all[i].limit
			} else {
				idx := strconv.Itoa(i)
				dropped := g.metrics.rateDropped.WithLabelValues(idx)
				l, err := newRateLimiter(rl, i, g.log, dropped.Inc)
				if err != nil {
					for _, m := range made {
						m.close()
					}
					return nil, nil, fmt.Errorf("routes[%d].rate_limit: %w", i, err)
				}
				r.limit = l
				made = append(made, l)
			}
			r.limited = g.metrics.rateLimited.WithLabelValues(strconv.Itoa(i), routeTarget(&routes[i]))
		}
		for name, v := range rc.Match.Headers {
			r.headers = append(r.headers, kv{strings.ToLower(name), v})
		}
		for name, v := range rc.Match.Query {
			r.query = append(r.query, kv{name, v})
		}
		// Map order is random: fix it, so a failing condition is found the
		// same way every time.
		sort.Slice(r.headers, func(a, b int) bool { return r.headers[a].name < r.headers[b].name })
		sort.Slice(r.query, func(a, b int) bool { return r.query[a].name < r.query[b].name })
		rt.all = append(rt.all, r)
		var ps *pathSet
		switch h := strings.ToLower(rc.Match.Host); {
		case h == "":
			if rt.any == nil {
				rt.any = &pathSet{exact: map[string][]*route{}}
			}
			ps = rt.any
		case strings.HasPrefix(h, "*."):
			ps = set(rt.wild, h[1:])
			if len(h)-1 < len(rt.wildLens) {
				rt.wildLens[len(h)-1] = true
			}
		default:
			ps = set(rt.hosts, h)
		}
		if rc.Match.Path != "" {
			ps.exact[rc.Match.Path] = append(ps.exact[rc.Match.Path], r)
		} else {
			ps.prefix.insert(rc.Match.PathPrefix, r)
		}
	}
	return rt, made, nil
}

// find returns the route of the first route, in file order, that
// matches host (without port), path (without query) and q; nil if none.
func (rt *router) find(host, path []byte, q reqView) *route {
	var buf [128]byte
	lh := lower(buf[:0], host)
	best := (*route)(nil)
	if ps := rt.hosts[string(lh)]; ps != nil {
		best = ps.find(path, q, best)
	}
	// Every wildcard suffix of the host that some wildcard route has the
	// length of: "a.b.example.com" may try ".b.example.com",
	// ".example.com" and ".com".
	if len(rt.wild) > 0 {
		for i := 1; i < len(lh); i++ {
			if n := len(lh) - i; lh[i] == '.' && (n >= len(rt.wildLens) || rt.wildLens[n]) {
				if ps := rt.wild[string(lh[i:])]; ps != nil {
					best = ps.find(path, q, best)
				}
			}
		}
	}
	if rt.any != nil {
		best = rt.any.find(path, q, best)
	}
	return best
}

// upstream is the route's upstream for the request q (a split chooses
// one); nil for no route.
func (r *route) upstream(q reqView, clientIP func() string) *upstream {
	switch {
	case r == nil:
		return nil
	case r.split == nil:
		return r.up
	}
	sp := r.split
	keyed := sp.key.Kind != ""
	return sp.choose(requestKey(q, sp.key, sp.lkey, clientIP), keyed, time.Now())
}

// routeTarget names what a route sends to, for metrics: its upstream, or
// its split's upstreams joined by "+".
func routeTarget(rc *config.Route) string {
	if len(rc.Split) == 0 {
		return rc.Upstream
	}
	s := ""
	for i, sd := range rc.Split {
		if i > 0 {
			s += "+"
		}
		s += sd.Upstream
	}
	return s
}

// sameMatch reports whether two routes match the same requests (a reload
// that keeps a split's route keeps its ramp clocks).
func sameMatch(a, b *config.Match) bool {
	return fmt.Sprint(*a) == fmt.Sprint(*b)
}

// limiters lists the rate limiters in use.
func (rt *router) limiters() map[*rateLimiter]bool {
	m := map[*rateLimiter]bool{}
	for _, r := range rt.all {
		if r.limit != nil {
			m[r.limit] = true
		}
	}
	return m
}

// find returns best or an earlier route of ps that matches.
func (ps *pathSet) find(path []byte, q reqView, best *route) *route {
	if len(ps.exact) > 0 {
		if rs := ps.exact[string(path)]; rs != nil {
			best = first(rs, q, best)
		}
	}
	n := &ps.prefix.root
	for {
		best = first(n.routes, q, best)
		rest := path[len(n.label):]
		if len(rest) == 0 {
			return best
		}
		next := n.child(rest[0])
		if next == nil || len(rest) < len(next.label) || string(rest[:len(next.label)]) != next.label {
			return best
		}
		path, n = rest, next
	}
}

// first returns the first route of rs (in file order) earlier than best
// that matches q, else best.
func first(rs []*route, q reqView, best *route) *route {
	for _, r := range rs {
		if best != nil && r.index >= best.index {
			return best
		}
		if r.extra(q) {
			return r
		}
	}
	return best
}

// radix is a prefix tree of path prefixes over bytes.
type radix struct{ root rnode }

type rnode struct {
	label  string // the bytes from the parent to here
	routes []*route
	first  []byte // kids' first bytes, sorted
	kids   []*rnode
}

func (n *rnode) child(c byte) *rnode {
	// Binary search by hand: sort.Search's closure costs a call per step.
	lo, hi := 0, len(n.first)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if n.first[m] < c {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(n.first) && n.first[lo] == c {
		return n.kids[lo]
	}
	return nil
}

func (t *radix) insert(prefix string, r *route) {
	n := &t.root
	for {
		if prefix == "" {
			n.routes = append(n.routes, r) // file order: routes come in it
			return
		}
		k := n.child(prefix[0])
		if k == nil {
			n.add(&rnode{label: prefix, routes: []*route{r}})
			return
		}
		common := 0
		for common < len(k.label) && common < len(prefix) && k.label[common] == prefix[common] {
			common++
		}
		if common < len(k.label) {
			// Split k: the shared part becomes a node above it.
			mid := &rnode{label: k.label[:common]}
			k.label = k.label[common:]
			mid.add(k)
			n.replace(prefix[0], mid)
			k = mid
		}
		n, prefix = k, prefix[common:]
	}
}

func (n *rnode) add(k *rnode) {
	i := sort.Search(len(n.first), func(i int) bool { return n.first[i] >= k.label[0] })
	n.first = append(n.first, 0)
	copy(n.first[i+1:], n.first[i:])
	n.first[i] = k.label[0]
	n.kids = append(n.kids, nil)
	copy(n.kids[i+1:], n.kids[i:])
	n.kids[i] = k
}

func (n *rnode) replace(c byte, k *rnode) {
	i := sort.Search(len(n.first), func(i int) bool { return n.first[i] >= c })
	n.kids[i] = k
}

// lower appends b in lower case to dst.
func lower(dst, b []byte) []byte {
	for _, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	return dst
}

// rawQueryValue finds name's value in a raw query string, as sent.
func rawQueryValue(q []byte, name string) ([]byte, bool) {
	for len(q) > 0 {
		part := q
		if i := bytes.IndexByte(q, '&'); i >= 0 {
			part, q = q[:i], q[i+1:]
		} else {
			q = nil
		}
		k, v := part, []byte(nil)
		if i := bytes.IndexByte(part, '='); i >= 0 {
			k, v = part[:i], part[i+1:]
		}
		if string(k) == name {
			return v, true
		}
	}
	return nil, false
}

// h1View is the fast path's request as the router reads it.
type h1View h1.Request

func (v *h1View) method() []byte { return v.Method }

func (v *h1View) header(name string) ([]byte, bool) {
	for _, h := range v.Headers {
		if len(h.Name) == len(name) && h1.EqFold(h.Name, name) {
			return h.Value, true
		}
	}
	return nil, false
}

func (v *h1View) cookie(name string) (string, bool) {
	for _, h := range v.Headers {
		if len(h.Name) == 6 && h1.EqFold(h.Name, "cookie") {
			if c, ok := cookieValue(h.Value, name); ok {
				return c, true
			}
		}
	}
	return "", false
}

func (v *h1View) rawQuery() []byte {
	if i := bytes.IndexByte(v.URI, '?'); i >= 0 {
		return v.URI[i+1:]
	}
	return nil
}

func (v *h1View) path() []byte {
	if i := bytes.IndexByte(v.URI, '?'); i >= 0 {
		return v.URI[:i]
	}
	return v.URI
}

// httpView is a net/http request as the router reads it.
type httpView http.Request

func (v *httpView) method() []byte { return []byte(v.Method) }

func (v *httpView) header(name string) ([]byte, bool) {
	vs := (*http.Request)(v).Header.Values(name)
	if len(vs) == 0 {
		return nil, false
	}
	return []byte(vs[0]), true
}

func (v *httpView) cookie(name string) (string, bool) {
	c, err := (*http.Request)(v).Cookie(name)
	if err != nil {
		return "", false
	}
	return c.Value, true
}

func (v *httpView) rawQuery() []byte { return []byte(v.URL.RawQuery) }

func (v *httpView) path() []byte { return []byte(v.URL.EscapedPath()) }
