# t_big_body: bodies over max_body_bytes (16 MiB, 100 MiB or the broker's max message size) are dead-lettered without their body and with the reason, the worker's peak RSS stays under 64 MiB, batches stop at max_batch_bytes without losing the message that would pass it, order_pay refuses bodies over 64 KiB, and dead letter and retry copies over the broker's max message size arrive without their body.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_big_body
q=t_big.q
qb=t_big.b # small max_batch_bytes
qp=t_big.p # order_pay
qx=t_big.x # copies over the broker's max message size
h_new_db "$db"
c_fresh_queues $q $q.dlq $q.retry.100 $qb $qb.dlq $qb.retry.100 $qp $qp.dlq $qp.retry.100 \
    $qx $qx.dlq $qx.retry.100
# The broker's max message size (RabbitMQ 3.x: 128 MiB, 4.0: 16 MiB): the biggest body sent.
bmax=$(h_rabbitmqctl eval 'application:get_env(rabbit, max_message_size).' | tr -dc '0-9')
[[ -n "$bmax" ]] || h_fail "cannot read the broker's max_message_size"
big=$((bmax < 104857600 ? bmax : 104857600))
echo "# broker max_message_size $bmax: the big body is $big bytes" >&2
set_max() # the broker's limit for channels opened from now on
{
    h_rabbitmqctl eval "application:set_env(rabbit, max_message_size, $1), catch persistent_term:put(max_message_size, $1), ok." >/dev/null
}
trap 'set_max "$bmax" 2>/dev/null || true' EXIT
h_sql "INSERT INTO orders(id) VALUES (1)"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; retry_delays_ms = [ 100 ]; },
  { name = "$qb"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; retry_delays_ms = [ 100 ];
    max_batch_bytes = 1048576; batch_wait_ms = 2000; },
  { name = "$qp"; handler = "$H_PLUGINS/order_pay.so"; workers = 1; retry_delays_ms = [ 100 ]; },
  { name = "$qx"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; retry_delays_ms = [ 100 ];
    max_body_bytes = 8388608; max_attempts = 2; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
bp() { "$C_BADPUB" -P "$AMQP_PORT" "$@" >/dev/null || h_fail "badpub $* failed"; }

# Bodies over the default 1 MiB: read off the wire and dropped frame by frame.
bp -r "$q" --id big16 --body-size 16777216
bp -r "$q" --id big100 --body-size "$big"
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
h_assert_eq "$(h_count_log idemd.log "started worker ")" 4 "workers started"
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
    want=$([[ $id == big16 ]] && echo 16777216 || echo "$big")
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

# Copies over the broker's max message size: two 3 MiB messages (under max_body_bytes) wait in
# the queue while the broker's limit drops to 1 MiB (as after an upgrade to RabbitMQ 4.0 with
# larger messages queued). The first copy is refused (406, the channel closed): its original
# stays unacked, and from then on such copies go without their body.
sz=3145728
bp -r "$qx" --id xr --body "big-reject:" --body-size $sz
bp -r "$qx" --id xt --body "big-retry:" --body-size $sz
set_max 1048576
h_daemon_start idemd.conf idemd2.log
h_wait_depth "$qx.dlq" 2 60 || h_fail "$qx.dlq does not hold the 2 copies over the broker's limit"
h_wait_depth "$qx" 0 30 || h_fail "$qx is not empty"
h_wait_depth "$qx.retry.100" 0 30 || h_fail "$qx.retry.100 is not empty"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
set_max "$bmax"
(($(h_count_log idemd2.log "its max message size is 1048576 bytes") >= 1)) ||
    h_fail "the broker's refusal of a copy was not logged"
(($(h_count_log idemd2.log "goes without its body of $sz bytes: over the broker's max message size") >= 2)) ||
    h_fail "the copies without their body were not logged"
h_assert_eq "$(h_count_log idemd2.log "exited with code [1-9]|killed by signal")" 0 "worker exits"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qx'")" 0 "effects of $qx"
h_mq get "$qx.dlq" >dlq_x.txt
for id in xr xt; do
    line=$(awk -F'\t' -v id="$id" '$1 == id' dlq_x.txt)
    [[ -n "$line" ]] || h_fail "$id is not in $qx.dlq: $(cat dlq_x.txt)"
    [[ $(cut -f2 <<<"$line") == "" ]] || h_fail "the dead letter of $id carries a body"
    h_assert_eq "$(c_hdr "$line" idemd-body-dropped)" "$sz" "idemd-body-dropped of $id"
done
h_assert_eq "$(c_hdr "$(grep '^xr' dlq_x.txt)" idemd-error)" "test big-reject" "reason of xr"
grep -F "its body of $sz bytes was dropped from its retry copy" <<<"$(c_hdr "$(grep '^xt' dlq_x.txt)" idemd-error)" \
    >/dev/null || h_fail "no reason on the dead letter of xt: $(grep '^xt' dlq_x.txt)"
echo "t_big_body: ok"
