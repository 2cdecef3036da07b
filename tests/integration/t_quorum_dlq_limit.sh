# t_quorum_dlq_limit: no broker delivery limit eats dead letters: a quorum dead letter queue listed 100 times with idemctl dlq list still holds every letter (RabbitMQ 4 gets x-delivery-limit = -1, 3.x nothing); queues left by an older idemd without the argument still work, with a warning and the guard, and a policy delivery-limit = -1 keeps their letters.
db=t_quorum_dlq_limit
q=t_qlim.q  # declared by this idemd
qu=t_qlim.u # declared before, as an older idemd did: no x-delivery-limit
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
for x in $q $q.dlq $qu $qu.dlq; do h_mq delete "$x" >/dev/null 2>&1 || true; done
h_rabbitmqctl clear_policy t_qlim >/dev/null 2>&1 || true
h_mq declare "$qu" --quorum
h_mq declare "$qu.dlq" --quorum-own
major=$(h_rabbitmqctl eval 'rabbit_misc:version().' | tr -d '"' | cut -d. -f1)
echo "# RabbitMQ major version $major" >&2
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; declare = { quorum = true; }; },
  { name = "$qu"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; declare = { quorum = true; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }

args=$(h_rabbitmqctl list_queues name arguments)
for x in $q $q.dlq; do
    line=$(awk -v n="$x" '$1 == n' <<<"$args")
    if ((major >= 4)); then
        [[ $line == *'{"x-delivery-limit",-1}'* ]] || h_fail "$x lacks x-delivery-limit -1: $line"
    else
        [[ $line != *x-delivery-limit* ]] || h_fail "$x has x-delivery-limit on RabbitMQ $major: $line"
    fi
done
# The older queues keep their arguments; idemd says so once per queue and worker start (4.x only).
want_warn=$((major >= 4 ? 1 : 0))
for x in $qu $qu.dlq; do
    n=$(h_count_log idemd.log "queue '$x' exists without x-delivery-limit")
    h_assert_eq "$((n > 0))" "$want_warn" "warned about $x ($n lines)"
done
h_assert_eq "$(h_count_log idemd.log "queue $qu: a message returned 15 times .* is dead-lettered")" \
    "$want_warn" "guard lines for $qu"
h_assert_eq "$(h_count_log idemd.log "queue $q: a message returned")" 0 "guard lines for $q"

out=$(h_gen r 1 5 reject | h_mq publish -r "$q")
h_assert_eq "$out" "published 5 confirmed 5" "publisher to $q"
out=$(h_gen u 1 3 reject | h_mq publish -r "$qu")
h_assert_eq "$out" "published 3 confirmed 3" "publisher to $qu"
h_wait_depth "$q.dlq" 5 60 || h_fail "$q.dlq does not hold 5 letters"
h_wait_depth "$qu.dlq" 3 60 || h_fail "$qu.dlq does not hold 3 letters"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# 100 listings: each returns every letter once (a delivery on RabbitMQ 4.0-4.2).
for i in $(seq 1 100); do
    out=$(ctl dlq list "$q.dlq") || h_fail "listing $i failed"
    h_assert_eq "$(cut -f1 <<<"$out" | sort | paste -sd' ')" "r1 r2 r3 r4 r5" "letters in listing $i"
done
h_assert_eq "$(h_depth "$q.dlq")" 5 "letters in $q.dlq after 100 listings"

# The older dead letter queue: the documented remedy, a policy, turns its limit off (4.x).
if ((major >= 4)); then
    h_rabbitmqctl set_policy --apply-to queues t_qlim '^t_qlim\.u' '{"delivery-limit":-1}' >/dev/null
fi
for i in $(seq 1 25); do
    out=$(ctl dlq list "$qu.dlq" 2>ctl.err) || h_fail "listing $i of $qu.dlq failed"
    h_assert_eq "$(cut -f1 <<<"$out" | sort | paste -sd' ')" "u1 u2 u3" "letters in listing $i of $qu.dlq"
done
h_assert_eq "$(h_depth "$qu.dlq")" 3 "letters in $qu.dlq after 25 listings"
((major < 4)) || grep -F "a letter was returned 2" ctl.err >/dev/null ||
    h_fail "no warning about letters returned 20+ times: $(cat ctl.err)"
h_mq get "$q.dlq" >dlq.txt
h_assert_eq "$(cut -f1 dlq.txt | sort | paste -sd' ')" "r1 r2 r3 r4 r5" "letters taken from $q.dlq"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects")" 0 "effects of rejected messages"
h_rabbitmqctl clear_policy t_qlim >/dev/null 2>&1 || true
echo "t_quorum_dlq_limit: ok"
