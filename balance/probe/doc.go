// Package probe is the probe strategy, Google's Prequal (Wydrowski et
// al., NSDI 2024) carried on the traffic: each target reports with every
// response how many requests it is serving and how long it takes now (the
// Fulcrum-Load header, which Handler adds to a Go target), and a gateway
// keeps a small pool of each target's recent reports and picks by the
// hot-cold rule: a target whose requests in flight rank above a quantile
// of the candidates' is hot; among the cold ones the lowest latency wins.
// Reports count every gateway's requests, so gateways that share targets
// see each other's load, which no gateway's own counts show.
//
// Importing the package registers the strategy under Name in balance's
// default registry, as balance/capacity does. The caller feeds the
// reports as each response's header arrives:
//
//	if l, ok := probe.FromHeader(resp.Header); ok {
//		pick.ReportLoad(l)
//	}
package probe
