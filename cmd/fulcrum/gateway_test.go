package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --check loads the TLS files as start would: missing ones fail it.
func TestGatewayCheckTLSFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	os.WriteFile(path, []byte("tls: {cert_file: "+filepath.Join(dir, "nope.pem")+", key_file: "+filepath.Join(dir, "nope.key")+"}\n"+
		"upstreams:\n  api:\n    targets:\n      - {url: \"http://127.0.0.1:9\"}\n"), 0o644)
	cmd := newGatewayCmd()
	cmd.SetArgs([]string{"--config", path, "--check"})
	cmd.SetOut(new(strings.Builder))
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "tls") {
		t.Fatalf("--check with missing TLS files: %v, want a tls error", err)
	}
}
