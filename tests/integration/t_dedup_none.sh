# t_dedup_none: dedup = "none" with order_pay.so: duplicates are paid once by the business guard, no record rows.
db=t_dedup_none
q=t_dedup_none.q
qn=t_dedup_none.unguarded
h_new_db "$db"
h_sql "CREATE TABLE orders_unguarded LIKE orders"
ids=$(seq 1 200 | sed 's/.*/(&)/' | paste -sd,)
h_sql "INSERT INTO orders(id) VALUES $ids; INSERT INTO orders_unguarded(id) VALUES $ids"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_PLUGINS/order_pay.so"; dedup = "none"; prefetch = 100;
    settings = { table = "orders"; }; },
  # Negative control: same messages, no business guard: every delivery pays again.
  { name = "$qn"; handler = "$H_PLUGINS/order_pay.so"; dedup = "none"; prefetch = 100;
    settings = { table = "orders_unguarded"; guard = false; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

# 200 payments; orders 1..50 again with the same message id back-to-back;
# orders 51..100 again later with new message ids (a producer that re-sent).
awk 'BEGIN { for (i = 1; i <= 200; i++) { l = sprintf("p%d\t{\"orderId\": %d}", i, i); print l; if (i <= 50) print l } }' >first.txt
awk 'BEGIN { for (i = 51; i <= 100; i++) printf "again%d\t{\"orderId\": %d}\n", i, i }' >later.txt
for queue in "$q" "$qn"; do
    out=$(h_mq publish -r "$queue" <first.txt)
    h_assert_eq "$out" "published 250 confirmed 250" "first publish to $queue"
done
h_wait_log idemd.log "outcome=ok queue=$q " 250 60
for queue in "$q" "$qn"; do
    out=$(h_mq publish -r "$queue" <later.txt)
    h_assert_eq "$out" "published 50 confirmed 50" "later publish to $queue"
done
h_wait_log idemd.log "outcome=ok queue=$q " 300 60
h_wait_log idemd.log "outcome=ok queue=$qn " 300 60
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(pay_count), MAX(pay_count), MIN(pay_count) FROM orders WHERE status = 2 AND pay_time IS NOT NULL")" \
    $'200\t200\t1\t1' "paid orders (count, sum, max, min pay_count)"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record")" 0 "record rows with dedup = none"
# The control shows the duplicates really reached the handler.
h_assert_eq "$(h_sql "SELECT SUM(pay_count), MAX(pay_count) FROM orders_unguarded")" $'300\t2' \
    "unguarded control (sum, max pay_count)"
h_assert_eq "$(h_count_log idemd.log 'outcome=(retry|reject|duplicate)')" 0 "other outcomes"
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"
h_assert_eq "$(h_depth "$qn")" 0 "depth of $qn"
echo "t_dedup_none: ok"
