# t_sweep_idle: the outbox sweeper of a worker whose outbox is empty only looks (one read): it takes no lease, so no lease commits (redo-log flushes) stall the batches every 5 s; the outbox depth still shows in the metrics.
db=t_sweep_idle
q=t_sweep_idle.q
n=200
mport=$(h_free_port 35000 2000)
h_new_db "$db"
h_sql "INSERT INTO orders(id) SELECT seq FROM $(h_seq "$n")"
{
    h_conf_common "$db"
    cat <<CONF
metrics = { listen = "127.0.0.1:$mport"; };
queues = ( { name = "$q"; handler = "$H_PLUGINS/order_pay.so"; workers = 1;
             settings = { table = "orders"; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
awk -v n="$n" 'BEGIN { for (i = 1; i <= n; i++) printf "pay%d\t{\"orderId\": %d}\n", i, i }' |
    h_mq publish -r "$q" >pub.txt || h_fail "publish failed: $(cat pub.txt)"
h_wait_sql "SELECT COUNT(*) FROM orders WHERE status = 2" "$n" 60
# The metrics show the outbox's depth once the sweeper has looked (at the worker's start, then
# every 5 s); before this change a look came only after the sweeper had taken its lease.
deadline=$((SECONDS + 30))
until [[ "$(curl -sS --max-time 5 "http://127.0.0.1:$mport/metrics" 2>/dev/null)" == *"idemd_outbox_depth{queue=\"$q\"} 0"* ]]; do
    ((SECONDS < deadline)) || h_fail "the metrics never showed idemd_outbox_depth of $q"
    sleep 0.2
done
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_lease WHERE name LIKE 'outbox:%'")" 0 \
    "outbox sweeper leases taken with an empty outbox"
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(pay_count) FROM orders WHERE status = 2")" "$n"$'\t'"$n" "orders paid once"
h_daemon_alive || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_sweep_idle: ok"
