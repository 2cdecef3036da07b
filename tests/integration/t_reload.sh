# t_reload: SIGHUP under load changes one queue, removes one, adds one; a bad file keeps the running config; effects stay exactly once.
db=t_reload
qa=t_reload.a
qb=t_reload.b
qc=t_reload.c
h_new_db "$db"
conf_a()
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qa"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; batch_size = 20;
    settings = { sleep_ms = 1; }; },
  { name = "$qb"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; }
);
CONF
}
conf_b()
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qa"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 50;
    batch_size = 10; settings = { sleep_ms = 1; }; },
  { name = "$qc"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; }
);
CONF
}
conf_a >idemd.conf
h_daemon_start idemd.conf idemd.log

# 3,000 messages with 10% duplicates to qa, paced so that the reload lands mid-stream.
awk 'BEGIN { for (i = 1; i <= 3000; i++) { printf "a%d\tbody\n", i; if (i % 10 == 0) printf "a%d\tbody\n", i - 5 } }' >a.txt
h_mq publish -r "$qa" --rate 1500 <a.txt >pub_a.out &
pub=$!
printf 'b%d\tbody\n' 1 2 3 | h_mq publish -r "$qb" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qb'" 3 30
h_wait_log idemd.log "outcome=ok queue=$qa " 300 30

conf_b >idemd.conf
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log "ready:" 2 60
grep -q "reload: .*changed: draining queue '$qa'" idemd.log || h_fail "no drain of $qa logged"
grep -q "reload: queue '$qb' removed" idemd.log || h_fail "removal of $qb not logged"
grep -q "reload: new queue '$qc'" idemd.log || h_fail "new queue $qc not logged"

# A broken file is refused and the running configuration stays.
echo "queues = ( { name = " >idemd.conf
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log "reload failed, keeping the running configuration" 1 30
conf_b >idemd.conf

wait "$pub" || h_fail "publisher failed: $(cat pub_a.out)"
h_assert_eq "$(cat pub_a.out)" "published 3300 confirmed 3300" "publisher"
printf 'c%d\tbody\n' 1 2 3 4 | h_mq publish -r "$qc" >/dev/null
printf 'b%d\tbody\n' 4 5 | h_mq publish -r "$qb" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qa'" 3000 120
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qc'" 4 30
kill -0 "$H_DAEMON_PID" || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$qa'")" \
    $'3000\t3000\t1' "qa effects (count, sum, max)"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$qa'")" 3000 "qa records"
h_assert_eq "$(h_sql "SELECT COUNT(*), MAX(n) FROM effects WHERE queue = '$qc'")" $'4\t1' "qc effects"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qb'")" 3 "qb: nothing after removal"
h_assert_eq "$(h_depth "$qb")" 2 "qb keeps what was published after its removal"
h_assert_eq "$(h_depth "$qa")" 0 "qa drained"
h_assert_eq "$(h_count_log idemd.log 'outcome=(retry|reject)')" 0 "no retries or rejects"
echo "t_reload: ok"
