# harness.sh: bash functions for idemd's integration tests: private RabbitMQ and MariaDB or MySQL, daemon control, SQL polling.
#
# Source it, then either h_servers_start (starts both servers in a temp dir on free
# loopback ports and installs an EXIT trap that stops them) or, in a child process of
# a shell that did, just use the exported variables: H_DIR, AMQP_PORT, MYSQL_SOCK,
# MYSQL_PORT, IDEMD, MQTOOL (and HOME, ERL_EPMD_PORT, H_RABBIT_NODE for rabbitmqctl).
# Safe under `set -euo pipefail`, which is how tests/run runs each case.
#
# Helpers for test cases:
#   h_mysql ARGS...          mariadb (or, IDEMD_DB=mysql, mysql) client as root on the private socket
#   h_db_is_mysql            true when IDEMD_DB=mysql (Oracle MySQL instead of MariaDB)
#   h_skip_on_mysql REASON   skip the case on MySQL (a MariaDB-only feature)
#   h_db_private DIR ARGS... a case's own database server with extra server options
#   h_sql QUERY [DB]         run one query (DB defaults to $H_DB), print rows tab-separated
#   h_new_db NAME            (re)create database NAME with sql/*.sql and tests/schema.sql; sets H_DB
#   h_mq ARGS...             mqtool against the private broker
#   h_depth QUEUE            ready-message count of QUEUE
#   h_conf_common DB         print the daemon/broker/database config groups
#   h_daemon_start CONF LOG  start idemd in the background, wait for "ready:" (sets H_DAEMON_PID, H_DAEMON_LOG)
#   h_daemon_bg CONF LOG     start idemd in the background without waiting for "ready:"
#   h_daemon_stop            SIGTERM, wait up to 30 s; returns the daemon's exit status
#   h_daemon_kill9           SIGKILL the supervisor and all its workers (its process group)
#   h_wait_sql QUERY EXPECTED TIMEOUT   poll until QUERY prints EXPECTED
#   h_wait_depth QUEUE EXPECTED TIMEOUT poll until QUEUE holds EXPECTED ready messages
#   h_wait_log FILE REGEX COUNT TIMEOUT poll until FILE has at least COUNT lines matching REGEX
#   h_count_log FILE REGEX   number of lines of FILE matching REGEX (grep -E)
#   h_gen PREFIX FROM TO [BODY]         print publish lines PREFIX<i><TAB>BODY (default body-<i>)
#   h_handler_abi                       the plugin ABI of include/idemd/handler.h, "MAJOR.MINOR"
#   h_seq N                             SQL table expression of the numbers 1..N (column seq)
#   h_db_pkg                            pkg-config name of the client library: libmariadb or mysqlclient
#   h_hello_plugin HEADER CFLAGS...     build ./hello.so, the smallest handler, strict C11 with
#                                       CFLAGS; fail unless it took <idemd/handler.h> from HEADER
#   h_notify_wrapper [WATCHDOG_USEC]    write ./idemd-notify: idemd as a Type=notify unit starts
#   h_notify_start LOG [SECS]           notifysock on ./notify.sock, datagrams to LOG; h_notify_stop
#   h_notify_times LOG TEXT             epoch seconds of LOG's notify lines that are exactly TEXT
#   h_log_epoch LINE                    epoch seconds of an idemd log line's timestamp
#   h_assert_eq ACTUAL EXPECTED WHAT    fail unless equal
#   h_fail MSG               print MSG and exit 1

