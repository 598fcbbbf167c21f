package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulcrum-lb/fulcrum/gateway"
	"github.com/fulcrum-lb/fulcrum/gateway/config"
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

// runGatewayCheck runs `fulcrum gateway --check` with args and returns its
// output or its error.
func runGatewayCheck(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out strings.Builder
	root := newRootCmd()
	root.SetOut(&out)
	root.SetArgs(append([]string{"gateway", "--check"}, args...))
	err := root.Execute()
	return out.String(), err
}

// A discovery file's relative path is read from the config's folder, not
// the working directory (the test runs in cmd/fulcrum), and --check
// fails on a file that is missing or does not parse.
func TestGatewayCheckDiscoveryFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("targets.yaml", "- {url: \"http://127.0.0.1:9001\"}\n")
	write("broken.yaml", "- {url: 9001}\n")
	cfg := func(path string) string {
		return "upstreams:\n  web:\n    discovery:\n      file: {path: " + path + "}\n"
	}
	for _, tc := range []struct {
		name, config, want string
		ok                 bool
	}{
		{"relative to the config", cfg("targets.yaml"), "ok (listen 127.0.0.1:8080", true},
		{"missing", cfg("gone.yaml"), "upstreams.web.discovery.file.path: discovery: file: open " + filepath.Join(dir, "gone.yaml"), false},
		{"does not parse", cfg("broken.yaml"), "upstreams.web.discovery.file.path", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runGatewayCheck(t, "--config", write("gw.yaml", tc.config))
			got := out
			if err != nil {
				got = err.Error()
			}
			if (err == nil) != tc.ok || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q (err %v), want ok=%v containing %q", got, err, tc.ok, tc.want)
			}
		})
	}
}

// --listen and --admin override the file, then their environment
// variables do; a bad value names the flag or the variable.
func TestGatewayListenFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:8080\nupstreams:\n  api:\n    targets: [{url: \"http://127.0.0.1:9\"}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  [2]string // FULCRUM_GATEWAY_LISTEN, FULCRUM_GATEWAY_ADMIN
		args []string
		want string
		ok   bool
	}{
		{"the file", [2]string{}, nil, "listen 127.0.0.1:8080, admin 127.0.0.1:9901", true},
		{"flags", [2]string{}, []string{"--listen", "127.0.0.1:18080", "--admin", "127.0.0.1:19901"}, "listen 127.0.0.1:18080, admin 127.0.0.1:19901", true},
		{"environment", [2]string{"127.0.0.1:28080", "off"}, nil, "listen 127.0.0.1:28080, admin off", true},
		{"flag over environment", [2]string{"127.0.0.1:28080", ""}, []string{"--listen", "127.0.0.1:18080"}, "listen 127.0.0.1:18080", true},
		{"bad flag", [2]string{}, []string{"--listen", "8080"}, `--listen: "8080" is not host:port`, false},
		{"bad variable", [2]string{"", "localhost"}, nil, `FULCRUM_GATEWAY_ADMIN: "localhost" is not host:port`, false},
		{"admin off loopback needs a token", [2]string{}, []string{"--admin", "0.0.0.0:19901"}, `admin.token: required because admin.listen "0.0.0.0:19901"`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envGatewayListen, tc.env[0])
			t.Setenv(envGatewayAdmin, tc.env[1])
			out, err := runGatewayCheck(t, append([]string{"--config", path}, tc.args...)...)
			got := out
			if err != nil {
				got = err.Error()
			}
			if (err == nil) != tc.ok || !strings.Contains(got, tc.want) {
				t.Fatalf("got %q (err %v), want ok=%v containing %q", got, err, tc.ok, tc.want)
			}
		})
	}
}

// A reload keeps the command line's addresses: without Options.Override
// the file's listen differs from the running one and the reload is
// refused, with it the reload applies. Real listeners.
func TestGatewayReloadKeepsListenOverride(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:8080\naccess_log: {enabled: false}\nupstreams:\n  api:\n    targets: [{url: \"http://127.0.0.1:9\"}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addrs := listenFlags{listen: "127.0.0.1:0", admin: "127.0.0.1:0"}
	cfg, err := config.LoadWith(path, addrs.override)
	if err != nil {
		t.Fatal(err)
	}
	for _, withOverride := range []bool{true, false} {
		opts := gateway.Options{ConfigPath: path}
		if withOverride {
			opts.Override = addrs.override
		}
		g, err := gateway.New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Start(); err != nil {
			t.Fatal(err)
		}
		err = g.Reload()
		if withOverride && err != nil {
			t.Errorf("reload with the override: %v", err)
		}
		if !withOverride && (err == nil || !strings.Contains(err.Error(), "listen")) {
			t.Errorf("reload without the override: %v, want a refused change of listen", err)
		}
		if err := g.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
