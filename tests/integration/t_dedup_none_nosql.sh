# t_dedup_none_nosql: dedup = "none" with a handler that answers ok without any SQL: committed in batches, not taken for a lost transaction.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_dedup_none_nosql
q=t_dn_nosql.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; dedup = "none"; prefetch = 200;
             batch_size = 100; batch_wait_ms = 200; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
h_gen s 1 2000 skip | h_mq publish -r "$q" >pub.txt
h_assert_eq "$(cat pub.txt)" "published 2000 confirmed 2000" "publisher"
h_wait_depth "$q" 0 60
h_wait_log idemd.log "outcome=ok queue=$q " 2000 30
h_assert_eq "$(h_count_log idemd.log "outcome=retry|outcome=reject|transaction lost|rolled back under")" 0 \
    "retries, rejects and redos"
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects")" 0 "effects (the handler wrote none)"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_dedup_none_nosql: ok"
