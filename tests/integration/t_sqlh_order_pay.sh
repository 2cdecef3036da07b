# t_sqlh_order_pay: conf/order_pay_sql.conf's statements have order_pay.so's effects: the same messages (payments, duplicates, a second payment of a paid order, unknown and wrong-status orders, a string orderId, a body without orderId, one that is not JSON) leave the same orders rows and the same dead letters.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_sqlh_order_pay
qp=t_sqlh_op.plugin
qs=t_sqlh_op.sql
h_new_db "$db"
c_fresh_queues "$qp" "$qp.dlq" "$qs" "$qs.dlq"
h_sql "CREATE TABLE orders_sql LIKE orders"
ids=$(seq 1 60 | sed 's/.*/(&)/' | paste -sd,)
for t in orders orders_sql; do
    h_sql "INSERT INTO $t (id) VALUES $ids; UPDATE $t SET status = 2, pay_count = 1 WHERE id BETWEEN 41 AND 45;
           UPDATE $t SET status = 3 WHERE id = 46"
done
# The example's statement list, on orders_sql.
sql=$(awk '/^    sql = \(/ { on = 1 } on { print } on && /^    \); }/ { exit }' "$H_ROOT/conf/order_pay_sql.conf" |
    sed -e 's/\(FROM\|UPDATE\) orders /\1 orders_sql /' -e 's/ *#.*$//' -e 's/); }$/);/')
[[ "$sql" == *"orders_sql"* && "$sql" == *"expect"* ]] || h_fail "no statements read from conf/order_pay_sql.conf: $sql"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qp"; handler = "$H_PLUGINS/order_pay.so"; workers = 1; batch_size = 20; batch_handler = false; },
  { name = "$qs"; handler = "sql"; workers = 1; batch_size = 20;
$sql }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
{
    for i in $(seq 1 50); do printf 'p%d\t{"orderId": %d}\n' "$i" "$i"; done
    for i in 3 9 27; do printf 'p%d\t{"orderId": %d}\n' "$i" "$i"; done # duplicates
    printf 'again7\t{"orderId": 7}\n'          # a second payment of a paid order: acked
    printf 'paid42\t{"orderId": 42}\n'         # paid before: acked
    printf 'status46\t{"orderId": 46}\n'       # status 3: dead-lettered
    printf 'unknown\t{"orderId": 99999}\n'     # no such order: dead-lettered
    printf 'str55\t{"orderId": "55"}\n'        # a string of digits: paid
    printf 'noid\t{"order": 56}\n'             # no orderId: dead-lettered
    printf 'notjson\t{"orderId": 57\n'         # not JSON: dead-lettered
} >pub.txt
for q in "$qp" "$qs"; do
    h_assert_eq "$(h_mq publish -r "$q" <pub.txt)" "published 60 confirmed 60" "publisher to $q"
done
for q in "$qp" "$qs"; do h_wait_depth "$q.dlq" 5 60; h_wait_depth "$q" 0 30; done
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
rows() { h_sql "SELECT id, status, pay_count, pay_time IS NULL FROM $1 ORDER BY id"; }
h_assert_eq "$(rows orders_sql)" "$(rows orders)" "orders rows: SQL handler = order_pay.so"
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(pay_count) FROM orders_sql WHERE status = 2")" $'50\t50' "paid orders (1-50 but 46, 41-45 paid before, 55), once each"
for q in "$qp" "$qs"; do
    h_mq get "$q.dlq" -n 5 | cut -f1 | sort | paste -sd, >"dlq-$q.txt"
done
h_assert_eq "$(cat "dlq-$qs.txt")" "$(cat "dlq-$qp.txt")" "dead letters: SQL handler = order_pay.so"
h_assert_eq "$(cat "dlq-$qs.txt")" "noid,notjson,p46,status46,unknown" "the dead letters"
echo "t_sqlh_order_pay: ok"
