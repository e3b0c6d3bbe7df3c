#!/usr/bin/env bash
# scripts/services/ensure.sh - make sure the servers the adapter tests need answer
# on loopback, installing (Debian packages) and starting them when they do not.
#
# Usage:   bash scripts/services/ensure.sh [ENVFILE]        (default ENVFILE: .cache/services.env)
#
# Output:  ENVFILE is (re)written with shell `export` lines, to be sourced before `go test`:
#            export RINGLIMIT_REDIS_URL='redis://127.0.0.1:6379/0'
#            export RINGLIMIT_POSTGRES_URL='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'
#            export RINGLIMIT_MYSQL_URL='root@tcp(127.0.0.1:3306)/'
#          stdout gets one progress line per service ("ensure: redis: ..."). Exit status is
#          non-zero if any requested service could not be made to answer (within WAIT_SECONDS).
#
# Makefile:
#   services:
#   	bash scripts/services/ensure.sh .cache/services.env
#   test: services
#   	. ./.cache/services.env && go test ./...
#
# Behaviour per service (idempotent; running it twice is a no-op the second time):
#   - RINGLIMIT_<X>_URL already set in the environment: passed through untouched, not checked.
#   - Server answers on its loopback port: nothing is done (works as non-root).
#   - Otherwise (root needed for installing / system servers):
#       redis     apt-get install redis-server if missing; redis-server --daemonize yes
#                 --save '' --appendonly no on 127.0.0.1:$REDIS_PORT (dir /var/tmp/ringlimit-redis-PORT).
#       postgres  apt-get install postgresql if missing; start the installed cluster whose port is
#                 $PG_PORT with pg_ctlcluster; if there is none (or it fails) create/start a private
#                 cluster in $RINGLIMIT_PG_DIR (initdb as user postgres, trust auth, 127.0.0.1:$PG_PORT).
#                 If it answers but user postgres cannot log in over TCP without a password, a
#                 `host all all 127.0.0.1/32 trust` line is prepended to the installed cluster's
#                 pg_hba.conf and the cluster reloaded.
#       mariadb   apt-get install mariadb-server if missing; mariadb-install-db if $MYSQL_DATADIR is
#                 empty; start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd.
#                 If root cannot log in over TCP without a password, root@localhost and
#                 root@127.0.0.1 get an empty password (done over the unix socket as OS root).
#   - nft (nftables), for the chaos suite's network partitions: installed when root and missing.
#   - promtool, for deploy/'s checks of /metrics, the alerting rules and the dashboard: the Debian
#     package prometheus (with --no-install-recommends) is installed when root and promtool is
#     missing. The package also brings a Prometheus server, which systemd (where it runs) starts
#     on :9090. Without root a missing promtool is reported here, and the deploy test fails.
#
# Knobs (environment): RINGLIMIT_SERVICES="redis postgres mariadb", REDIS_PORT=6379, PG_PORT=5432,
#   MYSQL_PORT=3306, RINGLIMIT_PG_DIR=/var/tmp/ringlimit-pg, MYSQL_DATADIR=/var/lib/mysql,
#   MYSQL_SOCKET=/run/mysqld/mysqld.sock, MYSQL_PIDFILE=/run/mysqld/mysqld.pid, WAIT_SECONDS=60.
set -uo pipefail

ENVFILE=${1:-.cache/services.env}
SERVICES=${RINGLIMIT_SERVICES:-redis postgres mariadb}
REDIS_PORT=${REDIS_PORT:-6379}
PG_PORT=${PG_PORT:-5432}
MYSQL_PORT=${MYSQL_PORT:-3306}
PG_DIR=${RINGLIMIT_PG_DIR:-/var/tmp/ringlimit-pg}
MYSQL_DATADIR=${MYSQL_DATADIR:-/var/lib/mysql}
MYSQL_SOCKET=${MYSQL_SOCKET:-/run/mysqld/mysqld.sock}
MYSQL_PIDFILE=${MYSQL_PIDFILE:-/run/mysqld/mysqld.pid}
WAIT_SECONDS=${WAIT_SECONDS:-60}
export DEBIAN_FRONTEND=noninteractive

IS_ROOT=0; [ "$(id -u)" = 0 ] && IS_ROOT=1
APT_UPDATED=0
FAILED=0

say()  { echo "ensure: $*"; }
warn() { echo "ensure: $*" >&2; }
have() { command -v "$1" >/dev/null 2>&1; }

