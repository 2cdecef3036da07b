# t_duplicates: 10% duplicate ids, back-to-back in one publish and again in a later publish: one effect per id.
db=t_duplicates
q=t_duplicates.q
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 200; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

# First publish: d1..d1000, each of d1..d50 sent twice in a row.
h_gen d 1 1000 | awk -F'\t' '{ print; n = substr($1, 2) + 0; if (n <= 50) print }' >first.txt
h_assert_eq "$(wc -l <first.txt)" 1050 "first publish lines"
out=$(h_mq publish -r "$q" <first.txt)
h_assert_eq "$out" "published 1050 confirmed 1050" "first publish"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record" 1000 60
h_wait_log idemd.log "outcome=(ok|duplicate) queue=$q " 1050 30

# Later publish: d951..d1000 again, after their first copies were committed.
out=$(h_gen d 951 1000 | h_mq publish -r "$q")
h_assert_eq "$out" "published 50 confirmed 50" "second publish"
h_wait_log idemd.log "outcome=(ok|duplicate) queue=$q " 1100 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n), MIN(n) FROM effects WHERE queue = '$q'")" \
    $'1000\t1000\t1\t1' "effects (count, sum, max, min)"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE n <> 1")" 0 "effects with n <> 1"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'")" 1000 "record rows"
h_assert_eq "$(h_count_log idemd.log "outcome=duplicate queue=$q ")" 100 "duplicate outcomes"
h_assert_eq "$(h_count_log idemd.log "outcome=ok queue=$q ")" 1000 "ok outcomes"
h_assert_eq "$(h_depth "$q")" 0 "queue depth after stop"
echo "t_duplicates: ok"
