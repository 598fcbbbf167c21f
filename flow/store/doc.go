// Package store keeps flow tasks in SQLite, PostgreSQL or MySQL/MariaDB
// behind one Store interface. Open picks the database from the DSN's scheme.
//
// One implementation, SQLStore, holds everything the databases share: the
// Store methods, the state transitions (flow's pure functions: a store
// loads the rows under lock, applies them and writes the rows back in the
// same transaction), the schema versioning, the statements whose text is
// the same everywhere. What differs sits behind one internal interface,
// driver (driver.go), which each database implements in full in its own
// file; SQLStore calls it and never asks which database it has:
//
//   - postgres.go: the claim is one statement, UPDATE ... FROM (SELECT ...
//     FOR UPDATE SKIP LOCKED) RETURNING; batch writes go through
//     unnest(arrays); writes NOTIFY so that long-polling servers elsewhere
//     wake up; migrations under an advisory lock.
//   - mysql.go (MySQL 8 / MariaDB 10.6+): SELECT ... FOR UPDATE SKIP
//     LOCKED then UPDATE, in one READ COMMITTED transaction, on an index
//     covering the claim; multi-row INSERTs and UPDATEs joined to a list of
//     values; migrations under GET_LOCK.
//   - sqlite.go: one writer connection (BEGIN IMMEDIATE), WAL, UPDATE ...
//     RETURNING, hot statements prepared on the writer, writes committed in
//     groups (litewriter.go).
//
// A new database is a file with a driver, its open function and its entry
// in the drivers table (driver.go), and a line in store_test.go that runs
// the conformance suite (storetest) against it, as it runs against every
// driver here.
package store
