package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

const (
	defaultMySQLDSN = "root@tcp(127.0.0.1:3306)/"
	noMySQLHelp     = "no MySQL/MariaDB server: run `make services` (scripts/services/ensure.sh), " +
		"or `apt-get install mariadb-server` and start it, or set RINGLIMIT_MYSQL_URL"
)

var localMySQL struct {
	once sync.Once
	ok   bool
}

// MySQLDSN returns a go-sql-driver/mysql DSN to a database created for this
// test (ringlimit_test_<random>, dropped at cleanup), with parseTime=true and
// multiStatements=true. The server is the one in $RINGLIMIT_MYSQL_URL (a DSN
// such as root@tcp(127.0.0.1:3306)/), else root@tcp(127.0.0.1:3306) when it
// answers, else a private mariadbd started for this test.
func MySQLDSN(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("RINGLIMIT_MYSQL_URL")
	if admin == "" {
		localMySQL.once.Do(func() {
			localMySQL.ok = mysqlExec(defaultMySQLDSN, "SELECT 1") == nil
		})
		if localMySQL.ok {
			admin = defaultMySQLDSN
		} else {
			admin = startMariaDB(t)
		}
	}
	cfg, err := mysql.ParseDSN(admin)
	if err != nil {
		t.Fatalf("testenv: parse MySQL DSN %q: %v", admin, err)
	}
	cfg.DBName = ""
	adminDSN := cfg.FormatDSN()
	name := randomName("ringlimit_test_")
	if err := mysqlExec(adminDSN, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("testenv: CREATE DATABASE on %s: %v (%s)", cfg.Addr, err, noMySQLHelp)
	}
	t.Cleanup(func() {
		if err := mysqlExec(adminDSN, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	cfg.DBName = name
	cfg.ParseTime = true
	cfg.MultiStatements = true
	return cfg.FormatDSN()
}

func mysqlExec(dsn, stmt string) error {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 3 * time.Second
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return err
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = db.ExecContext(ctx, stmt)
	return err
}

// startMariaDB runs mariadb-install-db and mariadbd in a temp dir on a free
// port (root@localhost without password) and returns an admin DSN. The
// server is stopped and removed at cleanup.
func startMariaDB(t testing.TB) string {
	t.Helper()
	dirs := []string{"/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"}
	server := findBin([]string{"mariadbd", "mysqld"}, dirs...)
	installDB := findBin([]string{"mariadb-install-db", "mysql_install_db"}, dirs...)
	if server == "" || installDB == "" {
		t.Fatalf("testenv: nothing answers on 127.0.0.1:3306 and no mariadbd/mariadb-install-db found: %s", noMySQLHelp)
	}
	dir := privateDir(t, "rlmy")
	data := filepath.Join(dir, "data")
	userArgs := []string{}
	if os.Geteuid() == 0 { // mariadbd refuses to run as root unless told a user
		pw, err := user.Lookup("mysql")
		if err != nil {
			t.Fatalf("testenv: running as root and there is no mysql user to run a private server as (%v): %s", err, noMySQLHelp)
		}
		uid, _ := strconv.Atoi(pw.Uid)
		gid, _ := strconv.Atoi(pw.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatalf("testenv: %v", err)
		}
		userArgs = append(userArgs, "--user=mysql")
	}
	logPath := filepath.Join(dir, "install-db.log")
	p, err := startProc(installDB, append([]string{"--no-defaults", "--datadir=" + data,
		"--auth-root-authentication-method=normal", "--skip-test-db"}, userArgs...), logPath)
	if err != nil {
		t.Fatalf("testenv: %s: %v", installDB, err)
	}
	<-p.done
	if !p.cmd.ProcessState.Success() {
		t.Fatalf("testenv: %s failed: %s\n%s", installDB, p.cmd.ProcessState, logTail(logPath, 20))
	}
	for attempt := range 3 {
		port := FreePort(t)
		logPath = filepath.Join(dir, fmt.Sprintf("mariadbd-%d.log", attempt))
		args := append([]string{"--no-defaults", "--datadir=" + data, "--port=" + strconv.Itoa(port),
			"--bind-address=127.0.0.1", "--socket=" + filepath.Join(dir, "sock"),
			"--pid-file=" + filepath.Join(dir, "pid"), "--skip-log-bin", "--innodb-buffer-pool-size=16M",
			"--innodb-log-file-size=8M"}, userArgs...)
		p, err := startProc(server, args, logPath)
		if err != nil {
			t.Fatalf("testenv: %s: %v", server, err)
		}
		t.Cleanup(p.stop)
		dsn := fmt.Sprintf("root@tcp(127.0.0.1:%d)/", port)
		err = p.waitFor(60*time.Second, func() error { return mysqlExec(dsn, "SELECT 1") })
		if err == nil {
			return dsn
		}
		p.stop()
		if attempt == 2 {
			t.Fatalf("testenv: private mariadbd did not start: %v\n%s", err, logTail(logPath, 20))
		}
	}
	return ""
}
