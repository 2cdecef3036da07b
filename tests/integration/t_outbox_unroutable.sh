# t_outbox_unroutable: a handler sends each message on twice, to amq.topic (bound: x.sink) and to amq.direct (bound nowhere): x.sink gets each message exactly once (the return of one copy is not taken for the other's), the unroutable ones are dead-lettered to the source queue's DLQ with their reason after outbox_max_attempts, and the outbox drains.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_outbox_unroutable
q=t_ob_unr.q
sink=t_ob_unr.sink
n=10
mport=$(h_free_port 35000 2000)
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$sink"
h_mq declare "$sink"
h_mq bind "$sink" amq.topic x.k
{
    h_conf_common "$db" |
        sed 's/shutdown_timeout = 30;/shutdown_timeout = 30; outbox_grace = 2; outbox_max_attempts = 3; outbox_backoff_ms = 200;/'
    cat <<CONF
metrics = { listen = "127.0.0.1:$mport"; };
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/onward.so"; workers = 2; batch_size = 500;
    settings = { routes = "amq.topic x.k;amq.direct x.k"; }; }
);
CONF
} >idemd.conf
# A channel reads the broker's max message size when it opens: set it before idemd connects,
# and put the broker's own back at the end (t_big_body, after this case, sends 16 MiB).
bmax=$(h_rabbitmqctl eval 'application:get_env(rabbit, max_message_size).' | tr -dc '0-9')
[[ -n "$bmax" ]] || h_fail "cannot read the broker's max_message_size"
set_max() { h_rabbitmqctl eval "application:set_env(rabbit, max_message_size, $1), catch persistent_term:put(max_message_size, $1), ok." >/dev/null; }
trap 'set_max "$bmax" 2>/dev/null || true' EXIT
set_max 200000
h_daemon_start idemd.conf idemd.log
seq 1 $n | awk '{ printf "m%d\tbody%d\n", $1, $1 }' | h_mq publish -r "$q" >pub.txt || h_fail "publish: $(cat pub.txt)"
h_assert_eq "$(cat pub.txt)" "published $n confirmed $n" "publisher"

# Attempt 1 right after COMMIT, 2 and 3 by the sweeper (grace 2 s, backoff 200 then 400 ms),
# then the dead letter: the outbox is empty once every unroutable copy is in the DLQ.
h_wait_depth "$q.dlq" $n 60 || h_fail "$q.dlq does not hold the $n unroutable onward messages"
h_wait_sql "SELECT COUNT(*) FROM idemd_outbox" 0 30 || h_fail "the outbox did not drain: $(h_sql 'SELECT id, attempts, last_error FROM idemd_outbox')"
h_wait_depth "$q" 0 10 || h_fail "$q not drained"
# With no row left nothing can be sent again: x.sink holds each message once.
h_assert_eq "$(h_depth "$sink")" $n "messages in $sink"
h_assert_eq "$(h_depth "$q.dlq")" $n "dead letters in $q.dlq"
h_assert_eq "$(h_count_log idemd.log "outbox: onward message \(row [0-9]+\) refused \(attempt 1 of 3\): unroutable: returned by the broker: 312 NO_ROUTE")" $n \
    "first refusals logged with the broker's words"
h_assert_eq "$(h_count_log idemd.log "outbox: onward message \(row [0-9]+\) dead-lettered to $q.dlq after 3 refused sends, last: unroutable")" $n \
    "dead letters logged"
