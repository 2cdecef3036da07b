# t_fail_batch_culprit: one poisoned payment makes order_pay's handle_batch fail as a whole; the batch falls back to handle() per message, so only that payment is retried and dead-lettered and every other order is paid once.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_batch_culprit
q=t_fail_batch_culprit.q
# The server's error number for a CHECK constraint violation.
check_err=4025
h_db_is_mysql && check_err=3819
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$q.retry.200"
ids=$(seq 1 300 | sed 's/.*/(&)/' | paste -sd,)
h_sql "INSERT INTO orders(id) VALUES $ids"
# The poison: order 150 cannot be paid. The batch's one UPDATE ... WHERE id IN (...) fails
# whole (a CHECK constraint violation: error 4025 on MariaDB, 3819 on MySQL), as does handle()'s UPDATE of that order alone.
h_sql "ALTER TABLE orders ADD CONSTRAINT poison CHECK (id <> 150 OR status <> 2)"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_PLUGINS/order_pay.so"; prefetch = 300; batch_size = 100;
             batch_wait_ms = 300; max_attempts = 2; retry_delays_ms = [ 200 ];
             settings = { table = "orders"; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

awk 'BEGIN { for (i = 1; i <= 300; i++) printf "p%d\t{\"orderId\": %d}\n", i, i }' >pay.txt
out=$(h_mq publish -r "$q" <pay.txt)
h_assert_eq "$out" "published 300 confirmed 300" "publisher"

h_wait_sql "SELECT COUNT(*), SUM(pay_count), MAX(pay_count) FROM orders WHERE status = 2" $'299\t299\t1' 60
h_wait_depth "$q.dlq" 1 30
h_wait_depth "$q" 0 10
h_wait_depth "$q.retry.200" 0 10
h_wait_log idemd.log "outcome=retry queue=$q id=p150 .*attempt=2/2 .*then=\"dead-lettered to $q.dlq\" reason=\"gave up after 2 attempts: mysql error $check_err" 1 5
h_assert_eq "$(h_sql "SELECT status FROM orders WHERE id = 150")" 1 "order 150 unpaid"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'")" 299 "records"
h_assert_eq "$(h_count_log idemd.log "outcome=(reject|retry) queue=$q ")" \
    "$(h_count_log idemd.log "outcome=(reject|retry) queue=$q id=p150 ")" \
    "retried or rejected payments other than p150 (none)"
h_wait_log idemd.log "handle_batch failed \(mysql error $check_err.*\): running its messages one by one" 1 5
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
c_dead_letter "$q.dlq" p150 '{"orderId": 150}' "mysql error $check_err"
echo "t_fail_batch_culprit: ok"
