# t_order_pay_batch: order_pay's set-based handle_batch (ABI 1.2): one UPDATE per batch, per-message verdicts (unknown order and bad body rejected alone), every order paid once; batch_handler = false takes handle() per message with the same result.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_order_pay_batch
qb=t_opb.batch
qm=t_opb.single
h_new_db "$db"
c_fresh_queues "$qb" "$qb.dlq" "$qm" "$qm.dlq"
h_sql "CREATE TABLE orders_single LIKE orders"
ids=$(seq 1 300 | sed 's/.*/(&)/' | paste -sd,)
h_sql "INSERT INTO orders(id) VALUES $ids; INSERT INTO orders_single(id) VALUES $ids"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qb"; handler = "$H_PLUGINS/order_pay.so"; workers = 1; prefetch = 200; batch_size = 100;
    batch_wait_ms = 300; settings = { table = "orders"; }; },
  { name = "$qm"; handler = "$H_PLUGINS/order_pay.so"; workers = 1; prefetch = 200; batch_size = 100;
    batch_wait_ms = 300; batch_handler = false; settings = { table = "orders_single"; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
# 300 payments, every 10th sent twice with the same id, order 7 paid again under a new id (a
# second payment: OK, nothing to do), one unknown order and one bad body in the middle.
awk 'BEGIN { for (i = 1; i <= 300; i++) {
        l = sprintf("p%d\t{\"orderId\": %d}", i, i); print l; if (i % 10 == 0) print l
        if (i == 150) { print "unknown\t{\"orderId\": 99999}"; print "bad\t{\"order\": 1}" }
        if (i == 200) print "again7\t{\"orderId\": 7}" } }' >pay.txt
for queue in "$qb" "$qm"; do
    out=$(h_mq publish -r "$queue" <pay.txt)
    h_assert_eq "$out" "published 333 confirmed 333" "publisher to $queue"
done
for t in orders orders_single; do
    h_wait_sql "SELECT COUNT(*), SUM(pay_count), MAX(pay_count) FROM $t WHERE status = 2" $'300\t300\t1' 60
done
h_wait_depth "$qb.dlq" 2 30
h_wait_depth "$qm.dlq" 2 30
h_wait_depth "$qb" 0 10
h_wait_depth "$qm" 0 10
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$qb'")" 301 "records of $qb"
h_wait_log idemd.log "outcome=reject queue=$qb id=unknown .*order 99999 does not exist" 1 5
h_wait_log idemd.log "outcome=reject queue=$qb id=bad .*orderId missing" 1 5
# The batch queue went through handle_batch, the other never did.
calls=$(h_count_log idemd.log "$qb#0 debug: batch of [0-9]+: handle_batch called")
((calls >= 1)) || h_fail "$qb never called handle_batch"
h_assert_eq "$(h_count_log idemd.log "$qm#0 debug: batch of [0-9]+: handle_batch called [1-9]")" 0 \
    "handle_batch calls on $qm (batch_handler = false)"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_order_pay_batch: ok ($calls batches through handle_batch)"
