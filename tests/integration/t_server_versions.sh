# t_server_versions: a broker or database older than idemd supports is refused at connect with one clear error (log, STATUS=, worker exit 78), the queues are held (no restart loop, nothing taken); the relay key is made once (by the server's RANDOM_BYTES where it has it, else from client-side random bytes).
#
# No old server packages exist here, so the test-only variables IDEMD_TEST_MIN_MARIADB and
# IDEMD_TEST_MIN_RABBITMQ (src/version.h; they can only raise the minimum; read by the test
# build only, idemd-test and idemctl-test) make the running servers "too old". NOTIFY_SOCKET points at notifysock (tests/tools/notifysock.c, see
# t_systemd_notify), which prints "EPOCH.USEC pid=PID TEXT" for each datagram.
IDEMCTL=$H_BUILD/idemctl-test
export IDEMD=$H_BUILD/idemd-test
db=t_server_versions
qa=t_server_versions.a
qb=t_server_versions.b
h_new_db "$db"

h_notify_wrapper
h_notify_start notify.log 300
trap h_notify_stop EXIT

{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$qa"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; },
           { name = "$qb"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; } );
CONF
} >idemd.conf
# A backlog waits in qa: a refused worker must take none of it.
h_mq declare "$qa"
h_assert_eq "$(h_gen a 1 20 | h_mq publish -r "$qa")" "published 20 confirmed 20" "publisher"
exits="worker $qa#0 \(pid [0-9]+\) exited with code 78 \(configuration"
held="restarting in (1[5-9]|2[0-9]|30)[0-9]{3} ms"

# The database's kind, as idemd names it, and the test hook that raises its minimum.
db_kind=MariaDB db_min_var=IDEMD_TEST_MIN_MARIADB
if h_db_is_mysql; then db_kind=MySQL db_min_var=IDEMD_TEST_MIN_MYSQL; fi

# ---------- the database is "too old" ----------
export "$db_min_var=99.0.0"
IDEMD=$PWD/idemd-notify h_daemon_start idemd.conf db.log
unset "$db_min_var"
h_wait_log notify.log ' READY=1$' 1 10 || h_fail "no READY=1 (systemd would restart the daemon)"
grep -q "ready: 2 queues, 0 workers consuming; 3 not: the broker or database is older than idemd supports" db.log ||
    h_fail "the ready line does not count the 3 refused workers"
refused_db="database socket [^ ]+: $db_kind [0-9]+\.[0-9]+\.[0-9]+ is older than 99\.0\.0, the oldest idemd supports: upgrade the server"
h_wait_log notify.log "STATUS=0/3 workers consuming; .*; $qa: 0/2 up, 0 ok, 0 failed, refused: $refused_db.*; $qb: 0/1 up, 0 ok, 0 failed, refused: $refused_db" 1 15 ||
    h_fail "STATUS= does not show the refusal for both queues"
h_wait_log db.log "$exits" 1 10 || h_fail "$qa#0 did not exit with 78"
# Held, not looping: the next start comes 15 to 30 s later (the backoff's cap), not 0.2 s.
h_assert_eq "$(h_count_log db.log "$exits.*$held")" 1 "first exits of $qa#0 that hold the queue for 15-30 s"
h_wait_log db.log "$exits" 2 45 || h_fail "no second start of $qa#0 within 45 s"
mapfile -t ex < <(grep -E -- "$exits" db.log)
t1=$(h_log_epoch "${ex[0]}")
t2=$(h_log_epoch "${ex[1]}")
[[ "${ex[1]}" == *", server still too old; restarting in "* ]] ||
    h_fail "the second refusal is not reported as known: ${ex[1]}"
awk -v a="$t1" -v b="$t2" 'BEGIN { exit !(b - a >= 15.0) }' ||
    h_fail "$qa#0 started again within 15 s ($t1..$t2): a restart loop"
