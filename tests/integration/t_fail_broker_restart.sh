# t_fail_broker_restart: idemd's connections closed by rabbitmqctl under load, then RabbitMQ restarted mid-run: exactly once at the end, idemd still running.
source "$H_ROOT/tests/chaos/lib.sh"
trap c_servers_ensure EXIT # never leave the shared RabbitMQ down for the next cases
db=t_fail_broker_restart
q=t_fail_broker.q
n2=3000
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$q.retry.300"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; prefetch = 100;
             batch_size = 50; retry_delays_ms = [ 300 ]; settings = { sleep_ms = 2; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
records() { h_sql "SELECT COUNT(*) FROM msg_id_record"; }

# Every 100th message asks for one retry, so the republishing connections are in use too
# and retry copies sit in the delay queue across the restart.
gen() { awk -v a="$1" -v b="$2" 'BEGIN { for (i = a; i <= b; i++) printf "r%d\t%s\n", i, i % 100 ? "body" : "retry-once" }'; }

# Phase 1: steady load (~300/s) for as long as it takes to close idemd's connections twice
# with deliveries in flight.
rm -f stop1
c_gen_until r stop1 30 100 | h_mq publish -r "$q" >pub1.txt 2>pub1.err &
pub1=$!
for at in 300 1000; do
    h_wait_sql "SELECT COUNT(*) >= $at FROM msg_id_record" 1 60
    c_wait_consumed "$q" 60
    closed=$(c_close_idemd_conns 0)
    ((closed >= 1)) || h_fail "closed no idemd connection at $at"
    echo "closed $closed connections; $(records) records committed"
done
touch stop1
wait "$pub1" || h_fail "first publisher failed: $(cat pub1.err)"
n1=$(sed -n 's/^published \([0-9]*\) confirmed \1$/\1/p' pub1.txt)
[[ -n "$n1" ]] || h_fail "first publisher: $(cat pub1.txt)"
# A worker notices a close when it next reads that connection: give it time to.
h_wait_log idemd.log "chaos: closed by test" 2 30 || h_fail "idemd logged fewer than 2 of the closes"
total=$((n1 + n2))

# Phase 2: a backlog, and RabbitMQ restarted while idemd works through it.
out=$(gen $((n1 + 1)) $total | h_mq publish -r "$q")
h_assert_eq "$out" "published $n2 confirmed $n2" "second publisher"
h_wait_sql "SELECT COUNT(*) >= $((n1 + 300)) FROM msg_id_record" 1 60
at=$(records)
((at < total - 500)) || h_fail "only $((total - at)) messages left at the restart: nothing to test"
echo "restarting RabbitMQ with $at records committed"
c_rabbit_restart TERM
h_daemon_alive || h_fail "idemd died while RabbitMQ was down"
t0=$SECONDS
c_wait_consumed "$q" 60
echo "idemd consuming again $((SECONDS - t0)) s after RabbitMQ came back"

h_wait_sql "SELECT COUNT(*) FROM msg_id_record" "$total" 90
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects" "$total"$'\t'"$total"$'\t1' 30
h_wait_depth "$q" 0 30
h_assert_eq "$(h_depth "$q.retry.300")" 0 "depth of the delay queue"
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters"
h_assert_eq "$(h_count_log idemd.log "outcome=reject ")" 0 "reject outcomes"
h_daemon_alive || h_fail "idemd is not running at the end"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_fail_broker_restart: ok ($(h_count_log idemd.log "exited with code 75") worker exits," \
    "$(h_count_log idemd.log "outcome=duplicate ") duplicates absorbed)"
