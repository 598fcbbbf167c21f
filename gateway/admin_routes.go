package gateway

import (
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// RouteView is one compiled route as GET /routes shows it.
type RouteView struct {
	Index     int              `json:"index"`
	Match     config.Match     `json:"match"`
	Upstream  string           `json:"upstream,omitempty"`
	Split     []SplitSideView  `json:"split,omitempty"`
	SplitKey  string           `json:"split_key,omitempty"`
	RateLimit *RateLimitView   `json:"rate_limit,omitempty"`
	Rewrite   string           `json:"rewrite,omitempty"`
	Redirect  *config.Redirect `json:"redirect,omitempty"`
	// Headers says whether request_headers or response_headers change
	// anything.
	RequestHeaders  *config.HeaderOps `json:"request_headers,omitempty"`
	ResponseHeaders *config.HeaderOps `json:"response_headers,omitempty"`
}

// SplitSideView is one side of a split: its configured weight, its share
// now (a ramp's progress), and the requests it got.
type SplitSideView struct {
	Upstream    string  `json:"upstream"`
	Weight      int     `json:"weight"`
	WeightNow   float64 `json:"weight_now"`
	Ramp        string  `json:"ramp,omitempty"`
	RampPercent float64 `json:"ramp_percent"` // 100 once ramped (or without a ramp)
	Requests    int64   `json:"requests"`
	// UpstreamResponses and UpstreamErrors are the side's upstream's
	// answers and those with a 5xx status, the gateway's own 502, 503
	// and 504 included (fulcrum_gateway_requests_total): the request
	// path keeps no count per side and status, so where the upstream
	// also serves other routes these cover them too. A canary's own
	// upstream is its side's alone.
	UpstreamResponses int64 `json:"upstream_responses"`
	UpstreamErrors    int64 `json:"upstream_errors"`
}

// RateLimitView is a route's limit and how many requests it refused.
type RateLimitView struct {
	config.RateLimit
	Limited int64 `json:"limited"`
}

// Routes lists the live routes in file order.
func (g *Gateway) Routes() []RouteView {
	now := time.Now()
	var out []RouteView
	var answers map[string]upstreamAnswers
	for _, r := range g.rt.Load().router.all {
		rc := r.cfg
		v := RouteView{Index: r.index, Match: rc.Match, Upstream: rc.Upstream, SplitKey: rc.SplitKey, Redirect: rc.Redirect}
		if r.split != nil {
			if answers == nil {
				answers = g.upstreamAnswers()
			}
			for _, s := range r.split.sides {
				a := answers[s.up.name]
				sv := SplitSideView{Upstream: s.up.name, Weight: int(s.weight), WeightNow: s.share(now), RampPercent: 100, Requests: s.n.Load(),
					UpstreamResponses: a.responses, UpstreamErrors: a.errors}
				if s.ramp > 0 {
					sv.Ramp = s.ramp.String()
					sv.RampPercent = min(100, 100*float64(now.Sub(s.since))/float64(s.ramp))
				}
				v.Split = append(v.Split, sv)
			}
		}
		if r.limit != nil {
			rl := r.limit.cfg
			// The Redis URL may carry a password; the admin API shows
			// where, not how to log in.
			if u, err := url.Parse(rl.Shared); err == nil && rl.Shared != "" {
				rl.Shared = u.Redacted()
			}
			v.RateLimit = &RateLimitView{RateLimit: rl, Limited: r.limit.limited.Load()}
		}
		switch {
		case rc.StripPrefix:
			v.Rewrite = "strip_prefix"
		case rc.RewritePrefix != "":
			v.Rewrite = "rewrite_prefix " + rc.RewritePrefix
		}
		if r.reqHdr != nil {
			v.RequestHeaders = &rc.RequestHeaders
		}
		if r.respHdr != nil {
			v.ResponseHeaders = &rc.ResponseHeaders
		}
		out = append(out, v)
	}
	return out
}

type upstreamAnswers struct{ responses, errors int64 }

// upstreamAnswers sums fulcrum_gateway_requests_total per upstream: all
// its answers and the 5xx ones. Read at the admin's request, so the
// request path pays nothing for it.
func (g *Gateway) upstreamAnswers() map[string]upstreamAnswers {
	out := map[string]upstreamAnswers{}
	if g.metrics == nil {
		return out
	}
	ch := make(chan prometheus.Metric, 64)
	go func() {
		g.metrics.requests.Collect(ch)
		close(ch)
	}()
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		up, code := "", 0
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "upstream":
				up = l.GetValue()
			case "code":
				code, _ = strconv.Atoi(l.GetValue())
			}
		}
		n := int64(d.GetCounter().GetValue())
		a := out[up]
		a.responses += n
		if code >= 500 {
			a.errors += n
		}
		out[up] = a
	}
	return out
}
