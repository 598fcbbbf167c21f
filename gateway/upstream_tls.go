package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/config"
)

// An upstream with a tls block has https:// targets. Its requests go
// through net/http (the fast path speaks plain HTTP/1.1 only): the fast
// path hands such a request's connection to the net/http server, which
// sends it with the upstream's own transport below. Health checks use
// the same transport.

// upstreamTransport makes the HTTP/1.1 transport for an upstream's https
// targets: its CAs, the SNI name to send and verify, its client
// certificate. A file that cannot be read fails the config (at start or
// reload), naming the field.
func upstreamTransport(cfg *config.Config, t *config.UpstreamTLS) (*http.Transport, error) {
	tc := &tls.Config{ServerName: t.ServerName, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.ca_file: %s holds no PEM certificate", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.cert_file, tls.key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	to := cfg.Timeouts
	return &http.Transport{
		DialContext:           (&net.Dialer{Timeout: to.Dial.D(), KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tc,
		TLSHandshakeTimeout:   to.Dial.D(),
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       to.UpstreamIdle.D(),
		ResponseHeaderTimeout: to.ResponseHeader.D(),
		DisableCompression:    true,
	}, nil
}

// checkSchemes refuses targets whose scheme does not fit the upstream
// (https with a tls block, http without).
func checkSchemes(u *upstream, ts []config.Target) error {
	for i, t := range ts {
		if err := config.SchemeFits(t.URL, u.cfg.TLS != nil); err != nil {
			return fmt.Errorf("[%d].url: %w", i, err)
		}
	}
	return nil
}
