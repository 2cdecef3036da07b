# shellcheck shell=bash
# lib.sh: fault injection for idemd's failure tests: restart the harness's RabbitMQ and database server, close idemd's connections.
#
# Source after tests/harness.sh, in a shell that has the harness's exported variables
# (H_DIR, AMQP_PORT, MYSQL_SOCK, MYSQL_PORT, H_RABBIT_NODE, HOME, ERL_EPMD_PORT, ...).
# Servers are stopped by their process groups, recorded by the harness in
# $H_DIR/rabbit.pgid and $H_DIR/db.pid, and started again with the harness's own
# h_rabbit_start / h_db_start: same ports, same data directories, same options. The
# new process groups are written to the same files, so the harness's EXIT trap
# (h_servers_stop in tests/run) stops the restarted servers too.
#
#   c_rabbit_stop [SIG]      stop RabbitMQ (TERM: clean shutdown, default; KILL: crash)
#   c_rabbit_start           start it again and wait until it serves AMQP
#   c_rabbit_restart [SIG]   both
#   c_mariadb_stop [SIG]     stop the database server, MariaDB or MySQL (TERM default, KILL = crash)
#   c_mariadb_start          start it again (same data directory) and wait for it
#   c_mariadb_restart [SIG]  both
#   c_servers_ensure         start whichever server is down (use in an EXIT trap, so a failed
#                            case leaves working servers to the cases after it)
#   c_idemd_conns            rabbitmqctl pids of idemd's AMQP connections (client product "idemd")
#   c_close_named_conn NAME  close the connection whose connection_name is NAME (idemd names
#                            them "idemd <queue>#<n> consumer|republisher"); the broker has
#                            sent its connection.close when this returns
#   c_close_idemd_conns [N]  close N (default all) of them with rabbitmqctl close_connection;
#                            prints how many were closed
#   c_rabbit_up / c_mariadb_up   true while the server answers
#   c_dead_letter DLQ ID BODY ERROR_PART   the one dead letter in DLQ, checked

C_BADPUB=${C_BADPUB:-${H_BUILD:-$H_ROOT/build}/tests/tools/badpub}

c_log() { echo "# $(date +%H:%M:%S.%N | cut -c1-12) $*" >&2; }

c_rabbit_up() { (exec 3<>"/dev/tcp/127.0.0.1/$AMQP_PORT") 2>/dev/null; }

c_mariadb_up() { h_mysql -e 'SELECT 1' >/dev/null 2>&1; }

# Wait up to $1 s for process group $2 to have no live (non-zombie) member.
c_wait_group_gone()
{
    local deadline=$((SECONDS + $1)) pgid=$2 p live
    while ((SECONDS < deadline)); do
        live=0
        for p in $(pgrep -g "$pgid" 2>/dev/null); do
            [[ $(ps -o stat= -p "$p" 2>/dev/null) == Z* ]] || live=1
        done
        ((live == 0)) && return 0
        sleep 0.1
    done
    return 1
}

# Send SIG to the process group in pid file $1; wait for it to go (SIGKILL after $2 s).
c_stop_group()
{
    local f=$1 sig=$2 limit=$3 pgid
    [[ -f "$f" ]] || return 0
    pgid=$(cat "$f")
    kill -"$sig" -- -"$pgid" 2>/dev/null || return 0
    if ! c_wait_group_gone "$limit" "$pgid"; then
        echo "chaos: process group $pgid ignored SIG$sig for $limit s; SIGKILL" >&2
        kill -KILL -- -"$pgid" 2>/dev/null
        c_wait_group_gone 10 "$pgid" || true
    fi
    return 0
}

c_rabbit_stop()
{
    local sig=${1:-TERM}
    c_log "chaos: stopping RabbitMQ (SIG$sig)"
    c_stop_group "$H_DIR/rabbit.pgid" "$sig" 30
    # The listener is gone with the node; wait for the port to close.
    local deadline=$((SECONDS + 10))
    while c_rabbit_up && ((SECONDS < deadline)); do sleep 0.1; done
}

c_rabbit_start()
{
    local t0=$SECONDS
    h_rabbit_start || return 1
    disown "$H_RABBIT_PID" 2>/dev/null || true # no "Killed" job report when it is stopped later
    h_rabbit_wait || return 1
    c_log "chaos: RabbitMQ up again after $((SECONDS - t0)) s"
}

c_rabbit_restart()
{
    c_rabbit_stop "${1:-TERM}"
    c_rabbit_start
}

