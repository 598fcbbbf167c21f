package demo_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/fulcrum-lb/fulcrum/gateway/demo"
	"github.com/fulcrum-lb/fulcrum/internal/testenv"
)

func TestUpstreamsAnswerWithTheirName(t *testing.T) {
	us, err := demo.StartAll([]string{"127.0.0.1:0", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer demo.CloseAll(us)
	for i, u := range us {
		res, err := http.Get("http://" + u.Addr + "/anything")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		want := []string{"upstream-1\n", "upstream-2\n"}[i]
		if string(b) != want || res.Header.Get("X-Upstream") != want[:len(want)-1] {
			t.Errorf("%s answered %q (X-Upstream %q)", u.Addr, b, res.Header.Get("X-Upstream"))
		}
	}
	if _, err := demo.StartAll([]string{"127.0.0.1:0", us[0].Addr}); err == nil {
		t.Error("a taken address did not fail")
	}
}

// An upstream with permits serves that many at once and refuses one more
// at once with 503; a permit given back serves again. Real sockets.
func TestPermitsRefuseWithServiceUnavailable(t *testing.T) {
	us, err := demo.StartAllWith([]string{"127.0.0.1:0"}, []demo.Options{{Permits: 1, Latency: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	u := us[0]
	held := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+u.Addr+"/", nil)
		_, err := http.DefaultClient.Do(req)
		held <- err
	}()
	testenv.Eventually(t, "the first request holds the permit", func() bool { return u.InFlight() == 1 })
	res, err := http.Get("http://" + u.Addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable || res.Header.Get("Retry-After") != "0" {
		t.Errorf("a second request: %d %q (Retry-After %q), want 503 at once", res.StatusCode, b, res.Header.Get("Retry-After"))
	}
	cancel() // the first client leaves: its permit comes back
	<-held
	testenv.Eventually(t, "the permit given back", func() bool { return u.InFlight() == 0 })
	demo.CloseAll(us)
}
