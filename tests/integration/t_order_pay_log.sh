# t_order_pay_log: order_pay's settings.log_table: one log row (order_id, msg_id) per accepted payment, through handle() (a second prepared statement per message) and handle_batch (one multi-row INSERT); duplicates absorbed, rejected messages logged nowhere, a second payment of a paid order logged.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_order_pay_log
qb=t_opl.batch
qm=t_opl.single
h_new_db "$db"
c_fresh_queues "$qb" "$qb.dlq" "$qm" "$qm.dlq"
h_sql "CREATE TABLE orders_single LIKE orders"
h_mysql "$db" <"$H_ROOT/bench/order_pay_log.sql"
h_sql "CREATE TABLE order_pay_log_single LIKE order_pay_log"
ids=$(seq 1 200 | sed 's/.*/(&)/' | paste -sd,)
h_sql "INSERT INTO orders(id) VALUES $ids; INSERT INTO orders_single(id) VALUES $ids"
conf()
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qb"; handler = "$H_PLUGINS/order_pay.so"; prefetch = 200; batch_size = 100;
    batch_wait_ms = 300; settings = { table = "orders"; log_table = "$1"; }; },
  { name = "$qm"; handler = "$H_PLUGINS/order_pay.so"; prefetch = 200; batch_size = 100;
    batch_wait_ms = 300; batch_handler = false;
    settings = { table = "orders_single"; log_table = "order_pay_log_single"; }; }
);
CONF
}
conf order_pay_log >idemd.conf
h_daemon_start idemd.conf idemd.log
# 200 payments, every 10th sent twice with the same id, order 7 paid again under a new id (OK:
# logged), one unknown order and one bad body (rejected: not logged).
awk 'BEGIN { for (i = 1; i <= 200; i++) {
        l = sprintf("p%d\t{\"orderId\": %d}", i, i); print l; if (i % 10 == 0) print l
        if (i == 100) { print "unknown\t{\"orderId\": 99999}"; print "bad\t{\"order\": 1}" }
        if (i == 150) print "again7\t{\"orderId\": 7}" } }' >pay.txt
for queue in "$qb" "$qm"; do
    out=$(h_mq publish -r "$queue" <pay.txt)
    h_assert_eq "$out" "published 223 confirmed 223" "publisher to $queue"
done
h_wait_depth "$qb.dlq" 2 60
h_wait_depth "$qm.dlq" 2 60
h_wait_depth "$qb" 0 30
h_wait_depth "$qm" 0 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
for t in order_pay_log order_pay_log_single; do
    h_assert_eq "$(h_sql "SELECT COUNT(*), COUNT(DISTINCT msg_id), SUM(order_id = 7) FROM $t")" $'201\t201\t2' \
        "log rows, distinct ids, rows of order 7 in $t"
    h_assert_eq "$(h_sql "SELECT COUNT(*) FROM $t WHERE msg_id IN ('unknown', 'bad') OR order_id = 99999")" 0 \
        "rejected payments logged in $t"
    h_assert_eq "$(h_sql "SELECT msg_id FROM $t WHERE order_id = 200")" p200 "the log row of order 200 in $t"
done
for t in orders orders_single; do
    h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(pay_count), MAX(pay_count) FROM $t WHERE status = 2")" $'200\t200\t1' "payments in $t"
done
calls=$(h_count_log idemd.log "$qb#[0-9]+ debug: batch of [0-9]+: handle_batch called")
((calls >= 1)) || h_fail "$qb never called handle_batch"
echo "t_order_pay_log: ok ($calls batches through handle_batch)"