# tcp_open PORT: something accepts TCP connections on 127.0.0.1:PORT.
tcp_open() { timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# wait_for SECONDS CHECK...: poll CHECK every 0.5 s until it succeeds or SECONDS pass.
wait_for() {
	local deadline=$((SECONDS + $1)); shift
	until "$@"; do
		[ "$SECONDS" -ge "$deadline" ] && return 1
		sleep 0.5
	done
}

apt_install() { # apt_install PACKAGE...
	if [ "$IS_ROOT" != 1 ] || ! have apt-get; then
		warn "need to install $* but not root (or no apt-get): run 'sudo make services' or 'sudo apt-get install $*'"
		return 1
	fi
	if [ "$APT_UPDATED" = 0 ]; then
		apt-get update -qq || return 1
		APT_UPDATED=1
	fi
	apt-get install -y -qq "$@" </dev/null || return 1
}

need_root() { # need_root WHAT
	[ "$IS_ROOT" = 1 ] && return 0
	warn "$1 needs root: run 'sudo bash scripts/services/ensure.sh' (or 'sudo make services')"
	return 1
}

# ---------------------------------------------------------------- redis
redis_cli() { for c in redis-cli /usr/bin/redis-cli; do have "$c" && { echo "$c"; return; }; done; }
redis_up() {
	local cli; cli=$(redis_cli)
	if [ -n "$cli" ]; then
		[ "$(timeout 3 "$cli" -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]
	else
		timeout 3 bash -c "exec 3<>/dev/tcp/127.0.0.1/$REDIS_PORT; printf 'PING\r\n' >&3; read -r l <&3; [[ \$l == +PONG* ]]" 2>/dev/null
	fi
}
redis_bin() { for c in redis-server /usr/bin/redis-server /usr/local/bin/redis-server; do have "$c" && { command -v "$c"; return; }; done; }

ensure_redis() {
	if [ -n "${RINGLIMIT_REDIS_URL:-}" ]; then say "redis: using RINGLIMIT_REDIS_URL from the environment"; return 0; fi
	RINGLIMIT_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
	if redis_up; then say "redis: ok, already answering on 127.0.0.1:$REDIS_PORT"; return 0; fi
	if [ -z "$(redis_bin)" ]; then apt_install redis-server || return 1; fi
	# The package's postinst may have started one (no policy-rc.d).
	if redis_up; then say "redis: ok, started by package install on 127.0.0.1:$REDIS_PORT"; return 0; fi
	local dir=/var/tmp/ringlimit-redis-$REDIS_PORT
	mkdir -p "$dir" || return 1
	"$(redis_bin)" --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
		--dir "$dir" --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" || { warn "redis: redis-server failed, see $dir/redis.log"; return 1; }
	if wait_for "$WAIT_SECONDS" redis_up; then
		say "redis: ok, started redis-server on 127.0.0.1:$REDIS_PORT (log $dir/redis.log)"
	else
		warn "redis: started but not answering after ${WAIT_SECONDS}s; log $dir/redis.log:"; tail -n 20 "$dir/redis.log" >&2
		return 1
	fi
}

# ---------------------------------------------------------------- postgres
pg_bindir() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
pg_up() {
	if have pg_isready; then pg_isready -q -h 127.0.0.1 -p "$PG_PORT" -t 2; else tcp_open "$PG_PORT"; fi
}
# pg_login: user postgres logs in over TCP without a password (only checkable with psql).
pg_login() {
	have psql || return 0
	[ "$(PGCONNECT_TIMEOUT=3 psql -X -w -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -Atc 'select 1' 2>/dev/null)" = 1 ]
}
as_postgres() { # run a command as the postgres user when root (postgres refuses root)
	if [ "$IS_ROOT" = 1 ]; then (cd / && runuser -u postgres -- "$@"); else (cd / && "$@"); fi
}
# installed_cluster: "VERSION NAME" of the pg_lsclusters cluster configured on $PG_PORT.
installed_cluster() {
	have pg_lsclusters || return 1
	pg_lsclusters -h 2>/dev/null | awk -v p="$PG_PORT" '$3 == p { print $1, $2; exit }'
}

pg_trust_fix() { # prepend a loopback trust rule to the installed cluster's pg_hba.conf
	local c ver name hba
	c=$(installed_cluster) || return 1
	[ -n "$c" ] || return 1
	read -r ver name <<<"$c"
	hba=/etc/postgresql/$ver/$name/pg_hba.conf
	[ "$IS_ROOT" = 1 ] && [ -f "$hba" ] || return 1
	if ! grep -q 'ringlimit ensure.sh' "$hba"; then
		sed -i '1i host all all 127.0.0.1/32 trust # added by ringlimit ensure.sh for tests' "$hba" || return 1
	fi
	pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" reload >/dev/null 2>&1 || true
	wait_for 10 pg_login
}

pg_start_installed() {
	local c ver name
	c=$(installed_cluster) && [ -n "$c" ] || return 1
	read -r ver name <<<"$c"
	need_root "starting PostgreSQL cluster $ver/$name" || return 1
	install -d -o postgres -g postgres -m 2775 /var/run/postgresql
	say "postgres: starting installed cluster $ver/$name"
	pg_ctlcluster --skip-systemctl-redirect "$ver" "$name" start || return 1
	wait_for "$WAIT_SECONDS" pg_up
}

pg_start_private() {
	local bin; bin=$(pg_bindir)
	[ -n "$bin" ] || { warn "postgres: no /usr/lib/postgresql/*/bin"; return 1; }
	if [ "$IS_ROOT" = 1 ]; then install -d -o postgres -g postgres -m 0755 "$PG_DIR" || return 1
	else mkdir -p "$PG_DIR" || return 1; fi
	if [ ! -f "$PG_DIR/data/PG_VERSION" ]; then
		say "postgres: initdb private cluster in $PG_DIR/data"
		as_postgres "$bin/initdb" -D "$PG_DIR/data" -U postgres --auth=trust --no-sync >"$PG_DIR/initdb.log" 2>&1 \
			|| { warn "postgres: initdb failed:"; tail -n 20 "$PG_DIR/initdb.log" >&2; return 1; }
	fi
	say "postgres: starting private cluster $PG_DIR/data on 127.0.0.1:$PG_PORT"
	as_postgres "$bin/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/log" -w -t "$WAIT_SECONDS" \
		-o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null \
		|| { warn "postgres: pg_ctl start failed:"; tail -n 20 "$PG_DIR/log" >&2; return 1; }
	wait_for "$WAIT_SECONDS" pg_up
}

ensure_postgres() {
	if [ -n "${RINGLIMIT_POSTGRES_URL:-}" ]; then say "postgres: using RINGLIMIT_POSTGRES_URL from the environment"; return 0; fi
	RINGLIMIT_POSTGRES_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres?sslmode=disable"
	local how="already answering"
	if ! pg_up; then
		if [ -z "$(pg_bindir)" ]; then apt_install postgresql || return 1; fi
		if pg_up; then how="started by package install"
		elif pg_start_installed; then how="started installed cluster"
		elif pg_start_private; then how="started private cluster in $PG_DIR"
		else warn "postgres: could not start a server on 127.0.0.1:$PG_PORT"; return 1
		fi
	fi
	if ! pg_login; then
		if pg_trust_fix; then how="$how, enabled trust auth on 127.0.0.1"
		else warn "postgres: 127.0.0.1:$PG_PORT answers but user postgres cannot log in without a password"; return 1
		fi
	fi
	say "postgres: ok, $how on 127.0.0.1:$PG_PORT"
}

# ---------------------------------------------------------------- mariadb
my_client() { for c in mariadb mysql; do have "$c" && { echo "$c"; return; }; done; }
my_admin() { for c in mariadb-admin mysqladmin; do have "$c" && { echo "$c"; return; }; done; }
# my_up: the server answers (even if it refuses our login).
my_up() {
	local a; a=$(my_admin)
	[ -n "$a" ] || { tcp_open "$MYSQL_PORT"; return; }
	local out
	out=$("$a" --no-defaults --protocol=tcp -h 127.0.0.1 -P "$MYSQL_PORT" -uroot --connect-timeout=2 ping 2>&1) && return 0
	# A login refusal still means the server is up.
	grep -Eq 'Access denied|is not allowed to connect' <<<"$out"
}
my_login() {
	local c; c=$(my_client); [ -n "$c" ] || return 0
	[ "$("$c" --no-defaults --protocol=tcp -h 127.0.0.1 -P "$MYSQL_PORT" -uroot --connect-timeout=3 -N -B -e 'select 1' 2>/dev/null)" = 1 ]
}
my_root_fix() { # give root@localhost / root@127.0.0.1 an empty password, via the unix socket as OS root
	local c; c=$(my_client)
	[ -n "$c" ] && [ "$IS_ROOT" = 1 ] && [ -S "$MYSQL_SOCKET" ] || return 1
	"$c" --no-defaults --protocol=socket -S "$MYSQL_SOCKET" -uroot -e "
		ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD('') OR unix_socket;
		CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
		GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
		FLUSH PRIVILEGES;" || return 1
	my_login
}

my_start() {
	need_root "starting MariaDB" || return 1
	local rundir logdir; rundir=$(dirname "$MYSQL_SOCKET"); logdir=/var/log/mysql
	install -d -o mysql -g mysql -m 0755 "$rundir" "$(dirname "$MYSQL_PIDFILE")" "$MYSQL_DATADIR" "$logdir" || return 1
	if [ ! -d "$MYSQL_DATADIR/mysql" ]; then
		say "mariadb: mariadb-install-db into $MYSQL_DATADIR"
		mariadb-install-db --user=mysql --datadir="$MYSQL_DATADIR" >"$logdir/ringlimit-install-db.log" 2>&1 \
			|| { warn "mariadb: mariadb-install-db failed:"; tail -n 20 "$logdir/ringlimit-install-db.log" >&2; return 1; }
	fi
	local log=$logdir/ringlimit-mariadbd-$MYSQL_PORT.log
	say "mariadb: starting /usr/sbin/mariadbd on 127.0.0.1:$MYSQL_PORT (datadir $MYSQL_DATADIR)"
	start-stop-daemon --start --oknodo --background --pidfile "$MYSQL_PIDFILE" --exec /usr/sbin/mariadbd -- \
		--user=mysql --datadir="$MYSQL_DATADIR" --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
		--socket="$MYSQL_SOCKET" --pid-file="$MYSQL_PIDFILE" --log-error="$log" || return 1
	wait_for "$WAIT_SECONDS" my_up || { warn "mariadb: not answering after ${WAIT_SECONDS}s; $log:"; tail -n 20 "$log" >&2; return 1; }
}

ensure_mariadb() {
	if [ -n "${RINGLIMIT_MYSQL_URL:-}" ]; then say "mariadb: using RINGLIMIT_MYSQL_URL from the environment"; return 0; fi
	RINGLIMIT_MYSQL_URL="root@tcp(127.0.0.1:$MYSQL_PORT)/"
	local how="already answering"
	if ! my_up; then
		if [ ! -x /usr/sbin/mariadbd ] || [ -z "$(my_client)" ]; then apt_install mariadb-server || return 1; fi
		if my_up; then how="started by package install"
		elif my_start; then how="started mariadbd"
		else warn "mariadb: could not start a server on 127.0.0.1:$MYSQL_PORT"; return 1
		fi
	fi
	if ! my_login; then
		if wait_for 3 my_login; then :
		elif my_root_fix; then how="$how, gave root an empty password"
		else warn "mariadb: 127.0.0.1:$MYSQL_PORT answers but root cannot log in without a password"; return 1
		fi
	fi
	say "mariadb: ok, $how on 127.0.0.1:$MYSQL_PORT"
}

# ---------------------------------------------------------------- main
# Install everything that is missing for a down service in one apt-get run (saves minutes).
missing=()
for s in $SERVICES; do
	case $s in
	redis)    [ -z "${RINGLIMIT_REDIS_URL:-}" ] && ! redis_up && [ -z "$(redis_bin)" ] && missing+=(redis-server) ;;
	postgres) [ -z "${RINGLIMIT_POSTGRES_URL:-}" ] && ! pg_up && [ -z "$(pg_bindir)" ] && missing+=(postgresql) ;;
	mariadb)  [ -z "${RINGLIMIT_MYSQL_URL:-}" ] && ! my_up && { [ ! -x /usr/sbin/mariadbd ] || [ -z "$(my_client)" ]; } && missing+=(mariadb-server) ;;
	*) warn "unknown service '$s' (want redis, postgres, mariadb)"; FAILED=1 ;;
	esac
