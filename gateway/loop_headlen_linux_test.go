package gateway

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// headLenTwoScans is the rule headLen keeps (internal/h1's: a head ends
// at the first CRLF CRLF or bare LF LF, whichever closes first), written
// the plain way.
func headLenTwoScans(b []byte) int {
	i := bytes.Index(b, []byte("\r\n\r\n"))
	j := bytes.Index(b, []byte("\n\n"))
	switch {
	case i >= 0 && (j < 0 || i+2 <= j):
		return i + 4
	case j >= 0:
		return j + 2
	}
	return 0
}

func TestHeadLen(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
	}{
		{"", 0},
		{"GET / HTTP/1.1\r\nHost: a\r\n", 0},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", 27},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /next", 27},
		{"GET / HTTP/1.1\nHost: a\n\n", 24},
		{"GET / HTTP/1.1\r\nHost: a\n\r\n", 0}, // LF CR LF is not a blank line
		{"\n\n", 2},
		{"\r\n\r\n", 4},
		{"a\r\n\n", 4},
	} {
		if got := headLen([]byte(c.in)); got != c.want {
			t.Errorf("headLen(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	// Against the plain rule, on inputs made of the bytes that matter.
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []byte("\r\na")
	for range 200000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if got, want := headLen(b), headLenTwoScans(b); got != want {
			t.Fatalf("headLen(%q) = %d, want %d", b, got, want)
		}
	}
}