H_ROOT=${H_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
export H_ROOT
export H_BUILD=${H_BUILD:-$H_ROOT/build}
export IDEMD=${IDEMD:-$H_BUILD/idemd}
# idemd refuses to run as root without --allow-root; CI runs the tests as root. Start it
# as "$IDEMD" "${H_ALLOW_ROOT[@]}" ... (an array: not exported, every shell sourcing this gets it).
H_ALLOW_ROOT=()
[[ $(id -u) -ne 0 ]] || H_ALLOW_ROOT=(--allow-root)
export MQTOOL=${MQTOOL:-$H_BUILD/tests/tools/mqtool}
export H_PLUGINS=${H_PLUGINS:-$H_BUILD/plugins}
export H_TEST_PLUGINS=${H_TEST_PLUGINS:-$H_BUILD/tests/plugins}
export H_SQL_DIR=${H_SQL_DIR:-$H_ROOT/sql}
H_RABBIT_BIN=${H_RABBIT_BIN:-/usr/lib/rabbitmq/bin}

h_log() { echo "# $(date +%H:%M:%S) $*" >&2; }

h_fail()
{
    echo "FAIL: $*" >&2
    exit 1
}

# h_skip REASON: end the case as skipped (exit 77); tests/run reports "ok N - CASE # SKIP REASON".
h_skip()
{
    echo "SKIP: $*" >&2
    exit 77
}

h_assert_eq()
{
    [[ "$1" == "$2" ]] || h_fail "$3: got '$1', expected '$2'"
}

# True if something on this machine already uses TCP port $1 (any state, v4 or v6).
h_port_used()
{
    local hex
    hex=$(printf '%04X' "$1")
    awk -v p=":$hex" 'NR > 1 && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Print a free port in [lo, lo + span).
h_free_port()
{
    local lo=$1 span=$2 p i
    for ((i = 0; i < 200; i++)); do
        p=$((lo + RANDOM % span))
        h_port_used "$p" || { echo "$p"; return 0; }
    done
    echo "h_free_port: no free port in $lo..$((lo + span))" >&2
    return 1
}

# The command-line client of the stack (mariadb, or Oracle's mysql), and its option for a
# session without TLS.
if [[ ${IDEMD_DB:-mariadb} == mysql ]]; then
    H_DB_CLIENT=mysql H_DB_CLIENT_NO_TLS=--ssl-mode=DISABLED
else
    H_DB_CLIENT=mariadb H_DB_CLIENT_NO_TLS=--skip-ssl
fi
h_mysql() { "$H_DB_CLIENT" --no-defaults -S "$MYSQL_SOCK" -uroot "$@"; }

h_sql()
{
    local db=${2:-${H_DB:-}}
    if [[ -n "$db" ]]; then
        h_mysql -N -B -e "$1" "$db"
    else
        h_mysql -N -B -e "$1"
    fi
}

h_mq() { "$MQTOOL" -P "$AMQP_PORT" "$@"; }

h_rabbitmqctl() { "$H_RABBIT_BIN/rabbitmqctl" -q -n "$H_RABBIT_NODE" "$@"; }

h_depth()
{
    local out
    out=$(h_mq depth "$1") || return $?
    echo "${out%% *}"
}

# Wait up to $2 seconds for a TCP listener on 127.0.0.1:$1 (while pid $3 lives).
h_wait_port()
{
    local port=$1 deadline=$((SECONDS + $2)) pid=$3
    while ((SECONDS < deadline)); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null && return 1
        sleep 0.2
    done
    return 1
}

h_rabbit_start()
{
    local d=$H_DIR/rabbit
    mkdir -p "$d/mnesia" "$d/log" "$HOME"
    echo '[].' >"$d/enabled_plugins"
    : >"$d/rabbitmq-env.conf"
    cat >"$d/rabbitmq.conf" <<EOF
loopback_users = none
disk_free_limit.absolute = 10MB
log.console = false
log.file.level = info
EOF
    # At-least-once dead-lettering (idemd's quorum delay tiers) retries a hop it could not make
    # after dead_letter_worker_publisher_confirm_timeout: 180 s by default. At a restart the
    # delay queue can come up before the default exchange does, and its expired copies then
    # wait that long (docs/rabbitmq.md, "After a broker restart"). 10 s, as docs/deploying.md
    # recommends; the key gained _ms in RabbitMQ 4.x, so both are set.
    cat >"$d/advanced.config" <<EOF
[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 10000},
           {dead_letter_worker_publisher_confirm_timeout_ms, 10000}]}].
