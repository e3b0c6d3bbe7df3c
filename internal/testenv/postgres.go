package testenv

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	defaultPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	noPostgresHelp     = "no PostgreSQL server: run `make services` (scripts/services/ensure.sh), " +
		"or `apt-get install postgresql` and start it, or set RINGLIMIT_POSTGRES_URL"
)

var localPostgres struct {
	once sync.Once
	ok   bool
}

// PostgresURL returns a postgres:// URL to a database created for this test
// (ringlimit_test_<random>) and dropped WITH (FORCE) at cleanup. The server is
// the one in $RINGLIMIT_POSTGRES_URL (an admin URL, user with CREATEDB), else
// 127.0.0.1:5432 as user postgres when it answers, else a private server made
// with initdb and pg_ctl for this test (as user postgres when run as root).
func PostgresURL(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("RINGLIMIT_POSTGRES_URL")
	if admin == "" {
		localPostgres.once.Do(func() {
			localPostgres.ok = pgPing(defaultPostgresURL) == nil
		})
		if localPostgres.ok {
			admin = defaultPostgresURL
		} else {
			admin = startPostgres(t)
		}
	}
	name := randomName("ringlimit_test_")
	if err := pgExec(admin, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: CREATE DATABASE on %s: %v (%s)", redactURL(admin), err, noPostgresHelp)
	}
	t.Cleanup(func() {
		err := pgExec(admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		if err != nil && strings.Contains(err.Error(), "syntax error") { // PostgreSQL < 13
			err = pgExec(admin, "DROP DATABASE IF EXISTS "+name)
		}
		if err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	u, err := withPostgresDB(admin, name)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return u
}

func pgPing(connURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.Ping(ctx)
}

func pgExec(connURL, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	_, err = c.Exec(ctx, sql)
	return err
}

// withPostgresDB points a URL or keyword/value connection string at database db.
func withPostgresDB(conn, db string) (string, error) {
	if strings.HasPrefix(conn, "postgres://") || strings.HasPrefix(conn, "postgresql://") {
		u, err := url.Parse(conn)
		if err != nil {
			return "", fmt.Errorf("parse RINGLIMIT_POSTGRES_URL: %w", err)
		}
		u.Path, u.RawPath = "/"+db, ""
		return u.String(), nil
	}
	return conn + " dbname=" + db, nil // the last dbname wins
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// startPostgres makes a private cluster in a temp dir, on a free port, and
// returns its admin URL. The cluster is stopped and removed at cleanup.
func startPostgres(t testing.TB) string {
	t.Helper()
	binDir := ""
	if p := findBin([]string{"pg_ctl"}); p != "" && findBin([]string{filepath.Join(filepath.Dir(p), "initdb")}) != "" {
		binDir = filepath.Dir(p)
	} else {
		binDir = newestVersionDir("/usr/lib/postgresql/*/bin", func(d string) string { return filepath.Base(filepath.Dir(d)) })
	}
	if binDir == "" {
		t.Fatalf("testenv: nothing answers on 127.0.0.1:5432 and no initdb/pg_ctl found: %s", noPostgresHelp)
	}
	dir := privateDir(t, "rlpg")
	run := func(args ...string) *exec.Cmd { return exec.Command(args[0], args[1:]...) }
	if os.Geteuid() == 0 { // postgres refuses to run as root
		pw, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("testenv: running as root and there is no postgres user to run a private server as (%v): %s", err, noPostgresHelp)
		}
		uid, _ := strconv.Atoi(pw.Uid)
		gid, _ := strconv.Atoi(pw.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		runuser := findBin([]string{"runuser"}, "/usr/sbin", "/sbin")
		run = func(args ...string) *exec.Cmd {
			return exec.Command(runuser, append([]string{"-u", "postgres", "--"}, args...)...)
		}
	}
	sh := func(args ...string) error {
		cmd := run(args...)
		cmd.Dir = "/"
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v\n%s", filepath.Base(args[0]), err, out)
		}
		return nil
	}
	data, logPath := filepath.Join(dir, "data"), filepath.Join(dir, "log")
	pgCtl := filepath.Join(binDir, "pg_ctl")
	if err := sh(filepath.Join(binDir, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"--no-sync", "--no-locale", "-E", "UTF8"); err != nil {
		t.Fatalf("testenv: private PostgreSQL: %v", err)
	}
	t.Cleanup(func() { _ = sh(pgCtl, "-D", data, "-m", "immediate", "-w", "stop") })
	var err error
	for range 3 {
		port := FreePort(t)
		err = sh(pgCtl, "-D", data, "-l", logPath, "-w", "-t", "60", "-o",
			fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", port, dir), "start")
		if err == nil {
			return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		}
	}
	t.Fatalf("testenv: private PostgreSQL did not start: %v\n%s", err, logTail(logPath, 15))
	return ""
}
