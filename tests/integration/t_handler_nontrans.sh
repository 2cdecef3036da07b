# t_handler_nontrans: a handler that writes to a table which cannot roll back (an Aria table: idemd's next SAVEPOINT fails with 1178) is the handler's failure, not the connection's (issue 31, finding 10): each such message is dead-lettered at once (no retry: a retry would write again), its reason carrying the server's message, nothing recorded; the worker is never restarted and goes on consuming; the log says what to fix.
h_skip_on_mysql "Aria is MariaDB's; MySQL's non-transactional engines (MyISAM, MEMORY) take no part in the transaction, so its SAVEPOINT never fails (their writes are simply not rolled back: docs/plugins.md)"
source "$H_ROOT/tests/chaos/lib.sh"
db=t_handler_nontrans
q=t_handler_nontrans.q
dlq=$q.dlq
h_new_db "$db"
# counter.so's effect row, in a table whose engine takes part in the transaction but has no
# savepoints.
h_sql "CREATE TABLE effects_aria LIKE effects"
h_sql "ALTER TABLE effects_aria ENGINE=Aria"
h_assert_eq "$(h_sql "SELECT ENGINE FROM information_schema.TABLES WHERE TABLE_SCHEMA = '$db' AND TABLE_NAME = 'effects_aria'")" \
    Aria "effects_aria's engine"
c_fresh_queues "$q" "$dlq" "$q.retry.200"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 50;
             max_attempts = 3; retry_delays_ms = [ 200 ];
             settings = { table = "effects_aria"; }; } );
CONF
} >idemd.conf

# 20 messages wait before the worker starts, so that its batches hold several. a10's handler
# rejects it (after its write): the set-based pass then gives way to the message-by-message one,
# where idemd's SAVEPOINT after a1 fails (before: the worker exited 75, "lost broker or
# database", and was restarted again and again).
h_mq declare "$q" --dlq "$dlq"
h_assert_eq "$({ h_gen a 1 9; printf 'a10\treject\n'; h_gen a 11 20; } | h_mq publish -r "$q")" \
    "published 20 confirmed 20" "publish a1..a20"
h_daemon_start idemd.conf idemd.log
h_wait_depth "$dlq" 20 60 || h_fail "a1..a20 did not all reach $dlq (depth $(h_depth "$dlq"))"
# The worker carries on: later messages too.
h_assert_eq "$(h_gen b 1 5 | h_mq publish -r "$q")" "published 5 confirmed 5" "publish b1..b5"
h_wait_depth "$dlq" 25 60 || h_fail "b1..b5 did not all reach $dlq (depth $(h_depth "$dlq"))"
h_daemon_alive || h_fail "idemd died"

# Never restarted: one worker start, no worker exit.
h_assert_eq "$(h_count_log idemd.log "started worker $q#0 as pid")" 1 "worker starts"
h_assert_eq "$(h_count_log idemd.log "worker $q#[0-9]+ \(pid [0-9]+\) (exited|killed)")" 0 "worker exits"
h_assert_eq "$(h_count_log idemd.log "lost broker or database")" 0 "lines blaming the broker or database"
# Each message rejected once (not retried: a retry would write the Aria row again), the log
# saying what to fix.
h_assert_eq "$(h_count_log idemd.log "outcome=reject queue=$q id=[ab][0-9]+ .*then=\"dead-lettered to $dlq\"")" 25 \
    "reject outcome lines"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q ")" 0 "retry outcome lines"
# a10 is not blamed: rolling back to its savepoint took the Aria table out of the transaction.
h_assert_eq "$(h_count_log idemd.log "warning: id=[ab][0-9]+: its handler wrote to a table whose storage engine cannot roll back: the server refused idemd's SAVEPOINT \(error 1178: The storage engine for the table doesn't support SAVEPOINT\)\. .*ALTER TABLE \.\.\. ENGINE=InnoDB")" 24 \
    "warnings naming the cause and the fix"
h_assert_eq "$(h_count_log idemd.log "warning: id=a10: ")" 0 "warnings blaming a10"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# The non-transactional write stays: once per message, or twice for those first run in a
# set-based batch (the check after it finds that some handler broke the transaction, the batch
# runs again message by message to find which). Nothing was recorded or committed in the
# transactional tables.
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n BETWEEN 1 AND 2) FROM effects_aria")" $'25\t25' "effects_aria rows"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record")" 0 "record rows"
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"

# Every dead letter carries the server's message in its reason.
h_mq get "$dlq" >dlq.txt
h_assert_eq "$(wc -l <dlq.txt)" 25 "dead letters"
h_assert_eq "$(cut -f1 dlq.txt | sort | tr '\n' ' ')" "$(printf '%s\n' a{1..20} b{1..5} | sort | tr '\n' ' ')" "dead letter ids"
while IFS= read -r line; do
    err=$(c_hdr "$line" idemd-error)
    if [[ $(cut -f1 <<<"$line") == a10 ]]; then # its own handler's verdict came first
        h_assert_eq "$err" "test reject" "a10's idemd-error"
        continue
    fi
    [[ "$err" == *"handler wrote to a table that cannot roll back: idemd's SAVEPOINT failed with error 1178: The storage engine for the table doesn't support SAVEPOINT. That write stays"* ]] ||
        h_fail "$(cut -f1 <<<"$line"): idemd-error '$err' lacks the cause"
done <dlq.txt
echo "t_handler_nontrans: ok"
