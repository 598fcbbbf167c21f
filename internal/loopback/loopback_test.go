package loopback

import "testing"

func TestIs(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "127.0.0.1": true, "127.8.9.10": true, "::1": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false, "localhost.example.com": false,
	} {
		if got := Is(host); got != want {
			t.Errorf("Is(%q) = %v, want %v", host, got, want)
		}
	}
}
