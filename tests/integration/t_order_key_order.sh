# t_order_key_order: two ordered queues whose handlers write one row per key (shared) run each batch key by key in the keys' byte order, each key's messages in publish order, so they lock the shared rows in one order: effects in key order, no deadlock between them.
q1=t_order_key_order.1
q2=t_order_key_order.2
db=t_order_key_order
source "$H_ROOT/tests/chaos/lib.sh"
h_new_db "$db"
c_fresh_queues $q1 $q1.dlq $q1.retry.300 $q2 $q2.dlq $q2.retry.300
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q1"; handler = "$H_TEST_PLUGINS/ordered.so"; order_key = "header:okey";
    workers = 1; max_attempts = 5; retry_delays_ms = [ 300 ]; batch_size = 120; batch_wait_ms = 2000;
    settings = { key_table = "order_key_rows"; }; },
  { name = "$q2"; handler = "$H_TEST_PLUGINS/ordered.so"; order_key = "header:okey";
    workers = 1; max_attempts = 5; retry_delays_ms = [ 300 ]; batch_size = 120; batch_wait_ms = 2000;
    settings = { key_table = "order_key_rows"; }; }
);
CONF
} >idemd.conf

# 60 keys k00..k59, 2 messages each; q1 gets them from k59 down to k00, q2 from k00 up, each
# key's seq 1 then 2 (its messages apart, the other keys' between them).
load()
{
    local k s
    for s in 1 2; do
        for k in $(seq -w 0 59); do printf 'k%s-%s\tok\tokey=k%s\tseq=%s\n' "$k" "$s" "$k" "$s"; done
    done
}
load_rev()
{
    local k s
    for s in 1 2; do
        for k in $(seq -w 59 -1 0); do printf 'k%s-%s\tok\tokey=k%s\tseq=%s\n' "$k" "$s" "$k" "$s"; done
    done
}
# Published before idemd starts; batch_size 120 and batch_wait_ms: one batch of each queue holds them all.
for q in $q1 $q2; do h_mq declare "$q" --dlq "$q.dlq" >/dev/null || h_fail "declaring $q"; done
h_assert_eq "$(load_rev | h_mq publish -r "$q1")" "published 120 confirmed 120" "publisher ($q1)"
h_assert_eq "$(load | h_mq publish -r "$q2")" "published 120 confirmed 120" "publisher ($q2)"
dl0=$(h_sql "SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'lock_deadlocks'")
h_daemon_start idemd.conf idemd.log
h_wait_sql "SELECT COUNT(*) FROM order_effects" 240 60
h_wait_sql "SELECT COUNT(*) FROM order_key_rows WHERE n = 4" 60 30

# Per queue, the effects in commit order: key by key in byte order, seq 1 before 2.
want=$(for k in $(seq -w 0 59); do printf 'k%s 1\nk%s 2\n' "$k" "$k"; done)
for q in $q1 $q2; do
    got=$(h_sql "SELECT CONCAT(okey, ' ', seq) FROM order_effects WHERE queue = '$q' ORDER BY id")
    h_assert_eq "$got" "$want" "$q: effects in key order, each key's in publish order"
done
dl=$(($(h_sql "SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'lock_deadlocks'") - dl0))
h_assert_eq "$dl" 0 "deadlocks between the two queues"
h_assert_eq "$(h_count_log idemd.log 'transaction lost')" 0 "transactions lost"
for q in $q1 $q2; do h_assert_eq "$(h_depth "$q.dlq")" 0 "$q.dlq depth"; done
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_order_key_order: ok"
