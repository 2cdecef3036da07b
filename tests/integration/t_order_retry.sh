# t_order_retry: order_key: a retried message blocks the later ones of its key, which wait and then run in publish order; another key goes on. The same load on a queue without order_key shows the overtaking (the check can fail).
qo=t_order_retry.o # ordered
qu=t_order_retry.u # the same, unordered
db=t_order_retry
source "$H_ROOT/tests/chaos/lib.sh"
h_new_db "$db"
c_fresh_queues $qo $qo.dlq $qo.retry.300 $qu $qu.dlq $qu.retry.300
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qo"; handler = "$H_TEST_PLUGINS/ordered.so"; order_key = "header:okey";
    workers = 1; max_attempts = 5; retry_delays_ms = [ 300 ]; },
  { name = "$qu"; handler = "$H_TEST_PLUGINS/ordered.so";
    workers = 1; max_attempts = 5; retry_delays_ms = [ 300 ]; }
);
CONF
} >idemd.conf

# Key A: a1 retries once; key C: c2 retries once; key B never does. Interleaved.
load()
{
    printf '%s\n' \
        $'a1\tretry-once\tokey=A\tseq=1' $'b1\tok\tokey=B\tseq=1' $'c1\tok\tokey=C\tseq=1' \
        $'a2\tok\tokey=A\tseq=2' $'c2\tretry-once\tokey=C\tseq=2' $'b2\tok\tokey=B\tseq=2' \
        $'a3\tok\tokey=A\tseq=3' $'c3\tok\tokey=C\tseq=3' $'a4\tok\tokey=A\tseq=4'
}
# Per key, the sequence numbers in the order their effects were committed.
effects() { h_sql "SELECT okey, GROUP_CONCAT(seq ORDER BY id) FROM order_effects WHERE queue = '$1' GROUP BY okey ORDER BY okey"; }

# Published before idemd starts, so that one batch holds them all (the in-batch case).
h_mq declare "$qo" --dlq "$qo.dlq" >/dev/null || h_fail "declaring $qo"
out=$(load | h_mq publish -r "$qo")
h_assert_eq "$out" "published 9 confirmed 9" "publisher ($qo)"
h_daemon_start idemd.conf idemd.log
h_wait_sql "SELECT COUNT(*) FROM order_effects WHERE queue = '$qo'" 9 60
h_assert_eq "$(effects $qo)" $'A\t1,2,3,4\nB\t1,2\nC\t1,2,3' "ordered: effects per key in publish order"
h_wait_sql "SELECT (SELECT COUNT(*) FROM idemd_order_block) + (SELECT COUNT(*) FROM idemd_order_waiter)" 0 30
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$qo id=a1 ")" 1 "retries of a1"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$qo id=(a2|a3|a4|c3) ")" 0 "retries of the waiting ones"
h_wait_log idemd.log "outcome=wait queue=$qo id=a2 " 1 5

# Published while idemd runs: the later messages arrive in later batches, while a1 waits in
# its delay queue; still in order.
h_sql "DELETE FROM order_effects; DELETE FROM msg_id_record"
out=$(load | sed 's/^\([abc][0-9]\)/r\1/' | h_mq publish -r "$qo")
h_assert_eq "$out" "published 9 confirmed 9" "publisher ($qo, second round)"
h_wait_sql "SELECT COUNT(*) FROM order_effects WHERE queue = '$qo'" 9 60
h_assert_eq "$(effects $qo)" $'A\t1,2,3,4\nB\t1,2\nC\t1,2,3' "ordered, live: effects per key in publish order"

# The negative control: no order_key, so a2..a4 overtake a1 while it waits for its retry.
out=$(load | h_mq publish -r "$qu")
h_assert_eq "$out" "published 9 confirmed 9" "publisher ($qu)"
h_wait_sql "SELECT COUNT(*) FROM order_effects WHERE queue = '$qu'" 9 60
got=$(effects $qu)
[[ $got != $'A\t1,2,3,4\nB\t1,2\nC\t1,2,3' ]] || h_fail "unordered queue kept publish order: the check cannot fail"
h_assert_eq "$(echo "$got" | grep -E '^A')" $'A\t2,3,4,1' "unordered: a1 overtaken"

h_wait_sql "SELECT (SELECT COUNT(*) FROM idemd_order_block) + (SELECT COUNT(*) FROM idemd_order_waiter)" 0 30
for q in $qo $qu; do
    h_wait_depth "$q" 0 30
    h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters of $q"
    h_assert_eq "$(h_sql "SELECT COUNT(*) FROM order_effects WHERE queue = '$q' GROUP BY msg_id HAVING COUNT(*) > 1")" "" "doubled effects in $q"
done
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_order_retry: ok"