c_mariadb_stop()
{
    local sig=${1:-TERM}
    c_log "chaos: stopping $IDEMD_DB (SIG$sig)"
    c_stop_group "$H_DIR/db.pid" "$sig" 60
}

c_mariadb_start()
{
    local t0=$SECONDS
    # The harness's server command line on the same data directory (h_db_init keeps it).
    h_db_start || return 1
    disown "$H_DB_PID" 2>/dev/null || true
    h_db_wait || return 1
    c_log "chaos: $IDEMD_DB up again after $((SECONDS - t0)) s"
}

c_mariadb_restart()
{
    c_mariadb_stop "${1:-TERM}"
    c_mariadb_start
}

c_servers_ensure()
{
    local rc=$?
    if ! c_mariadb_up; then
        echo "chaos: MariaDB is down at exit: starting it" >&2
        c_mariadb_start || echo "chaos: MariaDB did not start" >&2
    fi
    if ! c_rabbit_up; then
        echo "chaos: RabbitMQ is down at exit: starting it" >&2
        c_rabbit_start || echo "chaos: RabbitMQ did not start" >&2
    fi
    return $rc
}

# rabbitmqctl pids of the connections whose client properties contain the text $1.
c_conns_with()
{
    h_rabbitmqctl list_connections pid client_properties 2>/dev/null |
        awk -F'\t' -v p="$1" 'index($2, p) { print $1 }'
}

c_idemd_conns() { c_conns_with '{"product","idemd"}'; }

# rabbitmqctl pid of the connection whose client property connection_name is $1.
c_named_conn() { c_conns_with "{\"connection_name\",\"$1\"}"; }

c_close_named_conn()
{
    local name=$1 pid
    pid=$(c_named_conn "$name")
    [[ -n "$pid" ]] || {
        c_log "chaos: no connection named '$name'"
        return 1
    }
    h_rabbitmqctl close_connection "$pid" "chaos: closed by test" >/dev/null 2>&1 || return 1
    c_log "chaos: closed connection '$name'"
}

c_close_idemd_conns()
{
    local want=${1:-0} n=0 pid pids=() conns t0=$SECONDS
    conns=$(c_idemd_conns)
    c_log "chaos: listed $(wc -w <<<"$conns") idemd connections in $((SECONDS - t0)) s"
    # shellcheck disable=SC2086 # one connection pid per word
    for pid in $(shuf -e $conns); do
        ((want > 0 && n >= want)) && break
        # In parallel: each rabbitmqctl call takes a second or two to start.
        h_rabbitmqctl close_connection "$pid" "chaos: closed by test" >/dev/null 2>&1 &
        pids+=($!)
        n=$((n + 1))
    done
    for pid in "${pids[@]}"; do
        wait "$pid" || n=$((n - 1))
    done
    c_log "chaos: closed $n idemd connections"
    echo "$n"
}

# ---------- helpers for the t_fail_* cases ----------

# c_gen_until PREFIX STOPFILE PER_TICK [RETRY_EVERY]: print publish lines PREFIX<i><TAB>BODY,
# PER_TICK of them every 0.1 s, until STOPFILE exists: load that lasts as long as the
# faults take to inject, however slow the machine is. With RETRY_EVERY, every
# RETRY_EVERY-th body is "retry-once".
c_gen_until()
{
    local i=1 every=${4:-0}
    while [[ ! -e "$2" ]]; do
        awk -v p="$1" -v a=$i -v b=$((i + $3 - 1)) -v e="$every" \
            'BEGIN { for (i = a; i <= b; i++) printf "%s%d\t%s\n", p, i, (e > 0 && i % e == 0) ? "retry-once" : "body" }' ||
            return 0 # the publisher went away
        i=$((i + $3))
        sleep 0.1
    done
}