curl -sf "http://127.0.0.1:$mport/metrics" >metrics.txt || h_fail "no /metrics"
h_assert_eq "$(awk -v q="$q" '$1 ~ "^idemd_outbox_rows\\{queue=\"" q "\"" { s += $2 } END { print s + 0 }' metrics.txt)" 0 \
    "idemd_outbox_rows after the drain"

# An onward message over the broker's max message size: refused (the broker closes the
# channel, idemd learns the limit), then dead-lettered without its body, never sent for ever.
printf 'big1\tbig:300000\n' | h_mq publish -r "$q" >pub.txt || h_fail "publish: $(cat pub.txt)"
h_wait_depth "$q.dlq" $((n + 2)) 60 || h_fail "the two onward messages over the max size are not dead-lettered"
h_wait_sql "SELECT COUNT(*) FROM idemd_outbox" 0 30 || h_fail "the outbox did not drain after the big one"
h_assert_eq "$(h_depth "$sink")" $n "messages in $sink after the big one"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# An operator binds the missing route and replays one onward dead letter: idemctl verifies its
# signature (bound to the source queue and its message id) and sends it to its intended route.
fixed=t_ob_unr.fixed
c_fresh_queues "$fixed"
h_mq declare "$fixed"
h_mq bind "$fixed" amq.direct x.k
"$H_BUILD/idemctl" -c idemd.conf dlq replay "$q.dlq" --id "$q:m3:1" >replay.txt 2>&1 ||
    h_fail "idemctl dlq replay exited with $?: $(cat replay.txt)"
h_wait_depth "$fixed" 1 10 || h_fail "the replayed onward message did not reach $fixed: $(cat replay.txt)"
h_assert_eq "$(h_mq get "$fixed" | cut -f1,2)" "$q:m3:1"$'\tbody3' "the replayed onward message"
h_assert_eq "$(h_depth "$q.dlq")" $((n + 1)) "dead letters left after the replay"

h_mq get "$sink" -n 100 >sink.txt
h_assert_eq "$(cut -f1 sink.txt | sort -u | wc -l)" $n "distinct ids in $sink"
h_assert_eq "$(cut -f1 sink.txt | grep -c ':0$')" $n "$sink holds the amq.topic copies (seq 0)"
h_mq get "$q.dlq" -n 100 >all.txt
grep -v '^t_ob_unr.q:big1:' all.txt >dlq.txt || true
grep '^t_ob_unr.q:big1:' all.txt >big.txt || true
h_assert_eq "$(wc -l <dlq.txt)" $((n - 1)) "dead letters read"
h_assert_eq "$(wc -l <big.txt)" 2 "dead letters of the big onward messages"
while IFS= read -r line; do
    id=${line%%$'\t'*}
    h_assert_eq "$(c_hdr "$line" idemd-body-dropped)" 300000 "$id: idemd-body-dropped"
    [[ "$(c_hdr "$line" idemd-error)" == *"max message size"* ]] || h_fail "$id: idemd-error '$(c_hdr "$line" idemd-error)'"
    h_assert_eq "$(cut -f2 <<<"$line")" "" "$id: body left out"
done <big.txt
while IFS= read -r line; do
    id=${line%%$'\t'*}
    [[ "$id" == *:1 ]] || h_fail "dead letter $id is not an amq.direct copy (seq 1)"
    h_assert_eq "$(c_hdr "$line" idemd-onward)" 1 "$id: idemd-onward"
    h_assert_eq "$(c_hdr "$line" idemd-original-exchange)" amq.direct "$id: intended exchange"
    h_assert_eq "$(c_hdr "$line" idemd-original-routing-key)" x.k "$id: intended routing key"
    h_assert_eq "$(c_hdr "$line" idemd-queue)" "$q" "$id: source queue"
    h_assert_eq "$(c_hdr "$line" idemd-attempts)" 3 "$id: attempts"
    err=$(c_hdr "$line" idemd-error)
    [[ "$err" == *"after 3 attempts to exchange 'amq.direct' routing key 'x.k': unroutable: returned by the broker: 312 NO_ROUTE"* ]] ||
        h_fail "$id: idemd-error '$err'"
    [[ $(c_hdr "$line" idemd-sig) =~ ^[0-9a-f]{64}$ ]] || h_fail "$id: no signature"
    [[ "$line" == *$'\tbody'* ]] || h_fail "$id: the body was not kept"
done <dlq.txt
echo "t_outbox_unroutable: ok"