EOF
    export RABBITMQ_NODENAME=$H_RABBIT_NODE
    export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
    export RABBITMQ_NODE_PORT=$AMQP_PORT
    export RABBITMQ_DIST_PORT=$H_DIST_PORT
    export RABBITMQ_MNESIA_BASE=$d/mnesia
    export RABBITMQ_LOG_BASE=$d/log
    export RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins
    export RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf
    export RABBITMQ_CONF_ENV_FILE=$d/rabbitmq-env.conf
    export RABBITMQ_ADVANCED_CONFIG_FILE=$d/advanced.config
    export RABBITMQ_PID_FILE=$d/rabbit.pid
    export RABBITMQ_PLUGINS_EXPAND_DIR=$d/plugins-expand
    # Own session and process group: stopping kills the whole Erlang tree.
    setsid "$H_RABBIT_BIN/rabbitmq-server" </dev/null >"$d/stdout.log" 2>&1 &
    H_RABBIT_PID=$!
    echo "$H_RABBIT_PID" >"$H_DIR/rabbit.pgid"
}

h_rabbit_wait()
{
    if ! h_wait_port "$AMQP_PORT" 90 "$H_RABBIT_PID"; then
        tail -n 30 "$H_DIR/rabbit/stdout.log" "$H_DIR"/rabbit/log/*.log >&2 2>/dev/null
        echo "h_servers_start: RabbitMQ did not open port $AMQP_PORT" >&2
        return 1
    fi
    if ! timeout 60 "$H_RABBIT_BIN/rabbitmqctl" -q -n "$H_RABBIT_NODE" await_startup >/dev/null 2>"$H_DIR/rabbit/await.err"; then
        cat "$H_DIR/rabbit/await.err" >&2
        echo "h_servers_start: rabbitmqctl await_startup failed" >&2
        return 1
    fi
}

# The database stack (IDEMD_DB): mariadb (MariaDB's mariadbd and client, the default) or mysql
# (Oracle's mysqld and mysql client; docs/compat.md). The servers' options match: TCP on
# 127.0.0.1 only, durable commits, 500 connections, no name resolution. On MySQL also: no X
# Protocol listener (its fixed port 33060 would collide between servers), no binary log
# (MariaDB starts without one; a test of a binlog setting starts its own server).
export IDEMD_DB=${IDEMD_DB:-mariadb}
case $IDEMD_DB in
mariadb | mysql) ;;
*) echo "harness: IDEMD_DB must be mariadb or mysql (got '$IDEMD_DB')" >&2; exit 64 ;;
esac

# h_db_pkg: the pkg-config name of the client library idemd is built with on this stack.
h_db_pkg() { if h_db_is_mysql; then echo mysqlclient; else echo libmariadb; fi; }

# h_seq N: a table expression of the numbers 1..N in a column seq, for INSERT ... SELECT seq
# FROM $(h_seq N) (MariaDB's seq_1_to_N tables do not exist on MySQL; JSON_TABLE is in both).
h_seq() { echo "JSON_TABLE(CONCAT('[', REPEAT('0,', $1 - 1), '0]'), '\$[*]' COLUMNS (seq FOR ORDINALITY)) AS seq_t"; }

# h_db_is_mysql: true when the tests run against Oracle MySQL.
h_db_is_mysql() { [[ $IDEMD_DB == mysql ]]; }

# h_skip_on_mysql REASON: skip the case on MySQL (a MariaDB-only feature), saying why.
h_skip_on_mysql() { h_db_is_mysql && h_skip "MariaDB only: $*"; return 0; }

# h_db_init DIR: a new data directory DIR/data with a root@localhost without password (once:
# an initialised DIR is kept, so a server restarted on it keeps its data). 0 or 1.
h_db_init()
{
    local d=$1 user=()
    mkdir -p "$d/data" "$d/tmp" "$d/files"
    [[ $(id -u) == 0 ]] && user=(--user=root)
    [[ -d "$d/data/mysql" ]] && return 0
    if h_db_is_mysql; then
        rm -rf "$d/data" # mysqld --initialize wants no directory or an empty one
        mysqld --no-defaults --initialize-insecure --datadir="$d/data" "${user[@]}" \
            --log-error="$d/install.log" >>"$d/install.log" 2>&1
    else
        mariadb-install-db --no-defaults --datadir="$d/data" --auth-root-authentication-method=normal \
            --skip-test-db "${user[@]}" >"$d/install.log" 2>&1
    fi || {
        tail -n 30 "$d/install.log" >&2
        echo "h_db_init: initialising $IDEMD_DB in $d failed" >&2
        return 1
    }
}

# h_db_server DIR SOCK PORT [SERVER_ARG...]: start the database server on DIR's data in its own
# session (the caller records $! to stop it), output in DIR/stdout.log, errors in DIR/err.log.
# SERVER_ARGs come last, so they override the defaults here (e.g. --bind-address).
h_db_server()
{
    local d=$1 sock=$2 port=$3 user=() extra=() bin=mariadbd
    shift 3
    [[ $(id -u) == 0 ]] && user=(--user=root)
    if h_db_is_mysql; then
        bin=mysqld
        extra=(--mysqlx=OFF --disable-log-bin --secure-file-priv="$d/files")
    fi
    setsid "$bin" --no-defaults --datadir="$d/data" --socket="$sock" --port="$port" \
        --bind-address=127.0.0.1 "${user[@]}" --pid-file="$d/server.pid" --log-error="$d/err.log" \
        --tmpdir="$d/tmp" --skip-name-resolve "${extra[@]}" "$@" </dev/null >"$d/stdout.log" 2>&1 &
}

# h_db_start: the harness's database server in $H_DIR/mysql (initialised on first use), on
# $MYSQL_SOCK and $MYSQL_PORT; its process group id goes to $H_DIR/db.pid. H_DB_ARGS: more
# server options, space-separated (e.g. "--innodb-log-file-size=1G" for bench/scale.sh).
h_db_start()
{
    local d=$H_DIR/mysql
    h_db_init "$d" || return 1
    local more=()
    [[ -n ${H_DB_ARGS:-} ]] && read -r -a more <<<"$H_DB_ARGS"
    h_db_server "$d" "$MYSQL_SOCK" "$MYSQL_PORT" --innodb-flush-log-at-trx-commit=1 \
        --max-connections=500 "${more[@]}"
    H_DB_PID=$!
    echo "$H_DB_PID" >"$H_DIR/db.pid"
}

# h_db_wait [PID [DIR]]: wait up to 90 s until the server at $MYSQL_SOCK answers (default: the
# harness's server); on failure show the end of DIR/err.log. 0 or 1.
h_db_wait()
{
    local pid=${1:-$H_DB_PID} dir=${2:-$H_DIR/mysql} deadline=$((SECONDS + 90))
    while ((SECONDS < deadline)); do
        h_mysql -e 'SELECT 1' >/dev/null 2>&1 && return 0
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.2
    done
    tail -n 30 "$dir/err.log" >&2
    echo "h_db_wait: the $IDEMD_DB server (pid $pid) did not come up" >&2
    return 1
}

# h_db_private DIR [SERVER_ARG...]: a case's own database server (for settings that cannot
# change at run time), data in DIR, on a free loopback port; MYSQL_SOCK and MYSQL_PORT point at
# it for the rest of the case. The runner kills it with the case's daemons. 0 or 1.
h_db_private()
{
    local d=$1 pid
    shift
    h_db_init "$d" || return 1
    MYSQL_SOCK=$d/sock
    MYSQL_PORT=$(h_free_port 58000 4000) || return 1
    h_db_server "$d" "$MYSQL_SOCK" "$MYSQL_PORT" "$@"
    pid=$!
    mkdir -p "$H_DIR/daemons"
    : >"$H_DIR/daemons/$pid"
    h_db_wait "$pid" "$d"
}

# Start both servers in a new temp dir (once per test run). Installs an EXIT trap
# that stops them; INT/TERM exit through it.
h_servers_start()
{
    local t0=$SECONDS
    H_DIR=$(mktemp -d /tmp/idemd-t.XXXXXX) || return 1
    export H_DIR
    export HOME=$H_DIR/home # rabbitmq-server and rabbitmqctl share the cookie here
    export AMQP_PORT H_DIST_PORT ERL_EPMD_PORT MYSQL_PORT H_RABBIT_NODE
    AMQP_PORT=$(h_free_port 20000 9000) || return 1
    while :; do # rabbitmqctl uses DIST_PORT+10000..+10010 for itself
        H_DIST_PORT=$(h_free_port 30000 9000) || return 1
        h_port_used $((H_DIST_PORT + 10000)) || break
    done
    ERL_EPMD_PORT=$(h_free_port 50000 4000) || return 1
    MYSQL_PORT=$(h_free_port 54000 4000) || return 1
    H_RABBIT_NODE="idemdt$$@localhost"
    export MYSQL_SOCK=$H_DIR/mysql/sock
    trap h_servers_stop EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    h_log "servers: dir $H_DIR amqp $AMQP_PORT dist $H_DIST_PORT epmd $ERL_EPMD_PORT mysql $MYSQL_PORT"
    h_rabbit_start || return 1
    h_db_start || return 1
    h_db_wait || return 1
    h_rabbit_wait || return 1
    h_log "servers: up in $((SECONDS - t0)) s"
}

# Send $2 to process group $1, wait up to $3 s for it to empty, then SIGKILL it.
h_kill_group()
{
    local pgid=$1 sig=$2 deadline=$((SECONDS + $3))
    kill -"$sig" -- -"$pgid" 2>/dev/null || return 0
    while ((SECONDS < deadline)); do
        pgrep -g "$pgid" >/dev/null || return 0
        sleep 0.2
    done
    echo "harness: process group $pgid ignored SIG$sig; killing it" >&2
    kill -KILL -- -"$pgid" 2>/dev/null
    sleep 0.2
    return 0
}

# Stop everything this harness started: leftover daemons, RabbitMQ (and our epmd), MariaDB.
h_servers_stop()
{
    local rc=$? pid
    local - # cleanup runs to the end even when the caller uses set -e / pipefail
    set +e +o pipefail
    trap - EXIT INT TERM
    [[ -n "${H_DIR:-}" && -d "$H_DIR" ]] || return $rc
    h_daemons_reap
    if [[ -f "$H_DIR/rabbit.pgid" ]]; then
        h_kill_group "$(cat "$H_DIR/rabbit.pgid")" TERM 20
        rm -f "$H_DIR/rabbit.pgid"
    fi
    if [[ -n "${ERL_EPMD_PORT:-}" ]]; then
        # epmd daemonizes out of our process group; it runs with our ERL_EPMD_PORT.
        epmd -port "$ERL_EPMD_PORT" -kill >/dev/null 2>&1
        for pid in $(pgrep -x epmd); do
            if { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -x "ERL_EPMD_PORT=$ERL_EPMD_PORT" >/dev/null; then
                kill -KILL "$pid" 2>/dev/null
            fi
        done
    fi
    if [[ -f "$H_DIR/db.pid" ]]; then
        h_kill_group "$(cat "$H_DIR/db.pid")" TERM 30
        rm -f "$H_DIR/db.pid"
    fi
    if [[ "${H_KEEP:-0}" == 1 ]]; then
        echo "harness: kept $H_DIR" >&2
    else
        rm -rf "$H_DIR"
    fi
    return $rc
}

# Kill any daemon process group recorded by h_daemon_start that is still alive.
h_daemons_reap()
{
    local f pgid
    local -
    set +e +o pipefail
    for f in "$H_DIR"/daemons/*; do
        [[ -f "$f" ]] || continue
        pgid=${f##*/}
        if pgrep -g "$pgid" >/dev/null; then
            echo "harness: killing leftover daemon process group $pgid" >&2
            kill -KILL -- -"$pgid" 2>/dev/null
        fi
        rm -f "$f"
    done
}

