package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	_ "github.com/go-sql-driver/mysql"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestFreePort(t *testing.T) {
	p := FreePort(t)
	if p <= 0 || p > 65535 {
		t.Fatalf("FreePort = %d", p)
	}
	l, err := net.Listen("tcp", FreeAddr(t))
	if err != nil {
		t.Fatalf("FreeAddr not bindable: %v", err)
	}
	l.Close()
}

func TestRedisURL(t *testing.T) {
	opt, err := redis.ParseURL(RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	key := randomName("testenv:")
	if err := c.Set(ctx(t), key, "v", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Get(ctx(t), key).Result(); err != nil || got != "v" {
		t.Fatalf("GET = %q, %v", got, err)
	}
}

func TestRedisServer(t *testing.T) {
	addr, stop := RedisServer(t)
	if addr == "127.0.0.1:6379" {
		t.Fatal("RedisServer returned the shared server")
	}
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	if err := c.Ping(ctx(t)).Err(); err != nil {
		t.Fatal(err)
	}
	stop()
	stop() // idempotent
	if err := c.Ping(ctx(t)).Err(); err == nil {
		t.Fatal("PING succeeded after stop")
	}
}

func TestRedisCluster(t *testing.T) {
	seeds := RedisCluster(t)
	if len(seeds) != 3 {
		t.Fatalf("seeds = %v", seeds)
	}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds[:1]})
	defer c.Close()
	for i := range 50 { // spread over all three masters
		k := fmt.Sprintf("k%d", i)
		if err := c.Set(ctx(t), k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	var masters atomic.Int32 // ForEachMaster runs fn concurrently
	err := c.ForEachMaster(ctx(t), func(ctx context.Context, m *redis.Client) error {
		n, err := m.DBSize(ctx).Result()
		if err == nil && n > 0 {
			masters.Add(1)
		}
		return err
	})
	if err != nil || masters.Load() != 3 {
		t.Fatalf("keys on %d masters, err %v", masters.Load(), err)
	}
}

func checkPostgres(t *testing.T, url string) string {
	conn, err := pgx.Connect(ctx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx(t), "CREATE TABLE x (n int); INSERT INTO x VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	var db string
	if err := conn.QueryRow(ctx(t), "SELECT current_database()").Scan(&db); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(db, "ringlimit_test_") {
		t.Fatalf("current_database() = %q", db)
	}
	return db
}

func TestPostgresURL(t *testing.T) {
	var url, db string
	t.Run("use", func(t *testing.T) {
		url = PostgresURL(t)
		db = checkPostgres(t, url)
	})
	// The subtest's cleanup dropped the database.
	admin, err := withPostgresDB(url, "postgres")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx(t), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(ctx(t), "SELECT count(*) FROM pg_database WHERE datname = $1", db).Scan(&n); err != nil || n != 0 {
		t.Fatalf("database %s still there after cleanup (count %d, %v)", db, n, err)
	}
}

func checkMySQL(t *testing.T, dsn string) string {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx(t), "CREATE TABLE x (n INT, at DATETIME); INSERT INTO x VALUES (1, NOW())"); err != nil {
		t.Fatal(err)
	}
	var name string
	var at time.Time // parseTime=true
	if err := db.QueryRowContext(ctx(t), "SELECT DATABASE(), at FROM x").Scan(&name, &at); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(name, "ringlimit_test_") {
		t.Fatalf("DATABASE() = %q", name)
	}
	return name
}

func TestMySQLDSN(t *testing.T) {
	var dsn, name string
	t.Run("use", func(t *testing.T) {
		dsn = MySQLDSN(t)
		name = checkMySQL(t, dsn)
	})
	db, err := sql.Open("mysql", strings.Replace(dsn, "/"+name, "/", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", name).Scan(&n); err != nil || n != 0 {
		t.Fatalf("database %s still there after cleanup (count %d, %v)", name, n, err)
	}
}

// The fallbacks used when no shared server answers.

func TestPrivatePostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private PostgreSQL server (about 2 s); skipped with -short")
	}
	t.Setenv("RINGLIMIT_POSTGRES_URL", startPostgres(t))
	checkPostgres(t, PostgresURL(t))
}

func TestPrivateMariaDB(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private mariadbd (a few seconds); skipped with -short")
	}
	t.Setenv("RINGLIMIT_MYSQL_URL", startMariaDB(t))
	checkMySQL(t, MySQLDSN(t))
}
