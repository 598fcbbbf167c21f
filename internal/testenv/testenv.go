// Package testenv gives tests the addresses of the real local services they
// use (PostgreSQL, MariaDB, Redis, RabbitMQ, NATS, etcd). When a service is down a
// test skips with a message saying what to start, except under CI=true, where
// a missing service fails the test: CI must never skip.
package testenv

import (
	"net"
	"os"
	"testing"
	"time"
)

// Service addresses; each can be overridden by the environment variable in
// its doc comment.
var (
	// PostgresDSN (FULCRUM_TEST_POSTGRES).
	PostgresDSN = env("FULCRUM_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	// MySQLDSN (FULCRUM_TEST_MYSQL), in go-sql-driver/mysql form.
	MySQLDSN = env("FULCRUM_TEST_MYSQL", "root@tcp(127.0.0.1:3306)/test?parseTime=true")
	// RedisAddr (FULCRUM_TEST_REDIS).
	RedisAddr = env("FULCRUM_TEST_REDIS", "127.0.0.1:6379")
	// AMQPURL (FULCRUM_TEST_AMQP).
	AMQPURL = env("FULCRUM_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/")
	// NATSURL (FULCRUM_TEST_NATS).
	NATSURL = env("FULCRUM_TEST_NATS", "nats://127.0.0.1:4222")
	// EtcdAddr (FULCRUM_TEST_ETCD), host:port of an etcd client listener.
	EtcdAddr = env("FULCRUM_TEST_ETCD", "127.0.0.1:2379")
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// start commands, for the skip message.
var startHint = map[string]string{
	"127.0.0.1:5432": "PostgreSQL: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
	"127.0.0.1:3306": "MariaDB: start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
	"127.0.0.1:6379": "Redis: redis-server --daemonize yes --port 6379 --save ''",
	"127.0.0.1:5672": "RabbitMQ: rabbitmq-server -detached",
	"127.0.0.1:4222": "NATS: nats-server -a 127.0.0.1 -p 4222 -js",
	"127.0.0.1:2379": "etcd (apt-get install etcd-server): etcd --data-dir /tmp/fulcrum-etcd --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 &",
}

// Need skips the test (fails it under CI=true) unless something listens on
// addr (host:port).
func Need(t testing.TB, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
		return
	}
	msg := "service at " + addr + " is down (" + err.Error() + "); start it"
	if h, ok := startHint[addr]; ok {
		msg += " with " + h
	}
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true: service tests may not skip)")
	}
	t.Skip(msg)
}

// Postgres returns the PostgreSQL DSN after checking the server is up.
func Postgres(t testing.TB) string { t.Helper(); Need(t, "127.0.0.1:5432"); return PostgresDSN }

// MySQL returns the MariaDB/MySQL DSN after checking the server is up.
func MySQL(t testing.TB) string { t.Helper(); Need(t, "127.0.0.1:3306"); return MySQLDSN }

// Redis returns the Redis address after checking the server is up.
func Redis(t testing.TB) string { t.Helper(); Need(t, RedisAddr); return RedisAddr }

// AMQP returns the RabbitMQ URL after checking the broker is up.
func AMQP(t testing.TB) string { t.Helper(); Need(t, "127.0.0.1:5672"); return AMQPURL }

// NATS returns the NATS URL after checking the server is up.
func NATS(t testing.TB) string { t.Helper(); Need(t, "127.0.0.1:4222"); return NATSURL }

// Etcd returns the etcd client endpoint (http://host:port) after checking
// the server is up.
func Etcd(t testing.TB) string { t.Helper(); Need(t, EtcdAddr); return "http://" + EtcdAddr }
