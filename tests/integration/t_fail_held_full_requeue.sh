# t_fail_held_full_requeue: the dead letter queue refuses copies and the held list is full, so poisoned messages are requeued again and again; a requeue is not a start that died, so none is dead-lettered as "started N times without finishing"; once there is room each is dead-lettered once with its handler's reason, and good messages are handled once.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_held_full_requeue
q=t_fail_heldfull.q
dlq=$q.dlq
policy=t_fail_heldfull
h_new_db "$db"
c_fresh_queues "$q" "$dlq"
trap 'h_rabbitmqctl clear_policy "$policy" >/dev/null 2>&1 || true' EXIT
{
    # heartbeat = 2 caps the pause after a requeue at 1 s; prefetch = 4 holds two messages.
    h_conf_common "$db" | sed 's/heartbeat = 30/heartbeat = 2/'
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; max_attempts = 1;
             prefetch = 4; batch_size = 2;
             declare = { quorum = false; }; } );
CONF
} >idemd.conf
# Classic queues: their reject-publish limit is exact. A quorum queue checks its limit after
# the fact (it takes publishes while at the limit), so "room for N" is not a count there.
h_daemon_start idemd.conf idemd.log
# The dead letter queue takes nothing: the broker nacks every copy.
h_rabbitmqctl set_policy --apply-to queues "$policy" "^${dlq//./\\.}\$" \
    '{"max-length": 0, "overflow": "reject-publish"}' >/dev/null
sleep 2 # the policy reaches the queue

out=$(printf 'x1\treject\nx2\treject\nx3\treject\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 3 confirmed 3" "publisher"
# Two are held, one goes round: requeued, redelivered (suspect, its start counted), rejected again.
# With max_attempts = 1 a start that stayed counted would dead-letter after 12 starts.
h_wait_log idemd.log "requeueing [1-9]" 20 120 || h_fail "too few requeue rounds"
out=$(h_gen g 1 20 | h_mq publish -r "$q")
h_assert_eq "$out" "published 20 confirmed 20" "publisher of good messages"
h_wait_sql "SELECT COUNT(*) FROM effects" 20 60
started=$(h_count_log idemd.log "started [0-9]+ times without finishing")
h_assert_eq "$(h_sql "SELECT COALESCE(MAX(attempts), 0) <= 1 FROM idemd_attempt")" 1 \
    "counted starts of requeued messages (rows: $(h_sql "SELECT msg_id, attempts FROM idemd_attempt" | paste -sd' '))"
# Make room: the others must follow, each once.
h_rabbitmqctl clear_policy "$policy" >/dev/null
deadline=$((SECONDS + 60))
while :; do
    h_mq get "$dlq" >>dlq.txt
    got=$(cut -f1 dlq.txt | sort | paste -sd' ')
    [[ "$got" == "x1 x2 x3" ]] && break
    ((SECONDS < deadline)) || break
    sleep 0.5
done
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$got" "x1 x2 x3" "dead letters once the queue had room"
h_assert_eq "$started" 0 "dead-lettered as started N times without finishing"
h_assert_eq "$(grep -c 'test reject' dlq.txt)" 3 "dead letters with the handler's reason"
h_assert_eq "$(grep -c 'without finishing' dlq.txt)" 0 "dead letters with the guard's reason"
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects")" $'20\t20\t1' "effects"
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"
echo "t_fail_held_full_requeue: ok"
