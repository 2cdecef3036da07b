# t_txn_boundary: the transaction is idemd's (issue 38). A C handler that COMMITs, runs DDL or turns autocommit on inside idemd's transaction is refused by the server (XA, 1399): the message is retried, then dead-lettered with a reason saying so, and nothing of it is committed (no effect, no record, no table made); the worker is never restarted and the well-behaved messages around it commit once. idemctl try with such a handler commits nothing and says so (text, --json, exit 5). A reconcile hook that COMMITs is rolled back. Where the server cannot refuse (Galera; here transaction = "checked" on a single server), a handler's ROLLBACK fails its message (retried, dead-lettered, nothing committed); a handler that committed holds the queue instead of acking: its message stays in the queue, no worker of the queue starts again until a reload.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_txn_boundary
q=t_txn_boundary.q
dlq=$q.dlq
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
c_fresh_queues "$q" "$dlq" "$q.retry.200"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 50;
             max_attempts = 2; retry_delays_ms = [ 200 ]; } );
CONF
} >idemd.conf
chmod go= idemd.conf

# Each misbehaving message between well-behaved ones, all waiting before the worker starts so
# that batches hold several (the set-based pass, then message by message).
bad=(commit-then-retry commit-then-ok commit ddl autocommit rollback-then-ok)
{
    h_gen a 1 5
    for i in "${!bad[@]}"; do printf 'b%d\t%s\n' "$i" "${bad[$i]}"; done
    h_gen a 6 10
} >msgs.txt
h_mq declare "$q" --dlq "$dlq"
h_assert_eq "$(h_mq publish -r "$q" <msgs.txt)" "published 16 confirmed 16" "publish"
h_daemon_start idemd.conf idemd.log
h_wait_depth "$dlq" 6 60 || h_fail "the 6 misbehaving messages did not reach $dlq (depth $(h_depth "$dlq"))"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record" 10 30 || h_fail "a1..a10 not all recorded"
h_daemon_alive || h_fail "idemd died"
h_assert_eq "$(h_count_log idemd.log "worker $q#[0-9]+ \(pid [0-9]+\) (exited|killed)")" 0 "worker exits"
h_assert_eq "$(h_count_log idemd.log "started worker $q#0 as pid")" 1 "worker starts"

# Nothing of the misbehaving messages was committed; the others once each.
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n) FROM effects WHERE msg_id LIKE 'a%'")" $'10\t10' "a1..a10 effects"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id LIKE 'b%'")" 0 "b effects"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE msg_id LIKE 'b%'")" 0 "b records"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '$db' AND TABLE_NAME = 'ddl_made'")" 0 "ddl_made tables"
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"

# Each dead letter says why; each was retried first (attempt 2 of max_attempts = 2).
h_mq get "$dlq" >dlq.txt
h_assert_eq "$(cut -f1 dlq.txt | sort | tr '\n' ' ')" "b0 b1 b2 b3 b4 b5 " "dead letter ids"
while IFS= read -r line; do
    err=$(c_hdr "$line" idemd-error)
    [[ "$err" == *"the handler tried to end idemd's transaction"*"the server refused it and nothing of this message was kept (error 1399"* ]] ||
        h_fail "$(cut -f1 <<<"$line"): idemd-error '$err' does not say the end was refused"
done <dlq.txt
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q id=b[0-9] .*attempt=1/2 .*then=\"retry scheduled\"")" 6 "retries of b0..b5"

# A reconcile hook that COMMITs: refused, the run rolled back (no reconcile_runs row), counted.
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
sed -i -e 's/shutdown_timeout = 30;/shutdown_timeout = 30; reconcile_interval = 1;/' \
    -e 's/retry_delays_ms = \[ 200 \]; }/retry_delays_ms = [ 200 ]; settings = { reconcile_commit = 1; }; }/' idemd.conf
