# t_big_body: bodies over max_body_bytes (16 MiB, 100 MiB) are dead-lettered without their body and with the reason, the worker's peak RSS stays under 64 MiB, batches stop at max_batch_bytes without losing the message that would pass it, and order_pay refuses bodies over 64 KiB.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_big_body
q=t_big.q
qb=t_big.b # small max_batch_bytes
qp=t_big.p # order_pay
h_new_db "$db"
c_fresh_queues $q $q.dlq $q.retry.100 $qb $qb.dlq $qb.retry.100 $qp $qp.dlq $qp.retry.100
h_sql "INSERT INTO orders(id) VALUES (1)"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; retry_delays_ms = [ 100 ]; },
  { name = "$qb"; handler = "$H_TEST_PLUGINS/counter.so"; retry_delays_ms = [ 100 ];
    max_batch_bytes = 1048576; batch_wait_ms = 2000; },
  { name = "$qp"; handler = "$H_PLUGINS/order_pay.so"; retry_delays_ms = [ 100 ]; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
bp() { "$C_BADPUB" -P "$AMQP_PORT" "$@" >/dev/null || h_fail "badpub $* failed"; }

# Bodies over the default 1 MiB: read off the wire and dropped frame by frame.
bp -r "$q" --id big16 --body-size 16777216
bp -r "$q" --id big100 --body-size 104857600
bp -r "$q" --id good1 --body good
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$q'" 1 60 || h_fail "good1 was not processed"
h_wait_depth "$q.dlq" 2 30 || h_fail "$q.dlq does not hold the 2 big messages"

# Batches bounded by bytes: 5 bodies of 600 KiB, published while the worker waits for a
# batch to fill (batch_wait_ms), so each one after the first would pass 1 MiB.
for i in 1 2 3 4 5; do bp -r "$qb" --id "b$i" --body-size 614400; done
h_wait_sql "SELECT COUNT(*), SUM(n) FROM effects WHERE queue = '$qb'" $'5\t5' 60 ||
    h_fail "the 600 KiB messages were not each processed once"

# order_pay: a payment over 64 KiB is refused before parsing.
bp -r "$qp" --id pay-big --body-size 70000
bp -r "$qp" --id pay-ok --body '{"orderId": 1}'
h_wait_sql "SELECT status FROM orders WHERE id = 1" 2 30 || h_fail "pay-ok was not processed"
h_wait_depth "$qp.dlq" 1 30 || h_fail "$qp.dlq does not hold pay-big"

# Peak RSS of each worker (the supervisor forks them; every other pid of the group). A worker
# that died and was replaced would hide its peak: there must be no restart.
h_assert_eq "$(h_count_log idemd.log "started worker ")" 3 "workers started"
h_assert_eq "$(h_count_log idemd.log "exited with code")" 0 "worker exits"

for pid in $(h_daemon_pids); do
    [[ "$pid" == "$H_DAEMON_PID" ]] && continue
    hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")
    echo "# worker $pid: VmHWM ${hwm} kB" >&2
    ((hwm < 65536)) || h_fail "worker $pid peaked at ${hwm} kB (limit 64 MiB)"
done
h_assert_eq "$(h_count_log idemd.log "outcome=reject queue=$qb ")" 0 "rejects on $qb"
(($(h_count_log idemd.log "queue $qb: batch stops at 1 message\(s\), 614400 bytes") >= 1)) ||
    h_fail "no batch of $qb stopped at max_batch_bytes"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_depth "$q")" 0 "depth of $q"
h_assert_eq "$(h_sql "SELECT msg_id, n FROM effects WHERE queue = '$q'")" $'good1\t1' "effects of $q"
h_mq get "$q.dlq" >dlq.txt
for id in big16 big100; do
    line=$(awk -F'\t' -v id="$id" '$1 == id' dlq.txt)
    [[ -n "$line" ]] || h_fail "$id is not in $q.dlq"
    [[ $(cut -f2 <<<"$line") == "" ]] || h_fail "the dead letter of $id carries a body"
    want=$([[ $id == big16 ]] && echo 16777216 || echo 104857600)
    h_assert_eq "$(c_hdr "$line" idemd-body-dropped)" "$want" "idemd-body-dropped of $id"
    h_assert_eq "$(c_hdr "$line" idemd-attempts)" 1 "idemd-attempts of $id"
    grep -F "$want bytes is over max_body_bytes (1048576)" <<<"$(c_hdr "$line" idemd-error)" \
        >/dev/null || h_fail "no reason on the dead letter of $id: $line"
    grep -E "outcome=reject queue=$q id=$id .*reason=\"body of $want bytes is over max_body_bytes" \
        idemd.log >/dev/null || h_fail "no reject line with the reason for $id"
done
h_mq get "$qp.dlq" >dlq_p.txt
grep -E "^pay-big	.*idemd-error=body of 70000 bytes is over 65536 bytes" dlq_p.txt >/dev/null ||
    h_fail "pay-big was not dead-lettered with its reason: $(cat dlq_p.txt)"
echo "t_big_body: ok"
