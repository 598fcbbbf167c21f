// Package store keeps flow tasks in SQLite, PostgreSQL or MySQL/MariaDB
// behind one Store interface. Open picks the database from the DSN's scheme.
//
// All three share one implementation (SQLStore) and differ only in the SQL a
// dialect supplies, chiefly the claim:
//
//   - PostgreSQL: one statement, UPDATE ... FROM (SELECT ... FOR UPDATE SKIP
//     LOCKED) RETURNING, batch writes through unnest(arrays), NOTIFY so that
//     long-polling servers elsewhere wake up.
//   - MySQL 8 / MariaDB 10.6+: SELECT ... FOR UPDATE SKIP LOCKED then UPDATE,
//     in one READ COMMITTED transaction, on an index covering the claim.
//   - SQLite: one writer connection (BEGIN IMMEDIATE), WAL, UPDATE ...
//     RETURNING.
//
// The state transitions themselves (set, expiry, cancel) are flow's pure
// functions; a store loads the rows under lock, applies them and writes the
// rows back in the same transaction. The conformance suite in storetest runs
// against every dialect.
package store
