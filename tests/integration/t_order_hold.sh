# t_order_hold: the message a key waits on is dead-lettered (retries used up): order_dead_letter = "release" lets the key's next messages go on in order; "hold" keeps them waiting (never handled, never dead-lettered, shown by idemctl order list) until idemctl order release; declare.single_active_consumer declares x-single-active-consumer.
qr=t_order_hold.r # release
qh=t_order_hold.h # hold
db=t_order_hold
IDEMCTL=$H_BUILD/idemctl
source "$H_ROOT/tests/chaos/lib.sh"
h_new_db "$db"
c_fresh_queues $qr $qr.dlq $qr.retry.200 $qh $qh.dlq $qh.retry.200
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qr"; handler = "$H_TEST_PLUGINS/ordered.so"; order_key = "header:okey";
    max_attempts = 2; retry_delays_ms = [ 200 ]; order_dead_letter = "release"; },
  { name = "$qh"; handler = "$H_TEST_PLUGINS/ordered.so"; order_key = "header:okey";
    max_attempts = 2; retry_delays_ms = [ 200 ]; order_dead_letter = "hold";
    declare = { single_active_consumer = true; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
# The hold queue is declared with x-single-active-consumer, the release queue without.
args=$(h_rabbitmqctl list_queues name arguments)
grep -qE "^$qh[[:space:]].*x-single-active-consumer" <<<"$args" || h_fail "$qh has no x-single-active-consumer: $args"
grep -qE "^$qr[[:space:]].*x-single-active-consumer" <<<"$args" && h_fail "$qr has x-single-active-consumer: $args"
effects() { h_sql "SELECT okey, GROUP_CONCAT(seq ORDER BY id) FROM order_effects WHERE queue = '$1' GROUP BY okey ORDER BY okey"; }
# x1 always asks for a retry: after 2 attempts it is dead-lettered. y1 is another key.
for q in $qr $qh; do
    out=$(printf '%s\n' $'x1\tretry\tokey=K\tseq=1' $'x2\tok\tokey=K\tseq=2' $'y1\tok\tokey=L\tseq=1' \
        $'x3\tok\tokey=K\tseq=3' | h_mq publish -r "$q")
    h_assert_eq "$out" "published 4 confirmed 4" "publisher ($q)"
done

# release: x2 and x3 run after x1's dead letter, in order.
h_wait_sql "SELECT COUNT(*) FROM order_effects WHERE queue = '$qr'" 3 60
h_assert_eq "$(effects $qr)" $'K\t2,3\nL\t1' "release: effects per key"
h_wait_depth "$qr.dlq" 1 30

# hold: x1 dead-lettered, K stays blocked on it; x2 and x3 go round their delay queue.
h_wait_depth "$qh.dlq" 1 30
h_wait_sql "SELECT COUNT(*) FROM order_effects WHERE queue = '$qh'" 1 30
h_wait_log idemd.log "outcome=wait queue=$qh id=x2 " 4 30
h_assert_eq "$(effects $qh)" $'L\t1' "hold: only the other key's effect"
list=$("$IDEMCTL" -c idemd.conf order list "$qh") || h_fail "idemctl order list: status $?"
h_assert_eq "$(echo "$list" | cut -f1-5)" $'t_order_hold.h\tK\tx1\theld\t2' "idemctl order list"
h_assert_eq "$(h_depth "$qh.dlq")" 1 "dead letters of $qh while held"
"$IDEMCTL" -c idemd.conf order release "$qr" K >/dev/null 2>&1 && h_fail "release of a free key succeeded"
"$IDEMCTL" -c idemd.conf order release "$qh" K || h_fail "idemctl order release: status $?"
h_wait_sql "SELECT COUNT(*) FROM order_effects WHERE queue = '$qh'" 3 30
h_assert_eq "$(effects $qh)" $'K\t2,3\nL\t1' "hold, after release: effects per key"

h_wait_sql "SELECT (SELECT COUNT(*) FROM idemd_order_block) + (SELECT COUNT(*) FROM idemd_order_waiter)" 0 30
for q in $qr $qh; do
    h_wait_depth "$q" 0 30
    h_assert_eq "$(h_depth "$q.dlq")" 1 "dead letters of $q (x1)"
done
h_assert_eq "$(h_count_log idemd.log "outcome=(retry|reject) queue=$qh id=(x2|x3) ")" 0 "x2 and x3 never failed"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_order_hold: ok"
