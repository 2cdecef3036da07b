# t_basic_1000: 1,000 distinct messages through counter.so give exactly 1,000 effects and record rows.
db=t_basic_1000
q=t_basic_1000.q
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; consumer = "$q";
             prefetch = 200; workers = 1; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

out=$(h_gen m 1 1000 | h_mq publish -r "$q" --confirmed-file confirmed.txt)
h_assert_eq "$out" "published 1000 confirmed 1000" "publisher"

h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'" 1000 60
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'" $'1000\t1000\t1' 10
h_wait_log idemd.log "outcome=ok queue=$q " 1000 10 || true # debug lines, informational
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# Nothing moved after the stop, and every confirmed id has its effect and its record.
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'")" \
    $'1000\t1000\t1' "effects after stop"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'")" 1000 "record rows"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects e JOIN msg_id_record r
                      ON r.consumer = e.queue AND r.msg_id = e.msg_id")" 1000 "effects matching records"
cmp -s <(h_sql "SELECT msg_id FROM effects WHERE queue = '$q'" | sort) <(sort confirmed.txt) ||
    h_fail "effect ids differ from the confirmed ids"
h_assert_eq "$(h_depth "$q")" 0 "queue depth after stop"
h_assert_eq "$(h_count_log idemd.log 'outcome=(retry|reject)')" 0 "retry/reject outcomes"
echo "t_basic_1000: ok"
