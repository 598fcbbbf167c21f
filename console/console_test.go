package console_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/console"
)

func serve(h http.Handler, method, path string) (*http.Response, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	resp := rec.Result()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The page names its component, links the peers it was given, and every
// asset it loads is served with its type from the binary.
func TestHandlerServesEmbeddedPages(t *testing.T) {
	h := console.Handler("flow", console.Peer("gateway", "http://gw.internal:9901/ui/"))
	resp, body := serve(h, "GET", "/ui/")
	if resp.StatusCode != 200 || !strings.Contains(body, `data-component="flow"`) {
		t.Fatalf("GET /ui/: %d\n%s", resp.StatusCode, body)
	}
	if !strings.Contains(body, `href="http://gw.internal:9901/ui/"`) {
		t.Errorf("index does not link the gateway peer:\n%s", body)
	}
	if !strings.Contains(body, `class="absent"`) || !strings.Contains(body, "supervisor") {
		t.Errorf("index does not show the supervisor as absent:\n%s", body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
	for path, typ := range map[string]string{
		"/ui/app.js": "text/javascript", "/ui/api.js": "text/javascript", "/ui/ui.js": "text/javascript",
		"/ui/gateway.js": "text/javascript", "/ui/routes.js": "text/javascript", "/ui/flow.js": "text/javascript", "/ui/supervisor.js": "text/javascript",
		"/ui/style.css": "text/css", "/ui/favicon.svg": "image/svg+xml",
	} {
		resp, body := serve(h, "GET", path)
		if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), typ) || body == "" {
			t.Errorf("GET %s: %d %q, %d bytes; want 200 %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body), typ)
		}
	}
	// Nothing outside the embedded ui folder, and no raw template.
	for _, path := range []string{"/ui/../console.go", "/ui/%2e%2e/console.go", "/ui/nope.js", "/ui/index.html/x"} {
		if resp, _ := serve(h, "GET", path); resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
	if _, body := serve(h, "GET", "/ui/index.html"); strings.Contains(body, "{{") {
		t.Errorf("index.html served unrendered")
	}
	if resp, _ := serve(h, "POST", "/ui/"); resp.StatusCode != 405 {
		t.Errorf("POST /ui/: %d, want 405", resp.StatusCode)
	}
	if resp, _ := serve(h, "GET", "/ui"); resp.StatusCode != 301 || resp.Header.Get("Location") != "/ui/" {
		t.Errorf("GET /ui: %d to %q, want a redirect to /ui/", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// The page loads nothing from elsewhere: no scheme-qualified URL in any
// asset (the console works with no network but its listener's).
func TestAssetsLoadNothingFromElsewhere(t *testing.T) {
	h := console.Handler("gateway")
	for _, path := range []string{"/ui/", "/ui/app.js", "/ui/api.js", "/ui/ui.js", "/ui/gateway.js", "/ui/flow.js", "/ui/supervisor.js", "/ui/style.css"} {
		_, body := serve(h, "GET", path)
		for _, bad := range []string{"https://", "http://", "//cdn", "@import"} {
			if strings.Contains(strings.ReplaceAll(body, "http://www.w3.org/2000/svg", ""), bad) {
				t.Errorf("%s contains %q", path, bad)
			}
		}
	}
}

func TestHandlerRefusesUnknownComponent(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `"gatway"`) {
			t.Errorf("recover() = %v, want a panic naming the component", r)
		}
	}()
	console.Handler("gatway")
}