# Over those >= 15 s: at most two starts per worker (the first and one retry), 3 workers.
starts=$(h_count_log db.log "started worker t_server_versions\.[ab]#[0-9] as pid")
((starts <= 6)) || h_fail "$starts worker starts in $(awk -v a="$t1" -v b="$t2" 'BEGIN { print b - a }') s: a restart loop"
h_assert_eq "$(h_count_log db.log "error: .*$refused_db")" 1 "error lines with the refusal (once for all queues)"
h_assert_eq "$(h_count_log db.log 'RANDOM_BYTES|relay key')" 0 "lines blaming the relay key"
h_assert_eq "$(h_depth "$qa")" 20 "qa's backlog untouched"
h_assert_eq "$(h_sql 'SELECT COUNT(*) FROM effects')" 0 "effects"
h_assert_eq "$(h_sql 'SELECT COUNT(*) FROM idemd_key')" 0 "no relay key made by a refused worker"
# idemctl refuses the same server, with the reason, exit 3 (cannot connect).
rc=0
env "$db_min_var=99.0.0" "$IDEMCTL" -c idemd.conf lookup a1 >ctl.out 2>&1 || rc=$?
h_assert_eq "$rc" 3 "idemctl against a refused database: exit status"
grep -qE "$refused_db" ctl.out || h_fail "idemctl does not say why: $(cat ctl.out)"
rc=0
h_daemon_stop || rc=$?
h_assert_eq "$rc" 0 "daemon exit status on SIGTERM"

# ---------- the broker is "too old" ----------
export IDEMD_TEST_MIN_RABBITMQ=99.0.0
IDEMD=$PWD/idemd-notify h_daemon_start idemd.conf mq.log
unset IDEMD_TEST_MIN_RABBITMQ
refused_mq="broker 127\.0\.0\.1:$AMQP_PORT vhost /: RabbitMQ [0-9]+\.[0-9]+\.[0-9]+ is older than 99\.0\.0, the oldest idemd supports: upgrade the server"
h_wait_log notify.log "STATUS=0/3 workers consuming; .*; $qa: 0/2 up, 0 ok, 0 failed, refused: $refused_mq" 1 15 ||
    h_fail "STATUS= does not show the broker's refusal"
h_wait_log mq.log "$exits" 1 10 || h_fail "$qa#0 did not exit with 78 (broker)"
h_assert_eq "$(h_count_log mq.log "$exits.*$held")" 1 "first exits of $qa#0 that hold the queue (broker)"
h_assert_eq "$(h_count_log mq.log "error: .*$refused_mq")" 1 "error lines with the broker's refusal"
h_assert_eq "$(h_depth "$qa")" 20 "qa's backlog untouched (broker)"
rc=0
h_daemon_stop || rc=$?
h_assert_eq "$rc" 0 "daemon exit status on SIGTERM (broker)"

# ---------- the real minimums pass; the relay key is made once ----------
# (The broker run's workers passed the database check: the first of them made the key.)
h_assert_eq "$(h_sql 'SELECT COUNT(*), MAX(LENGTH(k)) FROM idemd_key')" $'1\t32' "one key row of 32 bytes"
key=$(h_sql 'SELECT HEX(k) FROM idemd_key')
h_daemon_start idemd.conf ok.log
grep -qE "broker 127\.0\.0\.1:$AMQP_PORT vhost /: RabbitMQ \"?[0-9]+\.[0-9]+" ok.log ||
    h_fail "the broker's version is not logged"
grep -qE "database socket [^ ]+: $db_kind \"?[0-9]+\.[0-9]+" ok.log || h_fail "the database's version is not logged"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qa'" 20 30
h_assert_eq "$(h_sql 'SELECT HEX(k) FROM idemd_key')" "$key" "the key survives restarts"
rc=0
h_daemon_stop || rc=$?
h_assert_eq "$rc" 0 "daemon exit status on SIGTERM (ok)"
h_daemon_start idemd.conf ok.log
h_assert_eq "$(h_gen b 1 5 | h_mq publish -r "$qb")" "published 5 confirmed 5" "publisher (qb)"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qb'" 5 30
h_assert_eq "$(h_sql 'SELECT COUNT(*), MAX(HEX(k)) FROM idemd_key')" $'1\t'"$key" "the key survives restarts (2)"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_depth "$qa")" 0 "qa drained"
h_assert_eq "$(h_sql "SELECT COUNT(*), MAX(n) FROM effects")" $'25\t1' "each message applied once"
echo "t_server_versions: ok"
