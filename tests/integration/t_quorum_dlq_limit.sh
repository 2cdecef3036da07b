# t_quorum_dlq_limit: no broker delivery limit eats dead letters: a quorum dead letter queue listed 100 times with idemctl dlq list, and returned 25 times by basic.reject (counted on every RabbitMQ), still holds every letter (RabbitMQ 4 gets x-delivery-limit = -1, 3.x nothing); it is declared without x-dead-letter-strategy (no broker warning); queues left by an older idemd without the limit still work, with a warning and the guard, keep their letters under idemctl listings on 4.3 (a nack is no counted return there), and under a policy delivery-limit = -1 everywhere.
db=t_quorum_dlq_limit
q=t_qlim.q  # declared by this idemd
qu=t_qlim.u # declared before, as an older idemd did: no x-delivery-limit
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
for x in $q $q.dlq $qu $qu.dlq; do h_mq delete "$x" >/dev/null 2>&1 || true; done
h_rabbitmqctl clear_policy t_qlim >/dev/null 2>&1 || true
h_mq declare "$qu" --quorum
h_mq declare "$qu.dlq" --quorum-own
ver=$(h_rabbitmqctl eval 'rabbit_misc:version().' | tr -d '"')
major=$(cut -d. -f1 <<<"$ver")
minor=$(cut -d. -f2 <<<"$ver")
# From RabbitMQ 4.3 x-delivery-count (what a delivery limit compares) counts basic.reject and
# lost connections, not a requeueing basic.nack, which is how idemctl gives letters back.
nack_counts=$((major < 4 || (major == 4 && minor < 3) ? 1 : 0))
echo "# RabbitMQ $ver: a requeueing nack counts: $nack_counts" >&2
blog=$H_DIR/rabbit/log/$H_RABBIT_NODE.log
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
# The dead letter queue has no dead-letter exchange, so no x-dead-letter-strategy either (the
# broker warns about one without the other); x-overflow reject-publish stays.
line=$(awk -v n="$q.dlq" '$1 == n' <<<"$args")
[[ $line != *x-dead-letter-strategy* && $line == *x-overflow*reject-publish* ]] ||
    h_fail "$q.dlq: arguments $line"
# The older one keeps the strategy it was declared with: declared as it is, said at worker start.
line=$(awk -v n="$qu.dlq" '$1 == n' <<<"$args")
[[ $line == *x-dead-letter-strategy*at-least-once* ]] || h_fail "$qu.dlq: arguments $line"
n=$(h_count_log idemd.log "queue '$qu.dlq' exists with x-dead-letter-strategy")
((n > 0)) || h_fail "idemd did not say why $qu.dlq keeps x-dead-letter-strategy"
h_wait_log "$blog" "Disabling dead-lettering for queue '$qu.dlq'" 1 30 ||
    h_fail "no broker warning about $qu.dlq: is $blog the broker's log?"
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

# list QUEUE N WANT: N listings, each of every letter (ids WANT); stderr of the last in ctl.err.
list()
{
    local i out
    for i in $(seq 1 "$2"); do
        out=$(ctl dlq list "$1" 2>ctl.err) || h_fail "listing $i of $1 failed: $(cat ctl.err)"
        h_assert_eq "$(cut -f1 <<<"$out" | sort | paste -sd' ')" "$3" "letters in listing $i of $1"
    done
}

# 100 listings: each returns every letter once (a counted return up to RabbitMQ 4.2).
list "$q.dlq" 100 "r1 r2 r3 r4 r5"
h_assert_eq "$(h_depth "$q.dlq")" 5 "letters in $q.dlq after 100 listings"
# 25 returns every version counts (RabbitMQ 4.3 counts none of the listings): past 20.
h_assert_eq "$(h_mq return "$q.dlq" -n 25)" "returned 5 25 times" "returns of $q.dlq's letters"
list "$q.dlq" 1 "r1 r2 r3 r4 r5"
h_assert_eq "$(h_depth "$q.dlq")" 5 "letters in $q.dlq after 25 returns"

# The older dead letter queue keeps RabbitMQ 4's limit of 20 until a policy lifts it.
if ((major >= 4 && !nack_counts)); then
    # 4.3: listings are no counted returns, so even without the policy none is lost, and
    # idemctl, which reads the count a limit compares, sees none to warn about.
    list "$qu.dlq" 25 "u1 u2 u3"
    h_assert_eq "$(h_count_log ctl.err "a letter was returned")" 0 "warnings after 25 listings"
    # Counted returns: idemctl warns at 10, before the limit.
    h_assert_eq "$(h_mq return "$qu.dlq" -n 12)" "returned 3 12 times" "returns of $qu.dlq's letters"
    list "$qu.dlq" 1 "u1 u2 u3"
    h_assert_eq "$(h_count_log ctl.err "a letter was returned 12 times")" 1 "warnings after 12 returns"
fi
# The documented remedy, a policy, turns the limit off (4.x).
if ((major >= 4)); then
    h_rabbitmqctl set_policy --apply-to queues t_qlim '^t_qlim\.u' '{"delivery-limit":-1}' >/dev/null
    deadline=$((SECONDS + 30))
    until [[ $(h_rabbitmqctl list_queues name policy | awk -v n="$qu.dlq" '$1 == n { print $2 }') == t_qlim ]]; do
        ((SECONDS < deadline)) || h_fail "the policy does not apply to $qu.dlq"
        sleep 0.2
    done
fi
if ((major >= 4 && !nack_counts)); then
    h_assert_eq "$(h_mq return "$qu.dlq" -n 12)" "returned 3 12 times" "returns of $qu.dlq's letters"
fi
list "$qu.dlq" 25 "u1 u2 u3"
h_assert_eq "$(h_depth "$qu.dlq")" 3 "letters in $qu.dlq after 25 listings"
if ((major >= 4 && nack_counts)); then
    grep -F "a letter was returned 2" ctl.err >/dev/null ||
        h_fail "no warning about letters returned 20+ times: $(cat ctl.err)"
elif ((major >= 4)); then
    # 24 counted returns, past the limit the policy lifted; the listings added none.
    h_assert_eq "$(h_count_log ctl.err "a letter was returned 24 times")" 1 "warnings after 24 returns"
fi
h_assert_eq "$(h_count_log "$blog" "Disabling dead-lettering for queue '$q.dlq'")" 0 \
    "broker warnings about $q.dlq"
h_mq get "$q.dlq" >dlq.txt
h_assert_eq "$(cut -f1 dlq.txt | sort | paste -sd' ')" "r1 r2 r3 r4 r5" "letters taken from $q.dlq"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects")" 0 "effects of rejected messages"
h_rabbitmqctl clear_policy t_qlim >/dev/null 2>&1 || true
echo "t_quorum_dlq_limit: ok"
