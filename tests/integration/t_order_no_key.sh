# t_order_no_key: a message of an ordered queue without its key (header missing, body not JSON, field missing or not a scalar) is dead-lettered with the reason, never handled, never dropped; one with the key goes on.
qj=t_order_no_key.j # order_key = json:order.id
qh=t_order_no_key.h # order_key = header:okey
db=t_order_no_key
source "$H_ROOT/tests/chaos/lib.sh"
h_new_db "$db"
c_fresh_queues $qj $qj.dlq $qj.retry.200 $qh $qh.dlq $qh.retry.200
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qj"; handler = "$H_TEST_PLUGINS/ordered.so"; order_key = "json:order.id";
    retry_delays_ms = [ 200 ]; },
  { name = "$qh"; handler = "$H_TEST_PLUGINS/ordered.so"; order_key = "header:okey";
    retry_delays_ms = [ 200 ]; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

out=$(printf '%s\n' \
    $'j1\t{"order":{"id":"A"},"n":1}' \
    $'j2\tnot json' \
    $'j3\t{"order":{"other":1}}' \
    $'j4\t{"order":{"id":{"x":1}}}' \
    $'j5\t{"order":{"id":7}}' \
    $'j6\t' \
    | h_mq publish -r "$qj")
h_assert_eq "$out" "published 6 confirmed 6" "publisher ($qj)"
out=$(printf '%s\n' $'h1\tok\tokey=K\tseq=1' $'h2\tok\tother=K' $'h3\tok\tokey=' | h_mq publish -r "$qh")
h_assert_eq "$out" "published 3 confirmed 3" "publisher ($qh)"

h_wait_depth "$qj.dlq" 4 30
h_wait_depth "$qh.dlq" 2 30
h_assert_eq "$(h_sql "SELECT msg_id FROM order_effects ORDER BY msg_id")" $'h1\nj1\nj5' "handled"
letters=$(h_mq get "$qj.dlq" -n 4)
reason() { echo "$letters" | awk -F'\t' -v id="$1" '$1 == id' | grep -oE 'idemd-error=[^;]*' || true; }
[[ $(reason j2) == "idemd-error=no order key (order_key json:order.id): body is not JSON: "*" at byte "*": bad input, not handled" ]] ||
    h_fail "reason of j2: $(reason j2)"
h_assert_eq "$(reason j3)" "idemd-error=no order key (order_key json:order.id): no field order.id in the JSON body: bad input, not handled" "reason of j3"
h_assert_eq "$(reason j4)" "idemd-error=no order key (order_key json:order.id): field order.id of the JSON body is object, not a string, number or boolean: bad input, not handled" "reason of j4"
[[ -n $(reason j6) ]] || h_fail "j6 (empty body) not dead-lettered with a reason: $letters"
letters=$(h_mq get "$qh.dlq" -n 2)
[[ $(reason h2) == "idemd-error=no order key (order_key header:okey): "*"bad input, not handled" ]] ||
    h_fail "reason of h2: $(reason h2)"
[[ -n $(reason h3) ]] || h_fail "h3 (empty key) not dead-lettered with a reason"
for q in $qj $qh; do
    h_assert_eq "$(h_depth "$q")" 0 "left in $q"
done
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_order_block")" 0 "blocked keys"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_order_no_key: ok"
