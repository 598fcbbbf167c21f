package config

import (
	"fmt"
	"net/url"
)

// UpstreamTLS is how the gateway connects to an upstream's https://
// targets. An upstream has https targets if and only if it has this block
// (tls: {} verifies against the system's CAs).
type UpstreamTLS struct {
	// CAFile is a PEM bundle of the CAs that sign the targets'
	// certificates (default: the system's).
	CAFile string `yaml:"ca_file"`
	// ServerName is the name sent as SNI and verified in the targets'
	// certificates (default: each target's host).
	ServerName string `yaml:"server_name"`
	// CertFile and KeyFile, both or neither, are the client certificate
	// the gateway presents (mutual TLS).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// upstreamTLS checks the tls block against the targets' schemes.
func (v *validator) upstreamTLS(u *Upstream, at func(keys ...any) []any) {
	if t := u.TLS; t != nil && (t.CertFile == "") != (t.KeyFile == "") {
		v.fail(at("tls"), "cert_file and key_file go together: give both or neither")
	}
	for i, t := range u.Targets {
		if err := SchemeFits(t.URL, u.TLS != nil); err != nil {
			v.fail(at("targets", i, "url"), "%v", err)
		}
	}
	if d := u.Discovery; d != nil && d.DNS != nil {
		d.DNS.Scheme = "http"
		if u.TLS != nil {
			d.DNS.Scheme = "https"
		}
	}
}

// SchemeFits checks a target URL's scheme against its upstream: https with
// a tls block, http without.
func SchemeFits(raw string, tls bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return nil // TargetAddr reports it
	}
	switch {
	case u.Scheme == "https" && !tls:
		return fmt.Errorf("%q: an https target needs the upstream's tls block (tls: {} for the system's CAs)", raw)
	case u.Scheme == "http" && tls:
		return fmt.Errorf("%q: the upstream has a tls block, so its targets are https", raw)
	}
	return nil
}
