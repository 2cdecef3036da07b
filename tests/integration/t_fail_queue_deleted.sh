# t_fail_queue_deleted: the consumed queue is deleted under idemd (basic.cancel), idle and busy: the worker restarts, re-declares and consumes new messages; then its dead letter queue is deleted.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_queue_deleted
q=t_fail_qdel.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 50; batch_size = 10;
             settings = { sleep_ms = 5; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
effects() { h_sql "SELECT COUNT(*), COALESCE(SUM(n), 0), COALESCE(MAX(n), 0) FROM effects WHERE msg_id LIKE '$1%'"; }

# 1. Idle: delete the queue while idemd waits on it.
out=$(h_gen a 1 100 | h_mq publish -r "$q")
h_assert_eq "$out" "published 100 confirmed 100" "publisher a"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE msg_id LIKE 'a%'" 100 30
h_wait_depth "$q" 0 10
h_mq delete "$q"
h_wait_log idemd.log "consumer cancelled by the broker" 1 15
c_wait_consumed "$q" 60 # re-declared by the restarted worker
out=$(h_gen b 1 100 | h_mq publish -r "$q")
h_assert_eq "$out" "published 100 confirmed 100" "publisher b (after the idle delete)"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE msg_id LIKE 'b%'" 100 30
h_assert_eq "$(effects b)" $'100\t100\t1' "effects of b"

# 2. Busy: delete it with deliveries in flight (their messages go with the queue).
out=$(h_gen c 1 1000 | h_mq publish -r "$q")
h_assert_eq "$out" "published 1000 confirmed 1000" "publisher c"
h_wait_sql "SELECT COUNT(*) >= 100 FROM effects WHERE msg_id LIKE 'c%'" 1 30
h_mq delete "$q"
h_wait_log idemd.log "consumer cancelled by the broker" 2 15
c_wait_consumed "$q" 60
out=$(h_gen d 1 100 | h_mq publish -r "$q")
h_assert_eq "$out" "published 100 confirmed 100" "publisher d (after the busy delete)"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE msg_id LIKE 'd%'" 100 30
h_wait_depth "$q" 0 10
h_assert_eq "$(effects d)" $'100\t100\t1' "effects of d"
c_done=$(effects c)
h_assert_eq "$(cut -f3 <<<"$c_done")" 1 "largest effect count of c (deleted with the queue: never doubled)"
((${c_done%%$'\t'*} < 1000)) || h_fail "all of c were done before the delete: nothing was tested"

h_daemon_alive || h_fail "idemd died"
h_assert_eq "$(h_count_log idemd.log "outcome=reject ")" 0 "reject outcomes"

# 3. Its dead letter queue deleted while idemd runs: a rejected message must still end up
# dead-lettered (idemd declares that queue itself), not go round and round.
h_mq delete "$q.dlq"
out=$(printf 'x1\treject\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publisher x"
deadline=$((SECONDS + 10))
while :; do
    dl=$(h_depth "$q.dlq" 2>/dev/null) || dl="(no such queue)"
    [[ "$dl" == 1 ]] && break
    ((SECONDS < deadline)) || break
    sleep 0.5
done
h_daemon_alive || h_fail "idemd died"
if [[ "$dl" != 1 ]]; then
    rounds=$(h_count_log idemd.log "outcome=reject queue=$q id=x1 ")
    where="ready in $q: $(h_depth "$q"); $q.dlq: $dl"
    if grep -q "rejecting the message to the broker" idemd.log; then
        where="$where; LOST: idemd nacked it without requeue and $q has no dead letter exchange"
    fi
    grep -E "id=x1 |dead-lettering to" idemd.log | tail -n 3 >&2
    h_fail "10 s after its dead letter queue was deleted, a rejected message went round $rounds times: $where"
fi
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"

h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects e LEFT JOIN msg_id_record r
                      ON r.consumer = e.queue AND r.msg_id = e.msg_id WHERE r.id IS NULL")" 0 \
    "effects without a record"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_fail_queue_deleted: ok (c: $(cut -f1 <<<"$c_done") of 1000 done before the delete took the rest)"
