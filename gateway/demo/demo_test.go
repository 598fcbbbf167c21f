package demo_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/fulcrum-lb/fulcrum/gateway/demo"
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
