# t_fail_dlq_full: the dead letter queue is full (a max-length policy with overflow reject-publish): rejected messages are held unacked, none is dropped, other messages go on; once there is room they are dead-lettered.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_dlq_full
q=t_fail_dlqfull.q
dlq=$q.dlq
policy=t_fail_dlqfull
h_new_db "$db"
c_fresh_queues "$q" "$dlq"
trap 'h_rabbitmqctl clear_policy "$policy" >/dev/null 2>&1 || true' EXIT
{
    # heartbeat = 2: retrying held copies must not cost the consuming connection its heartbeats.
    h_conf_common "$db" | sed 's/heartbeat = 30/heartbeat = 2/'
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; max_attempts = 3;
             declare = { quorum = false; }; } );
CONF
} >idemd.conf
# Classic queues: their reject-publish limit is exact. A quorum queue checks its limit after
# the fact (it takes publishes while at the limit), so "room for N" is not a count there.
h_daemon_start idemd.conf idemd.log
# Room for one dead letter; the broker nacks publishes beyond it.
h_rabbitmqctl set_policy --apply-to queues "$policy" "^${dlq//./\\.}\$" \
    '{"max-length": 1, "overflow": "reject-publish"}' >/dev/null
sleep 2 # the policy reaches the queue

out=$(printf 'x1\treject\nx2\treject\nx3\treject\ng1\tgood\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 4 confirmed 4" "publisher"
h_wait_depth "$dlq" 1 20
h_wait_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'g1'" 1 20
# x2 and x3 are held while the dead letter queue is full; their copies are tried again on a
# timer, and other messages do not wait for them.
h_wait_log idemd.log "held: their copies were refused again \(2 time" 1 30
out=$(h_gen g 2 301 | h_mq publish -r "$q")
h_assert_eq "$out" "published 300 confirmed 300" "publisher of good messages while full"
h_wait_sql "SELECT COUNT(*) FROM effects" 301 30
h_assert_eq "$(h_depth "$dlq")" 1 "dead letters while full"
h_daemon_alive || h_fail "idemd died"
dropped=$(h_count_log idemd.log "rejecting the message to the broker")
rounds=$(h_count_log idemd.log "copies were refused again")
echo "while full: $rounds refused rounds of held copies; dead letters: $(h_depth "$dlq"); in $q: $(h_depth "$q")"
# Make room: read the one dead letter, lift the limit; the others must follow.
h_mq get "$dlq" >dlq1.txt
h_rabbitmqctl clear_policy "$policy" >/dev/null
deadline=$((SECONDS + 60)) # a fix may back off between rounds
got=$(cut -f1 dlq1.txt)
while :; do
    h_mq get "$dlq" >>dlq2.txt
    got=$(cat dlq1.txt dlq2.txt | cut -f1 | sort | paste -sd' ')
    [[ "$got" == "x1 x2 x3" ]] && break
    ((SECONDS < deadline)) || break
    # Dropped messages never come back: no point waiting once the queue is empty.
    ((dropped > 0)) && [[ "$(h_depth "$q")" == 0 ]] && break
    sleep 0.5
done
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
((dropped == 0)) || grep -E "rejecting the message to the broker" idemd.log | head -n 2 >&2
h_assert_eq "$got" "x1 x2 x3" "dead letters once the queue had room ($dropped messages dropped by idemd while it was full)"
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects")" $'301\t301\t1' "effects"
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"
h_assert_eq "$(h_count_log idemd.log "pausing [0-9]+ ms")" 0 "pauses (the held list never filled)"
echo "t_fail_dlq_full: ok ($rounds refused rounds of held copies while full)"
