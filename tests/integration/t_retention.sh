# t_retention: record_retention_days deletes this consumer's old records (not others', not recent ones).
db=t_retention
q=t_retention.q
h_new_db "$db"
h_sql "INSERT INTO msg_id_record (consumer, msg_id, create_time) VALUES
       ('$q', 'old1', NOW() - INTERVAL 10 DAY), ('$q', 'old2', NOW() - INTERVAL 8 DAY),
       ('$q', 'recent', NOW() - INTERVAL 2 DAY), ('other', 'old3', NOW() - INTERVAL 10 DAY)"
h_sql "INSERT INTO idemd_attempt (consumer, msg_id, attempts, updated_at) VALUES
       ('$q', 'old1', 2, NOW() - INTERVAL 10 DAY), ('$q', 'recent', 1, NOW())"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; record_retention_days = 5; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
h_wait_log idemd.log "retention: deleted 3 rows older than 5 days" 1 30
# A message whose record was purged is, by design, processed again: retention must exceed
# the redelivery window. A recent one is still a duplicate.
printf '%s\tbody\n' recent fresh | h_mq publish -r "$q" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$q'" 1 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_sql "SELECT msg_id FROM msg_id_record WHERE consumer = '$q' ORDER BY msg_id" | tr '\n' ' ')" \
    "fresh recent " "this consumer's records after retention"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = 'other'")" 1 "other consumer untouched"
h_assert_eq "$(h_sql "SELECT msg_id FROM idemd_attempt")" "recent" "attempt rows after retention"
h_assert_eq "$(h_count_log idemd.log "outcome=duplicate queue=$q id=recent")" 1 "recent id still deduped"
echo "t_retention: ok"
