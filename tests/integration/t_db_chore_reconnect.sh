# t_db_chore_reconnect: a database connection killed while a chore (reconcile) uses it is reopened in place: no worker exit, the next batch is not lost, and the chore's lease is still the worker's (its next run does not wait for the lease to run out).
source "$H_ROOT/tests/chaos/lib.sh"
db=t_db_chore_reconnect
q=t_db_chore.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
{
    # shellcheck disable=SC2001 # one substitution in a heredoc's output
    sed 's/shutdown_timeout = 30;/shutdown_timeout = 30; reconcile_interval = 1; reconcile_timeout = 10;/' \
        <<<"$(h_conf_common "$db")"
    cat <<CONF
# One worker, whose reconcile() holds its transaction open for 4 s (a lease of 10 + 30 s).
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1;
             settings = { reconcile_sleep_ms = 4000; }; } );
CONF
} >idemd.conf
grep -q 'reconcile_timeout = 10;' idemd.conf || h_fail "could not set reconcile_timeout"
h_daemon_start idemd.conf idemd.log
h_assert_eq "$(printf 'i1\tgood\n' | h_mq publish -r "$q")" "published 1 confirmed 1" "publisher"
h_wait_sql "SELECT COUNT(*) FROM effects" 1 10

# The worker's session while a reconcile run is under way, begun less than 2 s ago (its
# transaction stays open 2 s more: the KILL lands inside it).
session()
{
    h_sql "SELECT t.trx_mysql_thread_id FROM information_schema.innodb_trx t
           JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id
           WHERE p.db = '$db' AND t.trx_started > NOW() - INTERVAL 2 SECOND LIMIT 1"
}
deadline=$((SECONDS + 30))
until id=$(session) && [[ -n "$id" ]]; do
    ((SECONDS < deadline)) || h_fail "no reconcile transaction seen in 30 s"
    sleep 0.1
done
h_sql "KILL $id"
h_wait_log idemd.log "database connection lost in a chore" 1 15
done_runs=$(h_sql "SELECT COUNT(*) FROM reconcile_runs WHERE ended_at IS NOT NULL")

# The next message is handled by the same worker, on its new connection.
h_assert_eq "$(printf 'i2\tgood\n' | h_mq publish -r "$q")" "published 1 confirmed 1" "publisher"
h_wait_sql "SELECT GROUP_CONCAT(CONCAT(msg_id, ':', n) ORDER BY msg_id) FROM effects" "i1:1,i2:1" 20
# The next reconcile run commits well before the 40 s lease would have run out.
h_wait_sql "SELECT COUNT(*) > $done_runs FROM reconcile_runs WHERE ended_at IS NOT NULL" 1 20
h_assert_eq "$(h_count_log idemd.log "exited with code")" 0 "worker exits"
h_assert_eq "$(h_count_log idemd.log "database connection lost")" 1 "connections lost"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_db_chore_reconnect: ok"