# Drop and create database $1 with the schema (sql/*.sql in order, then tests/schema.sql).
h_new_db()
{
    local db=$1 f
    h_mysql -e "DROP DATABASE IF EXISTS \`$db\`; CREATE DATABASE \`$db\`" || return 1
    for f in "$H_SQL_DIR"/*.sql "$H_ROOT/tests/schema.sql"; do
        [[ -f "$f" ]] || continue
        h_mysql "$db" <"$f" || { echo "h_new_db: $f failed" >&2; return 1; }
    done
    H_DB=$db
}

# Print the daemon, broker and database groups for database $1; append "queues = (...);".
h_conf_common()
{
    cat <<EOF
daemon = { log_level = "${H_LOG_LEVEL:-debug}"; shutdown_timeout = 30; };
broker = { host = "127.0.0.1"; port = $AMQP_PORT; vhost = "/"; user = "guest"; password = "guest";
           heartbeat = 30; };
database = { socket = "$MYSQL_SOCK"; user = "root"; database = "$1";
             connect_timeout = 5; read_timeout = 30; write_timeout = 30; record_table = "msg_id_record"; };
EOF
}

# h_daemon_bg CONF LOG: start $IDEMD -c CONF in its own process group, output appended to LOG,
# without waiting for "ready:" (for a daemon that must not get there); sets H_DAEMON_PID and
# records it so the runner kills it with the case.
h_daemon_bg()
{
    setsid "$IDEMD" "${H_ALLOW_ROOT[@]}" -c "$1" </dev/null >>"$2" 2>&1 &
    H_DAEMON_PID=$!
    mkdir -p "$H_DIR/daemons"
    : >"$H_DIR/daemons/$H_DAEMON_PID"
}

# Start $IDEMD -c $1 in its own process group, stderr+stdout appended to $2.
# Waits up to 30 s for a new "ready:" line. Sets H_DAEMON_PID. Fails the test on error.
h_daemon_start()
{
    local conf=$1 log=$2 skip deadline
    [[ -x "$IDEMD" ]] || h_fail "no daemon binary at $IDEMD"
    chmod go= "$conf" # it holds the broker password: idemd warns about readable ones
    touch "$log"
    skip=$(($(wc -l <"$log") + 1))
    setsid "$IDEMD" "${H_ALLOW_ROOT[@]}" -c "$conf" "${@:3}" </dev/null >>"$log" 2>&1 &
    H_DAEMON_PID=$!
    # shellcheck disable=SC2034 # for the cases
    H_DAEMON_LOG=$log
    mkdir -p "$H_DIR/daemons"
    : >"$H_DIR/daemons/$H_DAEMON_PID"
    deadline=$((SECONDS + 30))
    while :; do
        # awk, not "tail | grep -q": under pipefail an early grep exit can fail the pipe.
        if awk -v s="$skip" 'NR >= s && /ready:/ { f = 1 } END { exit !f }' "$log"; then
            return 0
        fi
        if ! kill -0 "$H_DAEMON_PID" 2>/dev/null; then
            local rc=0
            wait "$H_DAEMON_PID" || rc=$?
            tail -n 30 "$log" >&2
            h_fail "idemd exited with status $rc before ready ($log)"
        fi
        if ((SECONDS >= deadline)); then
            tail -n 30 "$log" >&2
            h_daemon_kill9
            h_fail "idemd not ready within 30 s ($log)"
        fi
        sleep 0.1
    done
}

# List the pids of the daemon's process group (supervisor and workers).
h_daemon_pids() { pgrep -g "$H_DAEMON_PID" 2>/dev/null; }

# SIGTERM the daemon, wait up to 30 s for the supervisor and its workers to exit.
# Returns the supervisor's exit status; 124 (and SIGKILL) on timeout.
h_daemon_stop()
{
    local pid=${H_DAEMON_PID:-} deadline rc=0
    [[ -n "$pid" ]] || return 0
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        echo "h_daemon_stop: idemd $pid still running after 30 s; SIGKILL" >&2
        h_daemon_kill9
        return 124
    fi
    wait "$pid" 2>/dev/null || rc=$?
    if pgrep -g "$pid" >/dev/null; then
        echo "h_daemon_stop: workers outlived the supervisor: $(pgrep -g "$pid" | tr '\n' ' ')" >&2
        kill -KILL -- -"$pid" 2>/dev/null || true
        rc=125
    fi
    rm -f "$H_DIR/daemons/$pid"
    H_DAEMON_PID=
    return $rc
}

# SIGKILL the supervisor and all its workers at once: its process group and, in case a
# worker left the group, its direct children.
h_daemon_kill9()
{
    local pid=${H_DAEMON_PID:-} pids
    [[ -n "$pid" ]] || return 0
    pids=$( (pgrep -g "$pid"; pgrep -P "$pid"; true) | sort -u | tr '\n' ' ')
    { # stderr off: bash would report the job as "Killed"
        # shellcheck disable=SC2086 # one word per pid
        kill -KILL -- -"$pid" $pids || true
        while pgrep -g "$pid" >/dev/null; do sleep 0.05; done
        for p in $pids; do
            while kill -0 "$p" && [[ $(ps -o stat= -p "$p") != Z* ]]; do sleep 0.05; done
        done
        wait "$pid" || true # 137: it was us
    } 2>/dev/null
    rm -f "$H_DIR/daemons/$pid"
    H_DAEMON_PID=
    return 0
}

# Poll QUERY (against $H_DB) every 0.2 s until it prints EXPECTED; fail after TIMEOUT s.
h_wait_sql()
{
    local q=$1 want=$2 deadline=$((SECONDS + ${3:-30})) got
    while :; do
        got=$(h_sql "$q" 2>&1) || true
        [[ "$got" == "$want" ]] && return 0
        if ((SECONDS >= deadline)); then
            echo "h_wait_sql: after ${3:-30} s '$q' printed '$got', expected '$want'" >&2
            return 1
        fi
        sleep 0.2
    done
}

# Poll until QUEUE holds EXPECTED ready messages; fail after TIMEOUT s.
h_wait_depth()
{
    local q=$1 want=$2 deadline=$((SECONDS + ${3:-30})) got
    while :; do
        got=$(h_depth "$q" 2>&1) || true
        [[ "$got" == "$want" ]] && return 0
        if ((SECONDS >= deadline)); then
            echo "h_wait_depth: after ${3:-30} s queue $q holds '$got', expected '$want'" >&2
            return 1
        fi
        sleep 0.2
    done
}

# True if the daemon is still running.
h_daemon_alive() { [[ -n "${H_DAEMON_PID:-}" ]] && kill -0 "$H_DAEMON_PID" 2>/dev/null; }

# Number of lines of $1 matching the extended regex $2.
h_count_log()
{
    local c
    c=$(grep -cE -- "$2" "$1" 2>/dev/null) || true
    echo "${c:-0}"
}

# Poll until file $1 has at least $3 lines matching $2; fail after $4 s.
h_wait_log()
{
    local f=$1 re=$2 want=$3 deadline=$((SECONDS + ${4:-30})) got
    while :; do
        got=$(h_count_log "$f" "$re")
        ((got >= want)) && return 0
        if ((SECONDS >= deadline)); then
            echo "h_wait_log: after ${4:-30} s $f has $got lines matching '$re', expected $want" >&2
            return 1
        fi
        sleep 0.2
    done
}

# The plugin ABI that include/idemd/handler.h declares, as "MAJOR.MINOR".
h_handler_abi()
{
    sed -n 's/^#define IDEMD_HANDLER_ABI_MAJOR //p;s/^#define IDEMD_HANDLER_ABI_MINOR //p' \
        "$H_ROOT/include/idemd/handler.h" | paste -sd.
}

# Build ./hello.so, a handler that accepts every message, outside the tree with the flags
# $2... (an installed header's, from pkg-config); fail unless it used the header at $1.
h_hello_plugin()
{
    local header=$1 deps
    shift
    cat >hello.c <<'HELLO'
/* hello.c: the smallest idemd handler: accepts every message (after asking its connection). */
#ifdef HELLO_MYSQL_H
#include <mysql.h> /* the client library's own header first, as a handler may */
#endif
#include <idemd/handler.h>

static idemd_result_t hello_handle(void *state, MYSQL *db, const idemd_message_t *msg,
                                   char *err, size_t errlen)
{
    (void)state, (void)msg, (void)err, (void)errlen;
    /* MYSQL * is the connection's type with either client library: no cast. */
    return mysql_errno(db) == 0 ? IDEMD_RESULT_OK : IDEMD_RESULT_RETRY;
}

const idemd_handler_t idemd_handler = {
    .abi_major = IDEMD_HANDLER_ABI_MAJOR,
    .abi_minor = IDEMD_HANDLER_ABI_MINOR,
    .name = "hello",
    .handle = hello_handle,
};
HELLO
    cc -std=c11 -Wall -Wextra -Werror -pedantic -fPIC -shared "$@" -o hello.so hello.c ||
        h_fail "hello.c (a plugin outside the tree) did not build with $*"
    deps=$(cc -std=c11 "$@" -M hello.c) || h_fail "cc -M hello.c failed"
    grep -qF "$header" <<<"$deps" || h_fail "hello.c did not use $header: $deps"
}

