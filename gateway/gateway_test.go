package gateway_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
	"github.com/fulcrum-lb/fulcrum/gateway/demo"
)

// startUpstreams starts n demo upstreams named upstream-1..n.
func startUpstreams(t *testing.T, n int) []*demo.Upstream {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = "127.0.0.1:0"
	}
	us, err := demo.StartAll(addrs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { demo.CloseAll(us) })
	return us
}

// targetsYAML renders targets for a config.
func targetsYAML(us []*demo.Upstream, extra string) string {
	var b strings.Builder
	for _, u := range us {
		fmt.Fprintf(&b, "      - {url: \"http://%s\"%s}\n", u.Addr, extra)
	}
	return b.String()
}

// startGateway parses cfgText and runs a gateway on ephemeral ports.
func startGateway(t *testing.T, cfgText string) *gateway.Gateway {
	t.Helper()
	if !strings.Contains(cfgText, "listen:") {
		cfgText = "listen: 127.0.0.1:0\nadmin: {listen: 127.0.0.1:0}\naccess_log: {enabled: false}\n" + cfgText
	}
	cfg, err := config.Parse([]byte(cfgText))
	if err != nil {
		t.Fatalf("config: %v\n%s", err, cfgText)
	}
	g, err := gateway.New(cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
	})
	return g
}

func get(t *testing.T, c *http.Client, url string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, strings.TrimSpace(string(b))
}

func TestSmoke(t *testing.T) {
	us := startUpstreams(t, 3)
	g := startGateway(t, "upstreams:\n  api:\n    targets:\n"+targetsYAML(us, ""))
	c := &http.Client{Timeout: 5 * time.Second}
	for i := 0; i < 6; i++ {
		code, body := get(t, c, "http://"+g.Addr()+"/")
		t.Log(code, body)
	}
}
