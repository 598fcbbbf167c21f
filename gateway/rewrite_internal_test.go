package gateway

import "testing"

func TestRewriteURI(t *testing.T) {
	for _, tc := range []struct {
		prefix, with, uri, want string
	}{
		{"/api/", "", "/api/users?x=1", "/users?x=1"},
		{"/api", "", "/api/users", "/users"},
		{"/api", "", "/api", "/"},
		{"/api/", "", "/api/", "/"},
		{"/api", "", "/apix", "/x"},
		{"/v1", "/v2/", "/v1?q=2", "/v2/?q=2"},
		{"/v1", "/v2/", "/v1/a", "/v2/a"},
		{"/v1/", "/v2", "/v1/a", "/v2/a"},
		{"/v1", "/v2", "/v1", "/v2"},
		{"/", "/base/", "/x/y", "/base/x/y"},
		{"/", "", "/", "/"},
	} {
		rw := &rewrite{prefixLen: len(tc.prefix), with: tc.with}
		if got := string(rw.appendURI(nil, []byte(tc.uri))); got != tc.want {
			t.Errorf("%s → %q on %s: %q, want %q", tc.prefix, tc.with, tc.uri, got, tc.want)
		}
	}
}

func FuzzRewriteURI(f *testing.F) {
	f.Add(4, "/v2/", "/api/x?y")
	f.Fuzz(func(t *testing.T, n int, with, uri string) {
		if n < 0 || n > 64 || len(uri) == 0 || uri[0] != '/' || (with != "" && with[0] != '/') {
			return
		}
		got := (&rewrite{prefixLen: n, with: with}).appendURI(nil, []byte(uri))
		if len(got) == 0 || got[0] != '/' {
			t.Fatalf("%q from %d, %q, %q", got, n, with, uri)
		}
	})
}
