# t_fail_quorum_delay_full: with quorum = true the delay hop is at-least-once: a retried message whose delay expires while the work queue is full stays in its delay queue and arrives once room is made.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_quorum_delay_full
q=t_fail_quorum_delay_full.q
dlq=$q.dlq
tier=$q.retry.8000
h_new_db "$db"
c_fresh_queues "$q" "$dlq" "$tier"

# The broker retries a refused dead letter once per dead_letter_worker_publisher_confirm_timeout
# (180 s by default); a delay queue's worker reads it when the queue is created.
env_key=dead_letter_worker_publisher_confirm_timeout
old_timeout=$(h_rabbitmqctl eval "application:get_env(rabbit, $env_key).")
echo "$env_key was $old_timeout"
[[ "$old_timeout" =~ ^\{ok,([0-9]+)\}$ ]] || h_fail "cannot read $env_key: $old_timeout"
old_timeout=${BASH_REMATCH[1]}
trap 'h_rabbitmqctl eval "application:set_env(rabbit, $env_key, $old_timeout)." >/dev/null || true' EXIT
h_rabbitmqctl eval "application:set_env(rabbit, $env_key, 1000)." >/dev/null

{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; retry_delays_ms = [ 8000 ];
             declare = { quorum = true;
                         arguments = { x-max-length = 1; x-overflow = "reject-publish"; }; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf run1.log
! grep -q "at-most-once" run1.log || h_fail "a quorum queue's delay hop is logged as at-most-once"

# idemd's own queues are quorum queues that dead-letter at least once.
queues=$(h_rabbitmqctl list_queues name type arguments)
echo "$queues"
for name in "$q" "$tier" "$dlq"; do
    grep -qE "^${name//./\\.}[[:space:]]+quorum[[:space:]]" <<<"$queues" || h_fail "$name is not a quorum queue"
done
args=$(awk -v n="$tier" '$1 == n { print $3 }' <<<"$queues")
[[ "$args" == *'{"x-dead-letter-strategy","at-least-once"}'* && "$args" == *'{"x-overflow","reject-publish"}'* ]] ||
    h_fail "$tier is not declared at-least-once with reject-publish: $args"

# messages and ready messages of one queue; an expired message whose dead-lettering is not yet
# confirmed counts in the first only. The broker refreshes these numbers every few seconds: wait
# for them, and read exact ready counts with h_depth.
counts() { awk -v n="$1" '$1 == n { print $2, $3 }' <<<"$(h_rabbitmqctl list_queues name messages messages_ready)"; }

# 1. r1 asks to be retried: idemd moves it to the delay queue (confirmed) and acks it.
out=$(printf 'r1\tretry-once\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publisher (r1)"
h_wait_depth "$tier" 1 20 || h_fail "r1 did not reach $tier"
t_retry=$SECONDS
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# 2. Fill the work queue before the 8 s delay expires; a quorum queue takes one message past
# its limit, then refuses.
out=$(printf 'f1\tbody\nf2\tbody\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 2 confirmed 2" "publisher (f1, f2)"
out=$(printf 'f3\tbody\n' | h_mq publish -r "$q" 2>&1) || true
[[ "$out" == *"published 1 confirmed 0"* ]] || h_fail "$q is not full: $out"
((SECONDS - t_retry < 8)) || h_fail "the work queue was filled only $((SECONDS - t_retry)) s after the retry"
h_assert_eq "$(h_depth "$tier")" 1 "$tier before the delay expired"

# 3. The delay expires: the broker cannot deliver r1 to the full queue and keeps it (a classic
# delay queue drops it here). It stays through several refused attempts (one per second).
deadline=$((SECONDS + 30))
until [[ "$(counts "$tier")" == "1 0" ]]; do
    ((SECONDS < deadline)) || h_fail "r1 is not held in $tier after its delay: $(counts "$tier") (messages, ready)"
    sleep 0.2
done
held_until=$((SECONDS + 4))
while ((SECONDS < held_until)); do
    h_assert_eq "$(counts "$tier")" "1 0" "$tier while $q is full"
    h_assert_eq "$(h_depth "$q")" 2 "$q while full"
    sleep 0.5
done

# 4. Room is made (idemd consumes f1 and f2): r1 arrives, and each message has its effect once.
h_daemon_start idemd.conf run2.log
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects" $'3\t3\t1' 60 || h_fail "effects: $(h_sql "SELECT msg_id, n FROM effects")"
h_assert_eq "$(h_sql "SELECT msg_id FROM effects ORDER BY msg_id" | paste -sd,)" "f1,f2,r1" "messages with an effect"
h_wait_depth "$q" 0 10 || h_fail "$q not drained"
deadline=$((SECONDS + 20))
until [[ "$(counts "$tier")" == "0 0" ]]; do
    ((SECONDS < deadline)) || h_fail "$tier not drained: $(counts "$tier") (messages, ready)"
    sleep 0.2
done
h_assert_eq "$(counts "$dlq")" "0 0" "$dlq"
h_daemon_alive || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# 5. A classic queue left with a delay queue's name (from an older idemd) cannot be declared
# again as a quorum queue: the worker says which queue and what to do (docs/failures.md).
h_mq delete "$tier" >/dev/null
h_mq declare "$tier" >/dev/null
setsid "$IDEMD" "${H_ALLOW_ROOT[@]}" -c idemd.conf </dev/null >>run3.log 2>&1 &
H_DAEMON_PID=$!
mkdir -p "$H_DIR/daemons"
: >"$H_DIR/daemons/$H_DAEMON_PID"
h_wait_log run3.log "queue '${tier//./\\.}' exists with other arguments.*Moving to quorum queues" 1 30 ||
    h_fail "no hint about the classic $tier: $(tail -n 5 run3.log)"
h_daemon_stop || true
h_mq delete "$tier" >/dev/null
echo "t_fail_quorum_delay_full: ok"
