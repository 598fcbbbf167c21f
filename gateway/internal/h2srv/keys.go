package h2srv

import (
	"net/http"
	"strings"
)

// Header names between HTTP/2's lower case and net/http's canonical
// form, the common ones without allocating.
var toCanonical, toLower = func() (map[string]string, map[string]string) {
	up, low := map[string]string{}, map[string]string{}
	for _, s := range []string{"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Accept-Ranges",
		"Age", "Authorization", "Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
		"Content-Length", "Content-Location", "Content-Range", "Content-Type", "Cookie", "Date", "Etag", "Expect",
		"Expires", "From", "Host", "If-Match", "If-Modified-Since", "If-None-Match", "If-Range",
		"If-Unmodified-Since", "Last-Modified", "Link", "Location", "Max-Forwards", "Origin", "Pragma", "Range",
		"Referer", "Retry-After", "Server", "Set-Cookie", "Te", "Trailer", "User-Agent", "Vary", "Via",
		"Www-Authenticate", "X-Content-Type-Options", "X-Forwarded-For", "X-Forwarded-Host",
		"X-Forwarded-Proto", "X-Frame-Options", "X-Request-Id", "X-Upstream", "Access-Control-Allow-Origin",
		"Strict-Transport-Security", "Alt-Svc", "Sec-Fetch-Dest", "Sec-Fetch-Mode", "Sec-Fetch-Site",
		"Upgrade-Insecure-Requests", "Idempotency-Key", "Traceparent", "Tracestate"} {
		l := strings.ToLower(s)
		up[l], low[s] = s, l
	}
	return up, low
}()

// canonicalKey is a request field's name (lower case on the wire) as
// net/http keys it.
func canonicalKey(lower string) string {
	if s, ok := toCanonical[lower]; ok {
		return s
	}
	return http.CanonicalHeaderKey(lower)
}

// lowerKey is a response field's name for the wire.
func lowerKey(k string) string {
	if s, ok := toLower[k]; ok {
		return s
	}
	return strings.ToLower(k)
}