# ---------- sd_notify as systemd sees it (no systemd here) ----------
# h_notify_wrapper [WATCHDOG_USEC]: write ./idemd-notify, which starts idemd the way systemd
# starts a Type=notify unit: NOTIFY_SOCKET=./notify.sock and, with WATCHDOG_USEC, the
# watchdog variables (WATCHDOG_PID is the wrapper's pid, which exec keeps).
h_notify_wrapper()
{
    {
        echo '#!/usr/bin/env bash'
        echo 'export NOTIFY_SOCKET=$PWD/notify.sock'
        [[ -z "${1:-}" ]] || echo "export WATCHDOG_USEC=$1 WATCHDOG_PID=\$\$"
        echo "exec \"$IDEMD\" \"\$@\""
    } >idemd-notify
    chmod +x idemd-notify
}

# h_notify_start LOG [SECS]: notifysock (tests/tools/notifysock.c) on ./notify.sock for at most
# SECS (default 240), printing "EPOCH.USEC pid=PID TEXT" per datagram to LOG; waits until it
# is bound. h_notify_stop ends it (safe to call twice, e.g. from an EXIT trap).
h_notify_start()
{
    local tool=${NOTIFYSOCK:-$H_BUILD/tests/tools/notifysock}
    [[ -x "$tool" ]] || h_fail "no notifysock at $tool (make check-build)"
    rm -f notify.sock
    "$tool" -t "${2:-240}" notify.sock >"$1" 2>>notifysock.err &
    H_NOTIFY_PID=$!
    for _ in $(seq 50); do [[ -S notify.sock ]] && return 0; sleep 0.1; done
    h_fail "notifysock did not bind notify.sock: $(cat notifysock.err)"
}
h_notify_stop()
{
    [[ -n "${H_NOTIFY_PID:-}" ]] || return 0
    kill "$H_NOTIFY_PID" 2>/dev/null || true
    wait "$H_NOTIFY_PID" 2>/dev/null || true
    H_NOTIFY_PID=
}

# h_notify_times LOG TEXT: epoch seconds of LOG's notify lines whose text is exactly TEXT.
h_notify_times() { awk -v t="$2" '{ x = $0; sub(/^[^ ]+ [^ ]+ /, "", x) } x == t { print $1 }' "$1"; }
# h_log_epoch LINE: epoch seconds (with ms) of an idemd log line's timestamp
# ("2026-11-29 10:00:00.123 ...").
h_log_epoch() { date -d "$(cut -c1-23 <<<"$1")" +%s.%3N; }

# Print publish lines "PREFIX<i><TAB>BODY" for i in FROM..TO (BODY default "body-<i>").
h_gen()
{
    awk -v p="$1" -v a="$2" -v b="$3" -v body="${4:-}" \
        'BEGIN { for (i = a; i <= b; i++) printf "%s%d\t%s\n", p, i, body == "" ? "body-" i : body }'
}
