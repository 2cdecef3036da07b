# t_fail_quorum_returns: a message on a quorum queue returned 32 times by kill -9 of the whole daemon (a handler that hangs) is dead-lettered by idemd's guard with its reason, never deleted by a broker delivery limit (RabbitMQ 4 default 20); the 20 messages behind it are processed once.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_quorum_returns
q=t_fail_qret.q
kills=32
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
# max_attempts 21: the guard gives up after 21 + 10 starts without a confirmed crash, so the
# message is delivered 33 times: returned 32 times, past RabbitMQ 4's default limit of 20.
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 50;
             max_attempts = 21; declare = { quorum = true; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
out=$({ printf 'poison\thang\n'; h_gen g 1 20; } | h_mq publish -r "$q")
h_assert_eq "$out" "published 21 confirmed 21" "publisher"

for round in $(seq 1 $kills); do
    if ((round == 1)); then
        # Its first run (not suspect, no start counted): hanging with its effect written.
        h_wait_sql "SELECT COUNT(*) > 0 FROM information_schema.innodb_trx WHERE trx_rows_modified >= 1" \
            1 30 || h_fail "poison's first run did not start"
    else
        # Redelivered, it runs alone, its start counted before the handler runs.
        h_wait_sql "SELECT attempts FROM idemd_attempt WHERE msg_id = 'poison'" $((round - 1)) 30 ||
            h_fail "poison's start $((round - 1)) was not counted"
    fi
    h_daemon_kill9
    h_daemon_start idemd.conf idemd.log
done
h_wait_depth "$q.dlq" 1 60 || h_fail "poison was not dead-lettered (deleted by the broker?)"
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE msg_id LIKE 'g%'" $'20\t20\t1' 60 ||
    h_fail "the messages behind poison were not processed once"
h_wait_depth "$q" 0 30 || h_fail "$q is not empty"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_sql "SELECT attempts FROM idemd_attempt WHERE msg_id = 'poison'")" $kills \
    "poison's counted starts"
c_dead_letter "$q.dlq" poison hang "handler started $((kills - 1)) times without finishing"
h_assert_eq "$(h_depth "$q.dlq")$(h_depth "$q")" 00 "messages left in $q.dlq (taken) and $q"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'poison'")" 0 "effects of poison"
h_assert_eq "$(h_count_log idemd.log "returned to the queue [0-9]+ times")" 0 "returns guard lines"
echo "t_fail_quorum_returns: ok ($kills returns)"
