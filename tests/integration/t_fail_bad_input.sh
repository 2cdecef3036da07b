# t_fail_bad_input: hostile ids, bodies and headers: each one processed or dead-lettered with its reason; idemd neither crashes nor stalls.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_bad_input
qm=t_fail_bad.m # id in the message_id property
qh=t_fail_bad.h # id in the x-id header
qp=t_fail_bad.p # order_pay
h_new_db "$db"
c_fresh_queues $qm $qm.dlq $qm.retry.100 $qh $qh.dlq $qh.retry.100 $qp $qp.dlq $qp.retry.100
h_sql "INSERT INTO orders(id) VALUES (1), (2), (3), (4)"
h_sql "CREATE TABLE x (v INT)"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qm"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; max_attempts = 3; retry_delays_ms = [ 100 ];
    max_body_bytes = 16777216; },
  { name = "$qh"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; id_header = "x-id"; max_attempts = 3;
    retry_delays_ms = [ 100 ]; },
  { name = "$qp"; handler = "$H_PLUGINS/order_pay.so"; workers = 1; max_attempts = 3; retry_delays_ms = [ 100 ]; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
bp() { "$C_BADPUB" -P "$AMQP_PORT" "$@" >/dev/null || h_fail "badpub $* failed"; }
a255=$(printf 'a%.0s' {1..255})
h255=$(printf 'h%.0s' {1..255})
h256=$(printf 'i%.0s' {1..256})
h10k=$(printf 'k%.0s' {1..10240})

# ---- ids in message_id: processed ----
bp -r "$qm" --id 'bin\xff\xfe\x80' --body m1
bp -r "$qm" --id "q'; DROP TABLE x; --" --body m2a
# shellcheck disable=SC2016 # a literal $(id)
bp -r "$qm" --id 'dq"`\\$(id)' --body m2b
bp -r "$qm" --id 'nul\x00byte' --body m3
bp -r "$qm" --id "$a255" --body m4
bp -r "$qm" --id empty-body --body ''
bp -r "$qm" --id big-body --body-size 10485760
bp -r "$qm" --id types --body m9 \
    --header b=bool:true --header i8=i8:-8 --header u8=u8:200 --header i16=i16:-1600 \
    --header u16=u16:60000 --header i32=i32:-7 --header u32=u32:4000000000 \
    --header i64=i64:-9000000000 --header u64=u64:18446744073709551615 --header f32=f32:1.5 \
    --header f64=f64:-2.25 --header dec=decimal:2:12345 --header ts=timestamp:1700000000 \
    --header v=void: --header arr=array:a,b,c --header tab=table:k=v \
    --header raw='bytes:\x00\xff' --header 'k\xff=str:non-utf8 key' --header empty=str: \
    --header idemd-attempts=str:not-a-number --header idemd-pub-us=f64:1e300
# Headers nested deeper than 100 levels: t_hostile_headers (librabbitmq 0.14+ cannot read
# them, so their dead letters are the broker's there, which mqtool could not read here).
# A client-set x-delivery-count on a classic queue (where only quorum queues set it) on a
# first delivery: the message has never been near a handler.
bp -r "$qm" --id xdc --body m13 --header x-delivery-count=i64:7
# ---- message_id: dead-lettered ----
bp -r "$qm" --id '' --body m5-empty-id
bp -r "$qm" --body m6-no-id
bp -r "$qm" --id deep100rej --body reject --nested deep=100
# Headers within a few hundred bytes of the frame size (131072): the dead letter copy,
# with idemd's reason headers added, no longer fits in one frame.
bp -r "$qm" --id bigrej --body reject --big big=130900
# A per-message TTL: RabbitMQ drops the expiration of messages it dead-letters itself, so
# that they do not vanish from the dead letter queue; the same is expected of idemd's copy.
bp -r "$qm" --id ttlrej --body reject --expiration 2000
# A validated user_id (RabbitMQ refuses a user_id that is not the publishing connection's
# user): producers often use an account other than idemd's.
h_rabbitmqctl add_user t_fail_producer pw >/dev/null 2>&1 || true
h_rabbitmqctl set_permissions -p / t_fail_producer '.*' '.*' '.*' >/dev/null
"$C_BADPUB" -P "$AMQP_PORT" -u t_fail_producer -p pw -r "$qm" --id uidok --body m17 \
    --user-id t_fail_producer >/dev/null || h_fail "badpub as t_fail_producer failed"
"$C_BADPUB" -P "$AMQP_PORT" -u t_fail_producer -p pw -r "$qm" --id uidrej --body reject \
    --user-id t_fail_producer >/dev/null || h_fail "badpub as t_fail_producer failed"

# ---- ids in the x-id header ----
bp -r "$qh" --body h1 --header "x-id=str:$h256"
bp -r "$qh" --body h2 --header "x-id=str:$h10k"
bp -r "$qh" --body h3 --header x-id=f64:3.5
bp -r "$qh" --body h4 --header x-id=f32:1.5
bp -r "$qh" --body h5 --header x-id=bool:true
bp -r "$qh" --body h6 --header x-id=table:k=v
bp -r "$qh" --body h7 --header x-id=array:a,b
bp -r "$qh" --body h8 --header x-id=void:
bp -r "$qh" --body h9 --header x-id=decimal:2:12345
bp -r "$qh" --body h10 --header x-id=u64:18446744073709551615
bp -r "$qh" --body h11 --header x-id=i64:-42
bp -r "$qh" --body h12 --header x-id=timestamp:1700000000
bp -r "$qh" --body h13 --header 'x-id=bytes:raw\xff'
bp -r "$qh" --body h14 --header x-id=str:
bp -r "$qh" --body h15 --header "x-id=str:$h255"
bp -r "$qh" --body h16 --header x-id=i8:7
bp -r "$qh" --body h17 --id only-message-id
# A retry copy whose headers must be trimmed (too big for one frame beside idemd's): the
# x-id header stays, so it comes back, is retried and processed once.
bp -r "$qh" --body retry-once --header x-id=str:bigretry --big big=130900

# ---- order_pay bodies ----
bp -r "$qp" --id p1 --body 'not json {'
bp -r "$qp" --id p2 --body '{"orderId": 1}'
bp -r "$qp" --id p3 --body '{"orderId": 2}\x00{"orderId": 3}'
bp -r "$qp" --id p4 --body '\xff\xfe{'
bp -r "$qp" --id p5 --body ''
bp -r "$qp" --id p6 --body-size 10485760

# ---- outcomes ----
# A probe after everything: each queue still takes work promptly (nothing stalls).
sleep 3
bp -r "$qm" --id probe-m --body probe
bp -r "$qh" --body probe --header x-id=str:probe-h
bp -r "$qp" --id probe-p --body '{"orderId": 4}'
h_wait_sql "SELECT COUNT(*) FROM effects WHERE msg_id IN ('probe-m', 'probe-h')" 2 20 ||
    c_soft_fail "the probes were not processed within 20 s"
h_wait_sql "SELECT status FROM orders WHERE id = 4" 2 20 || c_soft_fail "the order_pay probe was not processed"
h_wait_depth "$qm.dlq" 6 20 || c_soft_fail "$qm.dlq does not hold 6 dead letters"
h_wait_depth "$qh.dlq" 13 20 || c_soft_fail "$qh.dlq does not hold 13 dead letters"
h_wait_depth "$qp.dlq" 5 20 || c_soft_fail "$qp.dlq does not hold 5 dead letters"
h_daemon_alive || h_fail "idemd died"
c_soft_eq "$(h_count_log idemd.log "killed by signal|exited with code")" 0 "worker crashes and exits"

hexes() { h_sql "SELECT HEX(msg_id), n FROM effects WHERE queue = '$1' ORDER BY HEX(msg_id)"; }
hex() { printf '%s' "$1" | od -An -v -tx1 | tr -d ' \n' | tr a-f A-F; }
want_m=$(
    # shellcheck disable=SC2016 # a literal $(id)
    for id in 'bin'$'\xff\xfe\x80' "q'; DROP TABLE x; --" 'dq"`\$(id)' "$a255" empty-body big-body types \
        xdc uidok probe-m; do
        printf '%s\t1\n' "$(hex "$id")"
    done
    printf '%s\t1\n' 6E756C0062797465 # nul\0byte
)
c_soft_set_eq "$(hexes "$qm")" "$want_m" "effects of $qm (hex id<TAB>n)"
want_h=$(for id in 1700000000 'raw'$'\xff' "$h255" 7 probe-h bigretry; do printf '%s\t1\n' "$(hex "$id")"; done)
c_soft_set_eq "$(hexes "$qh")" "$want_h" "effects of $qh (hex id<TAB>n)"
c_soft_eq "$(h_sql "SELECT COUNT(*) FROM x")" 0 "table x (still there)"
c_soft_eq "$(h_sql "SELECT id, status, pay_count FROM orders ORDER BY id")" \
    $'1\t2\t1\n2\t1\t0\n3\t1\t0\n4\t2\t1' "orders (only 1 and the probe paid)"
c_soft_eq "$(h_sql "SELECT COUNT(*) FROM effects e LEFT JOIN msg_id_record r
                      ON r.consumer = e.queue AND r.msg_id = e.msg_id WHERE r.id IS NULL")" 0 \
    "effects without a record"
# The message whose copy cannot be encoded must not go round and round.
for id in bigrej uidrej; do
    loops=$(h_count_log idemd.log "outcome=reject queue=$qm id=$id ")
    ((loops <= 4)) || c_soft_fail "$id was rejected $loops times in a row (requeued each time: a hot loop)"
done
c_soft_eq "$(h_count_log idemd.log "outcome=reject queue=$qm id=xdc ")" 0 "rejects of xdc"
c_soft_eq "$(h_count_log idemd.log "outcome=retry queue=$qh id=bigretry .*then=\"retry scheduled")" 1 \
    "retries of bigretry (its copy's headers trimmed)"

h_daemon_stop || c_soft_fail "idemd exited with status $? on SIGTERM"
c_soft_eq "$(h_depth "$qm")$(h_depth "$qh")$(h_depth "$qp")" 000 "work queue depths"

# Dead letters and their reasons: dl FILE FIELD VALUE REASON-SUBSTRING.
h_mq get "$qm.dlq" >dlq_m.txt
h_mq get "$qh.dlq" --id-header x-id >dlq_h.txt
h_mq get "$qp.dlq" >dlq_p.txt
dl()
{
    local line
    line=$(tr -d '\000' <"$1" | awk -F'\t' -v f="$2" -v v="$3" '$f == v')
    if [[ -z "$line" ]]; then
        c_soft_fail "$1: no dead letter with field $2 = '${3:0:40}'"
        return 0
    fi
    [[ $(wc -l <<<"$line") == 1 ]] || c_soft_fail "$1: $(wc -l <<<"$line") dead letters with field $2 = '${3:0:40}'"
    [[ "$(c_hdr "$line" idemd-error)" == *"$4"* ]] ||
        c_soft_fail "$1: dead letter '${3:0:40}': idemd-error '$(c_hdr "$line" idemd-error)' lacks '$4'"
}
dl dlq_m.txt 2 m5-empty-id "id is empty"
dl dlq_m.txt 2 m6-no-id "no message_id property"
dl dlq_m.txt 1 deep100rej "test reject"
dl dlq_m.txt 1 bigrej "test reject"
dl dlq_m.txt 1 ttlrej "test reject" # read well after its 2 s TTL
dl dlq_m.txt 1 uidrej "test reject"
# Headers nested up to 100 levels survive dead-lettering (deeper ones: t_hostile_headers).
[[ $(c_hdr "$(awk -F'\t' '$1 == "deep100rej"' dlq_m.txt)" deep) == table ]] ||
    c_soft_fail "the header nested 100 levels deep did not survive dead-lettering"
dl dlq_h.txt 2 h1 "id is 256 bytes, longer than 255"
dl dlq_h.txt 2 h2 "id is 10240 bytes, longer than 255"
dl dlq_h.txt 2 h3 "type 'd'"
dl dlq_h.txt 2 h4 "type 'f'"
dl dlq_h.txt 2 h5 "type 't'"
dl dlq_h.txt 2 h6 "type 'F'"
dl dlq_h.txt 2 h7 "type 'A'"
dl dlq_h.txt 2 h8 "type 'V'"
dl dlq_h.txt 2 h9 "type 'D'"
# An integer id must be within 0..INT64_MAX (RabbitMQ 4.x delivers this u64 as -1).
dl dlq_h.txt 2 h10 "integer ids must be within 0..9223372036854775807"
dl dlq_h.txt 2 h11 "negative: integer ids must be within 0..9223372036854775807"
dl dlq_h.txt 2 h14 "id is empty"
dl dlq_h.txt 2 h17 "no id header 'x-id'"
grep -qF "$h10k"$'\th2' dlq_h.txt || c_soft_fail "the 10 KB id did not reach the dead letter queue intact"
dl dlq_p.txt 1 p1 "body is not JSON"
dl dlq_p.txt 1 p3 "body is not JSON"
dl dlq_p.txt 1 p4 "body is not JSON"
dl dlq_p.txt 1 p5 "empty body"
dl dlq_p.txt 1 p6 "body of 10485760 bytes is over max_body_bytes (1048576)"
c_soft_eq "$(wc -l <dlq_m.txt) $(wc -l <dlq_h.txt) $(wc -l <dlq_p.txt)" "6 13 5" "dead letters per queue"
c_soft_done
echo "t_fail_bad_input: ok"
