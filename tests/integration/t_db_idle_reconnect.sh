# t_db_idle_reconnect: a database connection the server closed while idle (wait_timeout, KILL) is found by a ping and reopened: the next batch is not lost to 2006.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_db_idle_reconnect
q=t_db_idle.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
{
    h_conf_common "$db"
    cat <<CONF
# One worker: with several (workers = "auto" starts 2), a worker whose last ping came less than
# a second before the KILL has not looked yet when i2 arrives, and its batch meets 2013 (exit 75,
# i2 redelivered to another worker): correct, but not the idle ping this case is about.
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
h_assert_eq "$(printf 'i1\tgood\n' | h_mq publish -r "$q")" "published 1 confirmed 1" "publisher"
h_wait_sql "SELECT COUNT(*) FROM effects" 1 10
# The server closes idemd's idle session (as wait_timeout or an operator's KILL would).
ids=$(h_sql "SELECT GROUP_CONCAT(id) FROM information_schema.processlist WHERE db = '$db' AND id <> CONNECTION_ID()")
[[ -n "$ids" && "$ids" != NULL ]] || h_fail "no idemd session in the processlist"
for id in ${ids//,/ }; do h_sql "KILL $id"; done
h_wait_log idemd.log "database connection lost while idle" 1 10
h_assert_eq "$(printf 'i2\tgood\n' | h_mq publish -r "$q")" "published 1 confirmed 1" "publisher"
h_wait_sql "SELECT GROUP_CONCAT(CONCAT(msg_id, ':', n) ORDER BY msg_id) FROM effects" "i1:1,i2:1" 20
h_assert_eq "$(h_count_log idemd.log "exited with code|error 2006|error 2013")" 0 "worker exits and lost batches"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_db_idle_reconnect: ok"
