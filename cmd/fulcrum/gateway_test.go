package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --check refuses what start would refuse, without starting anything:
// missing TLS files (the listener's or an upstream's CA) and a discovery
// provider the binary does not have.
func TestGatewayCheckRefusesWhatStartWould(t *testing.T) {
	dir := t.TempDir()
	ups := "upstreams:\n  api:\n    targets:\n      - {url: \"http://127.0.0.1:9\"}\n"
	for _, tc := range []struct{ name, config, want string }{
		{"listener TLS files", "tls: {cert_file: " + filepath.Join(dir, "nope.pem") + ", key_file: " + filepath.Join(dir, "nope.key") + "}\n" + ups, "tls"},
		{"upstream CA file", "upstreams:\n  api:\n    tls: {ca_file: " + filepath.Join(dir, "ca.pem") + "}\n    targets:\n      - {url: \"https://127.0.0.1:9\"}\n", "ca.pem"},
		{"unknown provider", "upstreams:\n  api:\n    discovery: {provider: consulx}\n", `no provider "consulx"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "gw.yaml")
			if err := os.WriteFile(path, []byte(tc.config), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := newGatewayCmd()
			cmd.SetArgs([]string{"--config", path, "--check"})
			cmd.SetOut(new(strings.Builder))
			err := cmd.Execute()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("--check: %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
