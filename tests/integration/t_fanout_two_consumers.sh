# t_fanout_two_consumers: a fanout exchange bound (by the daemon) to two queues with different consumers.
db=t_fanout
x=t_fanout.x
qa=t_fanout.a
qb=t_fanout.b
h_new_db "$db"
h_mq exchange "$x" -t fanout # idemd binds queues but does not declare exchanges
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qa"; handler = "$H_TEST_PLUGINS/counter.so"; consumer = "consumer.a"; prefetch = 100;
    declare = { bindings = ( { exchange = "$x"; routing_key = ""; } ); }; },
  { name = "$qb"; handler = "$H_TEST_PLUGINS/counter.so"; consumer = "consumer.b"; prefetch = 100;
    declare = { bindings = ( { exchange = "$x"; routing_key = ""; } ); }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

# 500 ids, 50 of them twice.
h_gen f 1 500 >msgs.txt
h_gen f 101 150 >>msgs.txt
out=$(h_mq publish -e "$x" -r "" <msgs.txt)
h_assert_eq "$out" "published 550 confirmed 550" "publisher"

h_wait_sql "SELECT consumer, COUNT(*) FROM msg_id_record GROUP BY consumer ORDER BY consumer" \
    $'consumer.a\t500\nconsumer.b\t500' 60
h_wait_log idemd.log "outcome=(ok|duplicate) queue=$qa " 550 30
h_wait_log idemd.log "outcome=(ok|duplicate) queue=$qb " 550 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT queue, COUNT(*), SUM(n), MAX(n) FROM effects GROUP BY queue ORDER BY queue")" \
    "$(printf '%s\t500\t500\t1\n%s\t500\t500\t1' "$qa" "$qb")" "effects per queue"
h_assert_eq "$(h_sql "SELECT consumer, COUNT(*) FROM msg_id_record GROUP BY consumer ORDER BY consumer")" \
    $'consumer.a\t500\nconsumer.b\t500' "record rows per consumer"
h_assert_eq "$(h_count_log idemd.log "outcome=duplicate queue=$qa ")" 50 "duplicates on $qa"
h_assert_eq "$(h_count_log idemd.log "outcome=duplicate queue=$qb ")" 50 "duplicates on $qb"
h_assert_eq "$(h_depth "$qa")" 0 "depth of $qa"
h_assert_eq "$(h_depth "$qb")" 0 "depth of $qb"
echo "t_fanout_two_consumers: ok"
