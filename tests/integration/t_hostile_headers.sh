# t_hostile_headers: headers nested 99/100/101/10,000 deep and integer ids outside 0..INT64_MAX get one outcome whatever librabbitmq decodes; what follows flows; nothing is deleted.
# librabbitmq 0.14+ cannot decode headers nested deeper than 100 levels: idemd rejects such a
# delivery to the broker, which dead-letters it (the queue is declared so). 0.11 decodes them:
# idemd dead-letters it itself, with idemd-error, and leaves the deep header out of the copy.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_hostile_headers
qa=t_hostile.a # classic, id in message_id
qq=t_hostile.q # quorum
qh=t_hostile.h # id in the x-id header
qo=t_hostile.o # declared by an older idemd (no dead-letter arguments), no policy
qp=t_hostile.p # the same, with a dead-letter policy and declare.dead_letter_policy = true
h_new_db "$db"
c_fresh_queues $qa $qa.dlq $qq $qq.dlq $qh $qh.dlq $qo $qo.dlq $qp $qp.dlq
h_mq declare "$qo" >/dev/null
h_mq declare "$qp" >/dev/null
h_rabbitmqctl set_policy t_hostile_p "^t_hostile\.p\$" \
    "{\"dead-letter-exchange\":\"\",\"dead-letter-routing-key\":\"$qp.dlq\"}" --apply-to queues >/dev/null