h_assert_eq "$(grep -c 'reconcile_interval = 1;\|reconcile_commit = 1;' idemd.conf)" 2 "reconcile settings in idemd.conf"
h_daemon_start idemd.conf idemd.log
h_wait_log idemd.log "reconcile failed after [0-9]+ ms: the reconcile hook tried to end idemd's transaction: the server refused it \(error 1399" 2 30 ||
    h_fail "the reconcile hook's COMMIT was not refused twice"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM reconcile_runs")" 0 "reconcile_runs rows"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# idemctl try: the same handler commits nothing, and says so.
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }
snap() { h_sql "SELECT (SELECT COUNT(*) FROM effects), (SELECT COUNT(*) FROM msg_id_record)"; }
before=$(snap)
printf commit-then-ok >body-commit
printf ddl >body-ddl
printf x >body-x
rc=0
out=$(ctl try "$q" --body body-commit --id t-1) || rc=$?
h_assert_eq "$rc" 5 "try's exit status"
h_assert_eq "$(snap)" "$before" "effects and records after try"
[[ "$out" == *"transaction: the handler tried to end idemd's transaction; the server refused it and nothing was committed"* ]] ||
    h_fail "try's text does not say so: $out"
rc=0
out=$(ctl --json try "$q" --body body-ddl --id t-2) || rc=$?
h_assert_eq "$rc" 5 "try --json's exit status"
h_assert_eq "$(jq -r '.tried_to_end_transaction' <<<"$out")" true "tried_to_end_transaction"
h_assert_eq "$(snap)" "$before" "effects and records after try --json"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = '$db' AND TABLE_NAME = 'ddl_made'")" 0 "ddl_made after try"
rc=0
ctl try "$q" --body body-x --id t-3 >/dev/null || rc=$?
h_assert_eq "$rc" 0 "try of a well-behaved message"

# Where the server cannot refuse: the flags see the end, the queue is held, nothing acked.
h_sql "DELETE FROM reconcile_runs"
sed -i -e 's/ reconcile_interval = 1;//' -e 's/record_table = "msg_id_record";/record_table = "msg_id_record"; transaction = "checked";/' idemd.conf
h_daemon_start idemd.conf idemd-check.log
h_assert_eq "$(h_count_log idemd-check.log "idemd's transaction is checked after each handler call \(transaction = \"checked\"\)")" 1 "checked mode"
h_assert_eq "$(h_gen c 1 3 | h_mq publish -r "$q")" "published 3 confirmed 3" "publish c1..c3"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE msg_id LIKE 'c%'" 3 30 || h_fail "c1..c3 not recorded"
# A ROLLBACK of the handler's commits nothing: that message is retried, then dead-lettered,
# and the queue is not held.
h_mq get "$dlq" >/dev/null
h_assert_eq "$(printf 'r1\trollback-then-ok\n' | h_mq publish -r "$q")" "published 1 confirmed 1" "publish r1"
h_wait_depth "$dlq" 1 30 || h_fail "r1 did not reach $dlq"
h_mq get "$dlq" >dlq-r.txt
c_expect_reason dlq-r.txt r1 "the handler ended idemd's transaction with a rollback (nothing was committed)"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'r1'")" 0 "r1's effect"
h_assert_eq "$(h_count_log idemd-check.log "queue '$q' held")" 0 "holds after a rollback"
h_assert_eq "$(printf 'h1\tcommit-then-ok\n' | h_mq publish -r "$q")" "published 1 confirmed 1" "publish h1"
h_wait_log idemd-check.log "queue '$q' held: the handler of id=h1 ended idemd's transaction" 1 30 ||
    h_fail "the queue was not held"
h_wait_depth "$q" 1 30 || h_fail "h1 is not back in $q (depth $(h_depth "$q"))"
h_assert_eq "$(h_count_log idemd-check.log "started worker $q#0 as pid")" 1 "worker starts while held"
h_assert_eq "$(h_count_log idemd-check.log "outcome=(ok|duplicate) queue=$q id=h1")" 0 "h1 acked"
h_daemon_alive || h_fail "idemd died"
h_assert_eq "$(h_depth "$q")" 1 "h1 still in $q"
# The operator reconciles, then reloads: the queue runs again. h1's effect and record were
# committed by its handler's COMMIT, so it is now a duplicate, acked without a second effect.
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd-check.log "reload: queue '$q' is no longer held" 1 30 || h_fail "the reload did not release the queue"
h_wait_log idemd-check.log "outcome=duplicate queue=$q id=h1" 1 30 || h_fail "h1 not acked as a duplicate after the reload"
h_wait_depth "$q" 0 30 || h_fail "$q not empty after the reload"
h_assert_eq "$(h_sql "SELECT n FROM effects WHERE msg_id = 'h1'")" 1 "h1's effect"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_txn_boundary: ok"