# c_hdr LINE KEY: value of header KEY in one `mqtool get` line (ID<TAB>BODY<TAB>k=v;k=v).
c_hdr()
{
    printf '%s\n' "$1" | cut -f3 | tr ';' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# c_expect_reason FILE ID TEXT: the dead letter ID among FILE's lines (h_mq get's) has an
# idemd-error header holding TEXT; logs the reason.
c_expect_reason()
{
    local got
    got=$(c_hdr "$(awk -F'\t' -v id="$2" '$1 == id' "$1" | head -n 1)" idemd-error)
    [[ "$got" == *"$3"* ]] || h_fail "dead letter $2: reason '$got' lacks '$3'"
    h_log "dead letter $2: $got"
}

# c_dead_letter DLQ ID BODY ERROR_PART: read DLQ (into dlq.txt) and fail unless it held exactly
# one message, ID with BODY, whose idemd-error contains ERROR_PART. Sets C_DL_LINE to its
# `mqtool get` line for further header checks.
c_dead_letter()
{
    local err
    h_mq get "$1" >dlq.txt
    cat dlq.txt
    h_assert_eq "$(wc -l <dlq.txt)" 1 "messages in $1"
    C_DL_LINE=$(cat dlq.txt)
    h_assert_eq "$(cut -f1,2 <<<"$C_DL_LINE")" "$2"$'\t'"$3" "dead letter id and body"
    err=$(c_hdr "$C_DL_LINE" idemd-error)
    [[ "$err" == *"$4"* ]] || h_fail "idemd-error '$err' lacks '$4'"
}

# c_has_hdr LINE KEY: true if the line has header KEY.
c_has_hdr()
{
    grep -q "^$2=" <<<"$(printf '%s\n' "$1" | cut -f3 | tr ';' '\n')"
}

# c_wait_consumed QUEUE TIMEOUT: poll until QUEUE exists and has a consumer.
c_wait_consumed()
{
    local q=$1 deadline=$((SECONDS + ${2:-30})) out
    while :; do
        out=$(h_mq depth "$q" 2>/dev/null) || out=
        [[ -n "$out" && ${out##* } -gt 0 ]] && return 0
        if ((SECONDS >= deadline)); then
            echo "c_wait_consumed: after ${2:-30} s queue $q is '${out:-missing}' (READY CONSUMERS)" >&2
            return 1
        fi
        sleep 0.2
    done
}

# c_errors LOG: the log's error-level lines.
c_errors() { grep -E '^[0-9-]+ [0-9:.]+ \[[0-9]+\] [^ ]+ error: ' "$1" || true; }

# c_soft_eq ACTUAL EXPECTED WHAT: like h_assert_eq, but only records the failure in
# C_FAILURES (checked by c_soft_done), so one case can report several problems.
C_FAILURES=()
c_soft_eq()
{
    if [[ "$1" != "$2" ]]; then
        C_FAILURES+=("$3: got '$1', expected '$2'")
        echo "SOFT FAIL: $3: got '$1', expected '$2'" >&2
    fi
}
c_soft_fail()
{
    C_FAILURES+=("$1")
    echo "SOFT FAIL: $1" >&2
}
c_soft_done()
{
    ((${#C_FAILURES[@]} == 0)) && return 0
    local f
    for f in "${C_FAILURES[@]}"; do echo "FAIL: $f" >&2; done
    exit 1
}

# c_fresh_queues QUEUE...: delete these queues if they exist (leftovers of an earlier run
# against the same broker); queues idemd declares come back when it starts.
c_fresh_queues()
{
    local q
    for q in "$@"; do
        h_mq delete "$q" >/dev/null 2>&1 || true
    done
}

# c_soft_set_eq ACTUAL EXPECTED WHAT: compare two sets of lines; on a difference record the
# missing and unexpected lines (each cut to 80 characters).
c_soft_set_eq()
{
    local missing extra
    missing=$(comm -13 <(sort <<<"$1") <(sort <<<"$2") | cut -c1-80 | paste -sd'|')
    extra=$(comm -23 <(sort <<<"$1") <(sort <<<"$2") | cut -c1-80 | paste -sd'|')
    [[ -z "$missing$extra" ]] || c_soft_fail "$3: missing [$missing] unexpected [$extra]"
}

# c_hold_key DB CONSUMER ID: another session inserts ID's dedup record and keeps its transaction
# open (up to 60 s), so that idemd's INSERT of that key waits; returns once the lock is held.
c_hold_key()
{
    h_mysql "$1" -e "BEGIN; INSERT INTO msg_id_record (consumer, msg_id) VALUES ('$2', '$3'); SELECT SLEEP(60);" \
        >/dev/null 2>&1 &
    C_HOLDER=$!
    h_wait_sql "SELECT COUNT(*) FROM information_schema.innodb_trx" 1 10
}

# c_release_key: end c_hold_key's session; its transaction is rolled back.
c_release_key()
{
    h_sql "KILL $(h_sql "SELECT id FROM information_schema.processlist WHERE info = 'SELECT SLEEP(60)'")"
    wait "$C_HOLDER" 2>/dev/null || true
}
