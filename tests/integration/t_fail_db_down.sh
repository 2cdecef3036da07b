# t_fail_db_down: MariaDB stopped (cleanly, then kill -9) while messages flow: nothing dead-lettered, every effect exactly once, idemd keeps running.
source "$H_ROOT/tests/chaos/lib.sh"
trap c_servers_ensure EXIT # never leave the shared MariaDB down for the next cases
db=t_fail_db_down
q=t_fail_db_down.q
total=4000
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; prefetch = 100;
             batch_size = 50; settings = { sleep_ms = 1; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

# ~10 s of load at 400 messages/s.
h_gen d 1 $total | h_mq publish -r "$q" --rate 400 >pub.txt 2>pub.err &
pub=$!

records() { h_sql "SELECT COUNT(*) FROM msg_id_record" 2>/dev/null || echo "?"; }
h_wait_sql "SELECT COUNT(*) >= 300 FROM msg_id_record" 1 30
before=$(records)
c_mariadb_stop TERM
sleep 3
h_daemon_alive || h_fail "idemd died while MariaDB was down"
c_mariadb_start
echo "clean stop of MariaDB with $before records committed"

h_wait_sql "SELECT COUNT(*) >= $((before + 500)) FROM msg_id_record" 1 40
before=$(records)
c_mariadb_stop KILL
sleep 3
h_daemon_alive || h_fail "idemd died while MariaDB was down (kill -9)"
c_mariadb_start
echo "kill -9 of MariaDB with $before records committed"

wait "$pub" || h_fail "publisher failed: $(cat pub.err)"
h_assert_eq "$(cat pub.txt)" "published $total confirmed $total" "publisher"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record" "$total" 90
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects" "$total"$'\t'"$total"$'\t1' 30
h_wait_depth "$q" 0 30
h_daemon_alive || h_fail "idemd is not running at the end"
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters"
h_assert_eq "$(h_count_log idemd.log "outcome=reject ")" 0 "reject outcomes"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects e LEFT JOIN msg_id_record r
                      ON r.consumer = e.queue AND r.msg_id = e.msg_id WHERE r.id IS NULL")" 0 \
    "effects without a record"
lost_db=$(h_count_log idemd.log "exited with code 75")
((lost_db >= 2)) || h_fail "workers noticed the database outages only $lost_db times"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_fail_db_down: ok ($lost_db worker exits on lost connections," \
    "$(h_count_log idemd.log "outcome=duplicate ") duplicates absorbed)"