done
# The chaos suite's partitions (go test ./chaos/...) cut traffic with nftables rules.
if [ "$IS_ROOT" = 1 ] && ! have nft; then missing+=(nftables); fi
if [ ${#missing[@]} -gt 0 ]; then
	say "installing ${missing[*]}"
	apt_install "${missing[@]}" || { warn "apt-get install ${missing[*]} failed"; FAILED=1; }
fi
# deploy/metrics_test.go runs promtool (check metrics, check rules, test rules).
if ! have promtool; then
	if [ "$IS_ROOT" = 1 ]; then
		say "installing prometheus (for promtool)"
		apt_install --no-install-recommends prometheus || { warn "apt-get install prometheus failed"; FAILED=1; }
	else
		warn "promtool is missing (the deploy tests need it): run 'sudo apt-get install --no-install-recommends prometheus'"
	fi
fi

for s in $SERVICES; do
	case $s in
	redis)    ensure_redis    || FAILED=1 ;;
	postgres) ensure_postgres || FAILED=1 ;;
	mariadb)  ensure_mariadb  || FAILED=1 ;;
	esac
done

mkdir -p "$(dirname "$ENVFILE")"
tmp=$(mktemp "$ENVFILE.XXXXXX") || exit 1
{
	echo "# written by scripts/services/ensure.sh; source it: . $ENVFILE"
	for v in RINGLIMIT_REDIS_URL RINGLIMIT_POSTGRES_URL RINGLIMIT_MYSQL_URL; do
		if [ -n "${!v:-}" ]; then printf "export %s='%s'\n" "$v" "${!v//\'/\'\\\'\'}"; fi
	done
} >"$tmp" && chmod 0644 "$tmp" && mv -f "$tmp" "$ENVFILE" || { warn "cannot write $ENVFILE"; rm -f "$tmp"; exit 1; }

if [ "$FAILED" != 0 ]; then
	warn "some services are not available (see above); wrote what is known to $ENVFILE"
	exit 1
fi
exit 0
