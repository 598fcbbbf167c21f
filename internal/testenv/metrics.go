package testenv

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// DescribedFamilies returns the metric family names cs describe, so a
// test can ask for every family a component defines without listing
// them (a metric added later is asked for too).
func DescribedFamilies(cs []prometheus.Collector) []string {
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for _, c := range cs {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if m := re.FindStringSubmatch(d.String()); m != nil {
				names = append(names, m[1])
			}
		}
	}
	return names
}

// ScrapeFamilies GETs a Prometheus text page (with the bearer token when
// not empty) and returns the families that have at least one sample; a
// histogram's _bucket, _sum and _count count for its family.
func ScrapeFamilies(t testing.TB, url, token string) map[string]bool {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	got := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.IndexAny(l, "{ ")
		if i < 0 {
			continue
		}
		name := l[:i]
		got[name] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				got[base] = true
			}
		}
	}
	return got
}
