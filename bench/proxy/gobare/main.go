// Command gobare is the floor under the proxy benchmark's TLS and HTTP/2
// rows: net/http's own server (its HTTP/2 server over TLS) answering every
// request itself as a demo upstream does, with no proxying. Whatever a
// proxy built on that server spends per request, it spends at least
// this; the nginxbare row (nginx answering itself) is the same floor for
// nginx.
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18085", "address")
	cert := flag.String("cert", "", "certificate file (PEM); with -key, serve TLS (HTTP/2 and HTTP/1.1 by ALPN)")
	key := flag.String("key", "", "key file (PEM)")
	flag.Parse()
	body := []byte("upstream-1\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		// The demo upstream's answer: same headers, same body.
		w.Header()["Content-Type"] = []string{"text/plain; charset=utf-8"}
		w.Header()["X-Upstream"] = []string{"upstream-1"}
		_, _ = w.Write(body)
	})
	srv := &http.Server{Addr: *listen, Handler: h}
	if *cert != "" {
		log.Fatal(srv.ListenAndServeTLS(*cert, *key))
	}
	log.Fatal(srv.ListenAndServe())
}
