# t_fail_republisher_closed: the broker closes the idle republishing connection: the worker notices before its next round and opens a new one, so no round fails and nothing pauses; every message is done once.
source "$H_ROOT/tests/chaos/lib.sh"
trap c_servers_ensure EXIT
db=t_fail_republisher_closed
q=t_fail_repub.q
n=300
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$q.retry.200"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 50;
             batch_size = 20; retry_delays_ms = [ 200 ]; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

# a1 asks for one retry: the worker opens its republishing connection for the delay copy.
out=$(printf 'a1\tretry-once\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "first publisher"
h_wait_sql "SELECT n FROM effects WHERE msg_id = 'a1'" 1 30
c_close_named_conn "idemd $q#0 republisher" || h_fail "could not close the republishing connection"

# a2's delay copy: the worker reads the broker's connection.close first (the idle connection
# is serviced) and publishes on a new connection. The good messages need no copy.
out=$(printf 'a2\tretry-once\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "second publisher"
h_wait_log idemd.log "publishing connection closed by broker" 1 30 || h_fail "the close was not noticed"
h_wait_log idemd.log "outcome=retry queue=$q id=a2 .*then=\"retry scheduled" 1 30 ||
    h_fail "a2's copy did not go out on a new connection"
out=$(h_gen g 1 $n | h_mq publish -r "$q")
h_assert_eq "$out" "published $n confirmed $n" "third publisher"
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects" "$((n + 2))"$'\t'"$((n + 2))"$'\t1' 60
h_wait_depth "$q" 0 30
h_assert_eq "$(h_count_log idemd.log "republishing failed")" 0 "failed rounds reported"
h_assert_eq "$(h_count_log idemd.log "pausing [0-9]+ ms")" 0 "pauses"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record")" "$((n + 2))" "records"
h_assert_eq "$(h_depth "$q.retry.200")" 0 "depth of the delay queue"
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters"
h_daemon_alive || h_fail "idemd is not running at the end"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_fail_republisher_closed: ok ($(grep -m1 -oE "publishing (connection|channel) closed by broker: .*|publishing to .*" idemd.log))"
