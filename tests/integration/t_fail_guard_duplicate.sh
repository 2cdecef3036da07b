# t_fail_guard_duplicate: a committed message whose copies keep coming back redelivered (acks lost to closed connections) is acked as a duplicate, never dead-lettered as "handler crashed".
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_guard_duplicate
q=t_fail_gdup.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; max_attempts = 3; } );
CONF
} >idemd.conf
# d1 was committed long ago; its crash count already stands at max_attempts, as after three
# redeliveries whose acks were lost.
h_sql "INSERT INTO msg_id_record (consumer, msg_id) VALUES ('$q', 'd1');
       INSERT INTO effects (queue, msg_id, n) VALUES ('$q', 'd1', 1);
       INSERT INTO idemd_attempt (consumer, msg_id, attempts) VALUES ('$q', 'd1', 3)"
h_daemon_start idemd.conf idemd.log
# x-delivery-count marks the copy as a redelivery, as a quorum queue would.
"$C_BADPUB" -P "$AMQP_PORT" -r "$q" --id d1 --body good --header x-delivery-count=i64:4 \
    >/dev/null || h_fail "badpub failed"
h_assert_eq "$(printf 'f1\tgood\n' | h_mq publish -r "$q")" "published 1 confirmed 1" "publisher"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'f1'" 1 20
h_wait_log idemd.log "outcome=duplicate queue=$q id=d1 " 1 10
h_wait_depth "$q" 0 10
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters"
h_assert_eq "$(h_count_log idemd.log "handler crashed")" 0 "'handler crashed' lines"
h_assert_eq "$(h_sql "SELECT n FROM effects WHERE msg_id = 'd1'")" 1 "effects of d1"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_fail_guard_duplicate: ok"
