# t_fail_crash_guard: a handler that segfaults on one message among 200 (batches on) is dead-lettered after max_attempts; everything else exactly once, the other queue undisturbed.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_crash_guard
qa=t_fail_crash.a
qb=t_fail_crash.b
h_new_db "$db"
c_fresh_queues "$qa" "$qa.dlq" "$qb" "$qb.dlq"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qa"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; batch_size = 100; batch_wait_ms = 20; },
  { name = "$qb"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; batch_size = 10; settings = { sleep_ms = 5; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
pid_b=$(sed -n "s/.*started worker $qb#0 as pid \([0-9]*\).*/\1/p" idemd.log | tail -n 1)

# qb: ~10 s of work (5 ms per message) that runs while qa's worker crashes and restarts.
h_gen b 1 2000 | h_mq publish -r "$qb" >pub_b.txt &
pub_b=$!
{ h_gen a 1 100; printf 'poison\tsegv\n'; h_gen a 101 200; } >a.txt
out=$(h_mq publish -r "$qa" <a.txt)
h_assert_eq "$out" "published 201 confirmed 201" "publisher to $qa"
wait "$pub_b" || h_fail "publisher to $qb failed"
h_assert_eq "$(cat pub_b.txt)" "published 2000 confirmed 2000" "publisher to $qb"

h_wait_depth "$qa.dlq" 1 60
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$qa'" $'200\t200\t1' 30
b_at_dlq=$(h_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qb'")
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$qb'" $'2000\t2000\t1' 60
h_wait_depth "$qa" 0 10
h_wait_depth "$qb" 0 10

crashes=$(h_count_log idemd.log "worker $qa#0 \(pid [0-9]+\) killed by signal 11")
h_assert_eq "$crashes" 5 "crashes of $qa's worker (max_attempts = 5)"
h_assert_eq "$(h_count_log idemd.log "worker $qb#0 \(pid [0-9]+\) .*restarting")" 0 "restarts of $qb's worker"
h_assert_eq "$(sed -n "s/.*started worker $qb#0 as pid \([0-9]*\).*/\1/p" idemd.log | paste -sd' ')" \
    "$pid_b" "$qb's worker pids (started once)"
kill -0 "$pid_b" 2>/dev/null || h_fail "$qb's worker $pid_b is gone"
h_daemon_alive || h_fail "idemd died"
h_wait_log idemd.log "outcome=reject queue=$qa id=poison .*then=\"dead-lettered to $qa.dlq\" reason=\"handler crashed" 1 5

h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'poison'")" 0 "effects of poison"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE msg_id = 'poison'")" 0 "record of poison"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$qa'")" 200 "record rows of $qa"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$qb'")" 2000 "record rows of $qb"
# Innocent batch-mates were counted while suspect and cleared by their success.
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_attempt WHERE msg_id <> 'poison'")" 0 \
    "leftover attempt rows of innocent messages"
# The row counts each start as it begins: 5 runs (the first noted by the worker that died in
# it), and the 6th, refused before the handler ran.
h_assert_eq "$(h_sql "SELECT attempts FROM idemd_attempt WHERE consumer = '$qa' AND msg_id = 'poison'")" 6 \
    "counted starts of poison"

h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
c_dead_letter "$qa.dlq" poison segv "handler crashed"
h_assert_eq "$(c_hdr "$C_DL_LINE" idemd-queue)" "$qa" "idemd-queue"
# src/copies.h: idemd-attempts is "attempts made so far": the handler was started 5 times.
h_assert_eq "$(c_hdr "$C_DL_LINE" idemd-attempts)" 5 "idemd-attempts (handler starts)"
echo "t_fail_crash_guard: ok ($crashes crashes; $qb had $b_at_dlq of 2000 done when poison was dead-lettered)"
