# t_handler_retry: "retry-once" commits once after one retry; "retry" cycles without effect or record.
db=t_handler_retry
q=t_handler_retry.q
dlq=t_handler_retry.dlq
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 10;
             max_attempts = 1000; retry_delays_ms = [ 100, 200 ];
             declare = { dead_letter_queue = "$dlq"; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

out=$(printf 'r1\tretry-once\nr2\tretry\ng1\tgood\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 3 confirmed 3" "publisher"

h_wait_sql "SELECT n FROM effects WHERE queue = '$q' AND msg_id = 'r1'" 1 60
h_wait_sql "SELECT n FROM effects WHERE queue = '$q' AND msg_id = 'g1'" 1 30
# r2 goes round and round: several retries seen while nothing of it is ever committed.
h_wait_log idemd.log "outcome=retry queue=$q id=r2 " 3 60
for i in 1 2 3 4 5; do
    h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'r2'")" 0 "effects of r2 (check $i)"
    h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE msg_id = 'r2'")" 0 "record of r2 (check $i)"
    sleep 0.5
done
h_daemon_alive || h_fail "idemd died while r2 was cycling"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT msg_id, n FROM effects WHERE queue = '$q' ORDER BY msg_id")" \
    $'g1\t1\nr1\t1' "effects"
h_assert_eq "$(h_sql "SELECT msg_id FROM msg_id_record WHERE consumer = '$q' ORDER BY msg_id")" \
    $'g1\nr1' "record rows"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q id=r1 ")" 1 "retries of r1"
# r2 is still somewhere: back in the queue (after its retry delay ran out), or dead-lettered
# had max_attempts run out; never lost, never doubled.
deadline=$((SECONDS + 15))
while :; do
    d1=$(h_depth "$q")
    d2=$(h_depth "$dlq")
    (((d1 + d2) == 1 || SECONDS >= deadline)) && break
    sleep 0.2
done
h_assert_eq "$((d1 + d2))" 1 "copies of r2 left in $q ($d1) and $dlq ($d2)"
echo "t_handler_retry: ok (r2 retried $(h_count_log idemd.log "outcome=retry queue=$q id=r2 ") times)"
