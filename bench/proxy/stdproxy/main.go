// Command stdproxy is the baseline of the proxy benchmark: the standard
// library's httputil.ReverseProxy with round robin over the targets, as a
// Go program would write it in a few lines (default Transport settings
// except for a larger idle pool, so connection reuse is not the handicap).
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18084", "address")
	targets := flag.String("targets", "127.0.0.1:19001,127.0.0.1:19002,127.0.0.1:19003", "comma-separated host:port")
	defaultPool := flag.Bool("default-transport", false, "use http.DefaultTransport as is (2 idle connections per host)")
	flag.Parse()
	var urls []*url.URL
	for _, t := range strings.Split(*targets, ",") {
		urls = append(urls, &url.URL{Scheme: "http", Host: t})
	}
	var n atomic.Uint64
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if !*defaultPool {
		tr.MaxIdleConnsPerHost = 256
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(urls[n.Add(1)%uint64(len(urls))])
			pr.SetXForwarded()
		},
		Transport: tr,
	}
	log.Fatal(http.ListenAndServe(*listen, rp))
}
