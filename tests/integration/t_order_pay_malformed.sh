# t_order_pay_malformed: order_pay.so dead-letters malformed payments and pays good ones exactly once; a body with orderId twice is refused with the reason of idemd's one JSON reader (json-c took the last one: order 4 would have been paid).
db=t_order_pay_malformed
q=t_order_pay.q
dlq=t_order_pay.dlq
h_new_db "$db"
h_sql "INSERT INTO orders(id) VALUES (1), (2), (3), (4)"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_PLUGINS/order_pay.so"; prefetch = 20;
             declare = { dead_letter_queue = "$dlq"; }; settings = { table = "orders"; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

cat >msgs.txt <<'MSGS'
p1	{"orderId": 1}
p2	not json at all
p3	{"foo": 3}
p4	{"orderId": "abc"}
p5	{"orderId": 2}
p6	{"orderId": 1.5}
p7	{"orderId": 999}
p1	{"orderId": 1}
p8	{"orderId": 1}
p9	{"orderId": "3"}
p10	[1, 2]
p11	{"orderId": 2, "orderId": 4}
MSGS
out=$(h_mq publish -r "$q" <msgs.txt)
h_assert_eq "$out" "published 12 confirmed 12" "publisher"

h_wait_depth "$dlq" 7 60
h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'" 4 30
h_wait_log idemd.log "outcome=(ok|duplicate|reject) queue=$q " 12 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT id, status, pay_count, pay_time IS NOT NULL FROM orders ORDER BY id")" \
    $'1\t2\t1\t1\n2\t2\t1\t1\n3\t2\t1\t1\n4\t1\t0\t0' "orders"
h_assert_eq "$(h_sql "SELECT msg_id FROM msg_id_record WHERE consumer = '$q' ORDER BY msg_id")" \
    $'p1\np5\np8\np9' "record rows"
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"
h_mq get "$dlq" >dlq.txt
h_assert_eq "$(cut -f1 dlq.txt | sort | paste -sd' ')" "p10 p11 p2 p3 p4 p6 p7" "dead-lettered ids"
h_assert_eq "$(h_count_log idemd.log "outcome=duplicate queue=$q id=p1 ")" 1 "duplicate of p1"
p11=$(awk -F'\t' '$1 == "p11"' dlq.txt | grep -oE 'idemd-error=[^;]*' || true)
[[ $p11 == *'body is not I-JSON: duplicate member "orderId" at $'* ]] ||
    h_fail "p11 (orderId twice) dead-lettered with '$p11', not the reader's reason"
for id in p2 p3 p4 p6 p7 p10 p11; do
    grep -E "outcome=reject queue=$q id=$id .*reason=." idemd.log >/dev/null ||
        h_fail "no reject line with a reason for $id"
done
echo "t_order_pay_malformed: ok"
