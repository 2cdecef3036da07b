# t_outbox_chain: the seed's payment -> trade chain: order_pay sends order.paid through the outbox, trade_sync applies it; workers die after COMMIT before the relay, are killed -9, the broker restarts: every order paid once, every order.paid applied once, no outbox row left.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_outbox_chain
qp=t_chain.pay
qt=t_chain.trade
x=t_chain.events
n=3000
mport=$(h_free_port 35000 2000)
h_new_db "$db"
c_fresh_queues "$qp" "$qp.dlq" "$qt" "$qt.dlq"
h_mq exchange "$x" -t direct
h_sql "INSERT INTO orders(id) SELECT seq FROM $(h_seq "$n")"
{
    # outbox_grace = 2: rows left by a dead worker are swept after 2 s, not 30.
    h_conf_common "$db" | sed 's/shutdown_timeout = 30;/shutdown_timeout = 30; outbox_grace = 2;/'
    cat <<CONF
metrics = { listen = "127.0.0.1:$mport"; };
queues = (
  { name = "$qp"; handler = "$H_PLUGINS/order_pay.so"; workers = 2; batch_size = 50;
    settings = { table = "orders"; paid_exchange = "$x"; }; },
  { name = "$qt"; handler = "$H_PLUGINS/trade_sync.so"; workers = 2;
    declare = { bindings = ( { exchange = "$x"; routing_key = "order.paid"; } ); }; }
);
CONF
} >idemd.conf
# Each payment worker dies (SIGKILL) before its 8th relay, twice: after COMMIT, before order.paid is sent.
# The hook is in the test build only (make check-build makes idemd-test).
IDEMD=$H_BUILD/idemd-test IDEMD_TEST_CRASH_BEFORE_RELAY=8 h_daemon_start idemd.conf idemd.log

# Payments 1..n, 10% of them sent twice with the same message id.
awk -v n="$n" 'BEGIN { for (i = 1; i <= n; i++) { l = sprintf("pay%d\t{\"orderId\": %d}", i, i); print l; if (i % 10 == 0) print l } }' >pay.txt
h_mq publish -r "$qp" <pay.txt >pub.txt &
pub=$!
# Kill -9 two workers while the payments flow, then restart the broker once.
h_wait_sql "SELECT COUNT(*) > 100 FROM orders WHERE status = 2" 1 60
for k in 1 2; do
    victim=$(pgrep -g "$H_DAEMON_PID" | grep -vx "$H_DAEMON_PID" | shuf -n 1) || true
    [[ -n "$victim" ]] && kill -KILL "$victim" 2>/dev/null || true
    sleep 0.3
done
wait "$pub" || h_fail "publisher failed: $(cat pub.txt)"
h_assert_eq "$(cat pub.txt)" "published $((n + n / 10)) confirmed $((n + n / 10))" "publisher"
c_rabbit_restart
h_wait_sql "SELECT COUNT(*), SUM(pay_count), MAX(pay_count) FROM orders WHERE status = 2" \
    "$n"$'\t'"$n"$'\t1' 180
h_wait_sql "SELECT COUNT(*), SUM(settle_count), MAX(settle_count) FROM trades" "$n"$'\t'"$n"$'\t1' 180
h_wait_sql "SELECT COUNT(*) FROM idemd_outbox" 0 60
# The metrics show the outbox drained (the sweeper measures it every 5 s).
deadline=$((SECONDS + 30))
until [[ "$(curl -sS --max-time 5 "http://127.0.0.1:$mport/metrics" 2>/dev/null)" == *"idemd_outbox_depth{queue=\"$qp\"} 0"* ]]; do
    ((SECONDS < deadline)) || h_fail "idemd_outbox_depth of $qp did not come down to 0"
    sleep 0.5
done
h_wait_depth "$qp" 0 30
h_wait_depth "$qt" 0 30
h_assert_eq "$(h_depth "$qp.dlq")" 0 "dead letters of $qp"
h_assert_eq "$(h_depth "$qt.dlq")" 0 "dead letters of $qt"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$qt'")" "$n" "records of $qt"
crashes=$(h_count_log idemd.log "IDEMD_TEST_CRASH_BEFORE_RELAY: killing this worker")
((crashes >= 1)) || h_fail "no worker died between COMMIT and relay"
swept=$(h_count_log idemd.log "sweeper sent [0-9]+ onward")
((swept >= 1)) || h_fail "the sweeper never sent anything"
h_daemon_alive || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_outbox_chain: ok ($crashes deaths after COMMIT, $swept sweeps)"
