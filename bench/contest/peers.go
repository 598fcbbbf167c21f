package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

var lookPath = exec.LookPath

// The peers' configurations are equivalent to Fulcrum's: equal weights (a
// balancer may not read the providers' settings), keep-alive to the
// upstreams, one retry on a 503 to another upstream where the proxy can
// (nginx, HAProxy; Caddy retries only failed connections), and no passive
// ejection (nginx's max_fails would take a provider out for 10 s on its
// first 503).

func nginxContender(policy string) starter {
	return processContender("nginx", func(dir string, port int, urls []string) ([]string, error) {
		var servers strings.Builder
		for _, u := range urls {
			fmt.Fprintf(&servers, "    server %s max_fails=0;\n", strings.TrimPrefix(u, "http://"))
		}
		user := ""
		if os.Geteuid() == 0 {
			user = "user root;"
		}
		conf := fmt.Sprintf(`%s
daemon off;
worker_processes 2;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[2]s/body;
  proxy_temp_path %[2]s/proxy;
  fastcgi_temp_path %[2]s/fastcgi;
  uwsgi_temp_path %[2]s/uwsgi;
  scgi_temp_path %[2]s/scgi;
  upstream contest {
    %[3]s
%[4]s    keepalive 512;
  }
  server {
    listen 127.0.0.1:%[5]d;
    keepalive_requests 1000000;
    location / {
      proxy_pass http://contest;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_next_upstream error timeout http_503 http_429;
      proxy_next_upstream_tries 2;
    }
  }
}
`, user, dir, policy, servers.String(), port)
		path := filepath.Join(dir, "nginx.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		return []string{"-p", dir, "-e", filepath.Join(dir, "error.log"), "-c", path}, nil
	})
}

func haproxyContender(balance string) starter {
	return processContender("haproxy", func(dir string, port int, urls []string) ([]string, error) {
		var servers strings.Builder
		for i, u := range urls {
			fmt.Fprintf(&servers, "  server p%d %s\n", i, strings.TrimPrefix(u, "http://"))
		}
		conf := fmt.Sprintf(`global
  maxconn 4096
  nbthread 2
defaults
  mode http
  timeout connect 2s
  timeout client 60s
  timeout server 60s
  retries 1
  option redispatch 1
  retry-on 503 conn-failure empty-response
frontend f
  bind 127.0.0.1:%d
  default_backend contest
backend contest
  balance %s
  http-reuse always
%s`, port, balance, servers.String())
		path := filepath.Join(dir, "haproxy.cfg")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		return []string{"-db", "-f", path}, nil
	})
}

func caddyContender(policy string) starter {
	return processContender("caddy", func(dir string, port int, urls []string) ([]string, error) {
		hosts := make([]string, len(urls))
		for i, u := range urls {
			hosts[i] = strings.TrimPrefix(u, "http://")
		}
		conf := fmt.Sprintf(`{
	admin off
	auto_https off
}
http://127.0.0.1:%d {
	bind 127.0.0.1
	reverse_proxy %s {
		lb_policy %s
		transport http {
			keepalive 60s
			keepalive_idle_conns 512
		}
	}
}
`, port, strings.Join(hosts, " "), policy)
		path := filepath.Join(dir, "Caddyfile")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		return []string{"run", "--config", path, "--adapter", "caddyfile"}, nil
	})
}

// processContender runs bin as a child process with the config mk writes,
// and stops it (SIGTERM, then SIGKILL) when the contender is done.
func processContender(bin string, mk func(dir string, port int, urls []string) ([]string, error)) starter {
	return func(ctx context.Context, env *runEnv) (string, func(), error) {
		path, err := lookPath(bin)
		if err != nil {
			return "", nil, err
		}
		dir, err := os.MkdirTemp(env.dir, bin+"-")
		if err != nil {
			return "", nil, err
		}
		// A port free when freePort looked may be another socket's by
		// the time the peer binds it (an outgoing connection's ephemeral
		// port): a start that fails on that tries a fresh port.
		for attempt := 1; ; attempt++ {
			port, err := freePort()
			if err != nil {
				return "", nil, err
			}
			args, err := mk(dir, port, env.urls)
			if err != nil {
				return "", nil, err
			}
			url, stop, err := startProcess(env, dir, port, path, args, nil)
			if err != nil && attempt < 3 && strings.Contains(strings.ToLower(err.Error()), "address already in use") {
				continue
			}
			return url, stop, err
		}
	}
}

func startProcess(env *runEnv, dir string, port int, path string, args, extraEnv []string) (string, func(), error) {
	// The configuration written into dir goes into the result JSON (the
	// first instance's: a fleet's differ only in their ports).
	if env.config == "" {
		if fs, _ := os.ReadDir(dir); len(fs) > 0 {
			if b, err := os.ReadFile(filepath.Join(dir, fs[0].Name())); err == nil {
				env.config = string(b)
			}
		}
	}
	logf, err := os.Create(filepath.Join(dir, "output.log"))
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		// The whole process group: nginx's workers, for instance.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		logf.Close()
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	// Fail fast if it exits during start-up (a bad config).
	select {
	case err := <-exited:
		logf.Close()
		out, _ := os.ReadFile(filepath.Join(dir, "output.log"))
		return "", nil, fmt.Errorf("%s exited: %v: %s", filepath.Base(path), err, tail(string(out), 400))
	case <-time.After(200 * time.Millisecond):
	}
	return url, stop, nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// installPeers installs the peers that are missing with apt-get.
func installPeers(log *os.File) error {
	var missing []string
	for _, b := range []string{"nginx", "haproxy", "caddy"} {
		if _, err := lookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	fmt.Fprintf(log, "installing %s\n", strings.Join(missing, " "))
	for _, args := range [][]string{{"update"}, append([]string{"install", "-y"}, missing...)} {
		cmd := exec.Command("apt-get", args...)
		cmd.Stdout, cmd.Stderr = log, log
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("apt-get %s: %w", strings.Join(args, " "), err)
		}
	}
	// The packages start system services; the benchmark runs its own.
	for _, b := range missing {
		_ = exec.Command("systemctl", "stop", b).Run()
	}
	return nil
}
