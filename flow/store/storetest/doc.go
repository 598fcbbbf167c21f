// Package storetest is the conformance suite every flow store passes: the
// same tests, run against SQLite, PostgreSQL and MariaDB/MySQL by the
// store package's tests (River's driver-test pattern).
package storetest
