// Package testenv gives tests real servers to talk to: Redis (single node
// and a 3-master Redis Cluster), PostgreSQL and MySQL/MariaDB.
//
// Every helper takes the test's testing.TB, never skips, and calls t.Fatalf
// with instructions when no server can be had. What each helper uses, in order:
//
//   - RedisURL: $RINGLIMIT_REDIS_URL; redis://127.0.0.1:6379/0 if it answers
//     PING; a private redis-server on a free port, stopped at cleanup.
//   - RedisServer: always a private redis-server (for tests that stop it).
//   - RedisCluster: always a private 3-master Redis Cluster.
//   - PostgresURL: a fresh database ringlimit_test_<random>, dropped at
//     cleanup, on $RINGLIMIT_POSTGRES_URL; on 127.0.0.1:5432 as postgres if it
//     answers; on a private initdb/pg_ctl server (slow: one per call).
//   - MySQLDSN: a fresh database ringlimit_test_<random>, dropped at cleanup,
//     on $RINGLIMIT_MYSQL_URL; on root@tcp(127.0.0.1:3306) if it answers; on a
//     private mariadbd (slow: one per call).
//
// `make services` (scripts/services/ensure.sh) installs and starts the shared
// servers and writes the RINGLIMIT_* variables to .cache/services.env.
//
// The shared Redis database is shared by every test package running at the
// same time: prefix keys with something unique to the test (t.Name() plus a
// random suffix). SQL helpers give each call its own database.
package testenv