lib=$("$C_BADPUB" --librabbitmq-version)
case $lib in
0.[0-9].* | 0.1[0-3].*) deep_ok=1 ;; # decodes headers of any depth
*) deep_ok=0 ;;
esac
h_log "librabbitmq $lib: decodes headers deeper than 100 levels: $deep_ok"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qa"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 50; retry_delays_ms = [ ]; },
  { name = "$qq"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 50; retry_delays_ms = [ ];
    declare = { quorum = true; }; },
  { name = "$qh"; handler = "$H_TEST_PLUGINS/counter.so"; id_header = "x-id"; retry_delays_ms = [ ]; },
  { name = "$qo"; handler = "$H_TEST_PLUGINS/counter.so"; retry_delays_ms = [ ]; },
  { name = "$qp"; handler = "$H_TEST_PLUGINS/counter.so"; retry_delays_ms = [ ];
    declare = { dead_letter_policy = true; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
bp() { "$C_BADPUB" -P "$AMQP_PORT" "$@" >/dev/null || h_fail "badpub $* failed"; }

# ---- depth: 99 and 100 processed; 101 and 10,000 dead-lettered; the 500 behind 101 processed ----
bp -r "$qa" --id d99 --body m --nested deep=99
bp -r "$qa" --id d100 --body m --nested deep=100
bp -r "$qa" --id d101 --body m --nested deep=101
h_gen g 1 500 | h_mq publish -r "$qa" >/dev/null
bp -r "$qa" --id d10000 --body m --nested deep=10000
bp -r "$qa" --id after --body m
# quorum: the same, dead-lettered at least once
bp -r "$qq" --id qd101 --body m --nested deep=101
h_gen qg 1 50 | h_mq publish -r "$qq" >/dev/null
# ---- integer ids: within 0..INT64_MAX, else dead-lettered with the reason (RabbitMQ 4.x
# delivers u64 2^64-1 as -1: refused either way, never processed as another id) ----
bp -r "$qh" --body u-max --header x-id=u64:18446744073709551615
bp -r "$qh" --body u-2p63 --header x-id=u64:9223372036854775808
bp -r "$qh" --body i-neg --header x-id=i64:-5
bp -r "$qh" --body u-top --header x-id=u64:9223372036854775807
bp -r "$qh" --body u-42 --header x-id=u64:42
bp -r "$qh" --body i-0 --header x-id=i64:0
# ---- a queue without dead-lettering: what cannot be read stays in it ----
h_gen o 1 20 | h_mq publish -r "$qo" >/dev/null
bp -r "$qo" --id od101 --body m --nested deep=101
# ---- with a policy the operator vouches for: dead-lettered, the rest flows ----
bp -r "$qp" --id pd101 --body m --nested deep=101
h_gen p 1 20 | h_mq publish -r "$qp" >/dev/null

count() { h_sql "SELECT COUNT(*) FROM effects WHERE queue = '$1'"; }
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qa'" 503 120 ||
    c_soft_fail "$qa: $(count $qa) of 503 processed (d99, d100, g1..g500, after)"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qq'" 50 60 || c_soft_fail "$qq: $(count $qq) of 50 processed"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qh'" 3 60 || c_soft_fail "$qh: $(count $qh) of 3 processed"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qo'" 20 60 || c_soft_fail "$qo: $(count $qo) of 20 processed"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qp'" 20 60 || c_soft_fail "$qp: $(count $qp) of 20 processed"
h_wait_depth "$qa.dlq" 2 30 || c_soft_fail "$qa.dlq does not hold 2 dead letters"
h_wait_depth "$qq.dlq" 1 30 || c_soft_fail "$qq.dlq does not hold 1 dead letter"
h_wait_depth "$qh.dlq" 3 30 || c_soft_fail "$qh.dlq does not hold 3 dead letters"
h_wait_depth "$qp.dlq" 1 30 || c_soft_fail "$qp.dlq does not hold 1 dead letter"
if ((deep_ok)); then
    h_wait_depth "$qo.dlq" 1 30 || c_soft_fail "$qo.dlq does not hold 1 dead letter"
else
    # requeued, never dropped: the worker comes back to it with a growing pause
    h_wait_log idemd.log "outcome=requeue queue=$qo tag=" 2 30 || c_soft_fail "$qo: od101 was not requeued twice"
fi
h_daemon_alive || h_fail "idemd died"
c_soft_eq "$(h_count_log idemd.log "killed by signal|exited with code [1-9]")" 0 "worker crashes and exits"
c_soft_eq "$(h_count_log idemd.log "no close-ok within")" 0 "slow closes of connections that cannot read"
c_soft_eq "$(h_count_log idemd.log "exists without the dead-letter arguments")" 1 \
    "warnings about $qo (once; none about $qp, whose policy is vouched for)"
h_daemon_stop || c_soft_fail "idemd exited with status $? on SIGTERM"

c_soft_eq "$(h_depth $qa) $(h_depth $qq) $(h_depth $qh) $(h_depth $qp)" "0 0 0 0" "work queue depths"
if ((deep_ok)); then
    c_soft_eq "$(h_depth $qo) $(h_depth $qo.dlq)" "0 1" "$qo and its dead letter queue"
else
    c_soft_eq "$(h_depth $qo) $(h_depth $qo.dlq)" "1 0" "$qo (od101 kept) and its dead letter queue"
fi
want=$(printf '%s\n' d99 d100 after $(seq -f 'g%g' 1 500) | sort)
c_soft_set_eq "$(h_sql "SELECT msg_id FROM effects WHERE queue = '$qa' AND n = 1" | sort)" "$want" "$qa: processed once each"
c_soft_set_eq "$(h_sql "SELECT msg_id FROM effects WHERE queue = '$qh' AND n = 1" | sort)" \
    $'0\n42\n9223372036854775807' "$qh: processed ids"

# The undecodable ones: one line each, saying what happened and why.
if ((deep_ok)); then
    for id in d101 d10000; do
        c_soft_eq "$(h_count_log idemd.log "outcome=reject queue=$qa id=$id .*nests deeper than 100 levels")" 1 "reject of $id"
    done
else
    c_soft_eq "$(h_count_log idemd.log "outcome=reject queue=$qa tag=[0-9]+ .*dead-letters it to $qa.dlq.*cannot decode")" 2 \
        "rejects to the broker on $qa"
    c_soft_eq "$(h_count_log idemd.log "outcome=reject queue=$qq tag=")" 1 "rejects to the broker on $qq"
    c_soft_eq "$(h_count_log idemd.log "outcome=reject queue=$qp tag=")" 1 "rejects to the broker on $qp"
fi

# idemctl dlq list: lists the dead letters, or says which it cannot decode; nothing leaves.
rc=0
"$H_BUILD/idemctl" -c idemd.conf dlq list "$qa.dlq" >list.out 2>list.err || rc=$?
cat list.out list.err
if ((deep_ok)); then
    c_soft_eq "$rc" 0 "idemctl dlq list exit status"
    c_soft_eq "$(cut -f1 list.out | sort | tr '\n' ' ')" "d10000 d101 " "letters listed"
    c_soft_eq "$(grep -c "nests deeper than 100 levels" list.out)" 2 "letters listed with the reason"
else
    c_soft_eq "$rc" 4 "idemctl dlq list exit status (stopped part way)"
    c_soft_eq "$(grep -c "cannot be decoded by this librabbitmq" list.err)" 1 "the line saying so"
fi
for i in 1 2; do "$H_BUILD/idemctl" -c idemd.conf dlq list "$qa.dlq" >/dev/null 2>&1 || true; done
c_soft_eq "$(h_depth $qa.dlq) $(h_depth $qq.dlq) $(h_depth $qp.dlq)" "2 1 1" "dead letters after listing"

# Integer ids: dead letters with the reason (idemd's copies: any client reads them).
h_mq get "$qh.dlq" --id-header x-id >dlq_h.txt
for b in u-max u-2p63 i-neg; do
    line=$(awk -F'\t' -v b="$b" '$2 == b' dlq_h.txt)
    [[ "$(c_hdr "$line" idemd-error)" == *"integer ids must be within 0..9223372036854775807"* ]] ||
        c_soft_fail "$qh.dlq: $b: idemd-error '$(c_hdr "$line" idemd-error)' lacks the range"
done
if ((deep_ok)); then
    # idemd's own dead letters: the reason, and the deep header left out so that a
    # librabbitmq 0.14+ client can read them.
    h_mq get "$qa.dlq" >dlq_a.txt
    for id in d101 d10000; do
        line=$(awk -F'\t' -v i="$id" '$1 == i' dlq_a.txt)
        [[ "$(c_hdr "$line" idemd-error)" == *"nests deeper than 100 levels"* ]] ||
            c_soft_fail "$qa.dlq: $id: idemd-error '$(c_hdr "$line" idemd-error)'"
        [[ -z "$(c_hdr "$line" deep)" && $(c_hdr "$line" idemd-headers-dropped) == true ]] ||
            c_soft_fail "$qa.dlq: $id: the deep header was not left out and marked"
    done
fi
h_rabbitmqctl clear_policy t_hostile_p >/dev/null
c_soft_done
echo "t_hostile_headers: ok"
