# t_fail_publish_blocked: a memory alarm blocks the republishing connection (connection.blocked): the worker logs it, never hangs, requeues the messages whose copies cannot go out, keeps consuming and showing progress; once the alarm clears every retry and dead letter goes out once.
#
# Phase A: the worker opens its republishing connection while the alarm is on (its probe
# publish is blocked): rounds fail at once, nothing is published. Phase B: the alarm comes
# while a batch is held open (a hold file the handler waits on, up to 1.5 s a message, removed
# once the alarm is on: rabbitmqctl may take many seconds on a loaded machine) on an open,
# unblocked republishing connection: the round's copies
# are blocked mid-round, the worker gives up on them after a bounded wait and resets that
# connection (its unconfirmed copies must not arrive later). Phase C: as B, with a 20 MB copy
# (or one of the broker's max message size, when lower)
# whose socket write blocks: the write is given up on. Producers cannot publish during
# an alarm, so every message is published before it.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_publish_blocked
q=t_fail_blocked.q    # phase A: good, retry-once and reject messages
qs=t_fail_blocked.s   # phases B and C: a slow handler, retry-once messages
qo=t_fail_blocked.o   # another queue, good messages only: keeps going throughout
alarm() { h_rabbitmqctl set_vm_memory_high_watermark "$1" >/dev/null; }
alarm_on() { grep -q memory <<<"$(h_rabbitmqctl eval 'rabbit_alarm:get_alarms().' 2>&1)"; }
wait_alarm()
{
    local want=$1 deadline=$((SECONDS + 30))
    while :; do
        if alarm_on; then [[ $want == on ]] && return 0; else [[ $want == off ]] && return 0; fi
        ((SECONDS < deadline)) || h_fail "the memory alarm did not turn $want within 30 s"
        sleep 0.2
    done
}
# Wait until the broker no longer lists connection pid $1. A connection the worker reset
# is dropped when the broker's next heartbeat to it fails, before the broker reads the
# copies left in it; only then may the alarm clear (else those copies would arrive).
wait_conn_gone()
{
    local deadline=$((SECONDS + 30))
    while grep -qF "$1" <<<"$(h_rabbitmqctl list_connections pid 2>/dev/null)"; do
        ((SECONDS < deadline)) || h_fail "the broker kept the reset republishing connection for 30 s"
        sleep 0.5
    done
}
trap 'alarm 0.4 2>/dev/null || true; c_servers_ensure' EXIT
h_new_db "$db"
c_fresh_queues $q $q.dlq $q.retry.200 $qs $qs.dlq $qs.retry.200 $qo $qo.dlq

# WatchdogSec=24s as systemd would set it: the supervisor withholds its ping (and logs it)
# when a worker shows no progress for 12 s.
cat >idemd-wd <<EOF
#!/usr/bin/env bash
export NOTIFY_SOCKET=\$PWD/notify.sock WATCHDOG_USEC=24000000 WATCHDOG_PID=\$\$
exec "$IDEMD" "\$@"
EOF
chmod +x idemd-wd
{
    # heartbeat = 12: the broker notices a reset republishing connection within 6 s, and
    # a held batch (at most 10 x 1.5 s) stays under two heartbeats.
    h_conf_common "$db" | sed 's/heartbeat = 30/heartbeat = 12/'
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; batch_size = 20;
             max_attempts = 3; retry_delays_ms = [ 200 ]; },
           { name = "$qs"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; batch_size = 11; prefetch = 11;
             max_body_bytes = 33554432; # phase C needs its 20 MB copy whole
             batch_wait_ms = 2000; max_attempts = 3; retry_delays_ms = [ 200 ];
             settings = { hold_file = "$PWD/hold"; hold_ms = 1500; }; },
           { name = "$qo"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; } );
CONF
} >idemd.conf
export IDEMD=$PWD/idemd-wd

# ---------- phase A: the republishing connection opens during the alarm ----------
h_daemon_start idemd.conf idemd.log # declares the queues
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
{
    h_gen g 1 50
    h_gen r 1 10 retry-once
    h_gen x 1 3 reject
} | h_mq publish -r "$q" >pub.txt
h_assert_eq "$(cat pub.txt)" "published 63 confirmed 63" "publisher of $q"
out=$(h_gen o 1 100 | h_mq publish -r "$qo")
h_assert_eq "$out" "published 100 confirmed 100" "publisher of $qo"
alarm 0.000001
wait_alarm on
t0=$SECONDS
h_daemon_start idemd.conf idemd.log
h_wait_log idemd.log "publishing connection blocked by the broker" 1 30 ||
    h_fail "the worker did not log the block"
h_wait_log idemd.log "queue $q: the broker blocks publishing \(resource alarm\): not republishing" 2 30 ||
    h_fail "rounds were not refused at once while blocked"
# Consuming is not blocked: the good messages of both queues are done during the alarm. The
# retry-once and rejected ones are held unacked: their copies cannot be published.
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE msg_id LIKE 'g%' OR msg_id LIKE 'o%'" \
    $'150\t150\t1' 30 || h_fail "good messages were not processed during the alarm"
h_wait_log idemd.log "outcome=reject queue=$q id=x1 .*then=\"held" 1 30 ||
    h_fail "x1 was not held while blocked"
h_wait_log idemd.log "message\(s\) held: their copies were refused again" 1 30 ||
    h_fail "the held copies were not tried again while blocked"
alarm_on || h_fail "the alarm ended early"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id LIKE 'x%'")" 0 "effects of rejects"
h_assert_eq "$(h_depth "$q.dlq")$(h_depth "$q.retry.200")$(h_depth "$q")" 000 \
    "copies published, or messages left ready, during the alarm"
h_daemon_alive || h_fail "idemd died during the alarm"
c_log "phase A: $((SECONDS - t0)) s blocked"
alarm 0.4
wait_alarm off
h_wait_log idemd.log "publishing connection unblocked" 1 30 || h_fail "the unblock was not logged"
h_wait_depth "$q.dlq" 3 30 || h_fail "$q.dlq does not hold the 3 rejected messages"
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE msg_id LIKE 'r%'" $'10\t10\t1' 30 ||
    h_fail "the held retry-once messages were not processed after the alarm"
h_wait_depth "$q" 0 30

# ---------- phase B: the alarm comes while a round is under way ----------
# Ten messages that ask for a retry, held while the hold file exists: the batch's copies go out
# once the alarm is on, on a republishing connection that is open and not blocked.
# A first retry opens the worker's republishing connection.
h_assert_eq "$(printf 'warm\tretry-once\n' | h_mq publish -r "$qs")" "published 1 confirmed 1" \
    "publisher of $qs"
h_wait_sql "SELECT n FROM effects WHERE msg_id = 'warm'" 1 30 || h_fail "warm was not processed"
conn=$(c_named_conn "idemd $qs#0 republisher")
[[ -n "$conn" ]] || h_fail "no republishing connection for $qs"
touch hold
h_assert_eq "$(h_gen s 1 10 retry-once | h_mq publish -r "$qs")" "published 10 confirmed 10" \
    "publisher of $qs"
h_wait_depth "$qs" 0 10 # all ten taken by the worker
alarm 0.000001
wait_alarm on
rm -f hold
tb=$SECONDS
h_wait_log idemd.log "queue $qs: republishing failed 1 time" 1 30 ||
    h_fail "the blocked round of $qs did not fail"
h_assert_eq "$(h_count_log idemd.log "copies not confirmed after [0-9]+ ms \(the broker blocks publishing")" \
    1 "rounds given up on because of the block (did the alarm come after the round?)"
wait_conn_gone "$conn"
h_daemon_alive || h_fail "idemd died during the alarm"
alarm_on || h_fail "the alarm ended early"
c_log "phase B: $((SECONDS - tb)) s blocked"
alarm 0.4
wait_alarm off
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE msg_id LIKE 's%'" $'10\t10\t1' 60 ||
    h_fail "the slow queue's messages were not processed once after the alarm"
h_wait_depth "$qs" 0 30
h_wait_depth "$qs.retry.200" 0 30

# ---------- phase C: the blocked broker stops reading in the middle of a big copy ----------
# A 20 MB message without an id is dead-lettered; its copy does not fit in the socket
# buffers, so its write blocks once the broker stops reading: the write is given up on.
# Phase B's messages needed no copy after their requeue: a retry opens a connection again.
h_assert_eq "$(printf 'warm2\tretry-once\n' | h_mq publish -r "$qs")" "published 1 confirmed 1" \
    "publisher of $qs"
h_wait_sql "SELECT n FROM effects WHERE msg_id = 'warm2'" 1 30 || h_fail "warm2 was not processed"
conn=$(c_named_conn "idemd $qs#0 republisher")
[[ -n "$conn" ]] || h_fail "no republishing connection for $qs after phase B"
# 20 MB, or the broker's max message size when lower (RabbitMQ 4.0: 16 MiB): either is far
# more than the socket buffers hold.
bmax=$(h_rabbitmqctl eval 'application:get_env(rabbit, max_message_size).' | tr -dc '0-9')
[[ -n "$bmax" ]] || h_fail "cannot read the broker's max_message_size"
# c1..c9 come first (with the big one and c10: eleven, the prefetch): one batch held open (the big body would pass max_batch_bytes, so it waits
# for the next batch) until the alarm (a rabbitmqctl call, slow on a loaded machine) is on, so
# the big copy goes out to a blocking broker.
touch hold
h_assert_eq "$(h_gen c 1 9 retry-once | h_mq publish -r "$qs")" "published 9 confirmed 9" "c1..c9"
"$C_BADPUB" -P "$AMQP_PORT" -r "$qs" --body-size $((bmax < 20000000 ? bmax : 20000000)) >/dev/null ||
    h_fail "badpub failed"
h_assert_eq "$(h_gen c 10 10 retry-once | h_mq publish -r "$qs")" "published 1 confirmed 1" "c10"
h_wait_depth "$qs" 0 10
alarm 0.000001
wait_alarm on
rm -f hold
tc=$SECONDS
# Either the big copy's write was under way when the broker stopped reading (given up after
# 10 s), or the worker already knew the broker blocks and held the message without writing.
h_wait_log idemd.log "publishing to '$qs.dlq': the broker took no data for 10000 ms|outcome=reject queue=$qs id=\"\" .*then=\"held \(dead-lettering failed\)" 1 60 ||
    h_fail "the big copy was neither given up on nor held while the broker blocked"
h_wait_log idemd.log "queue $qs: republishing failed" 2 30 || h_fail "that round did not fail"
wait_conn_gone "$conn"
h_daemon_alive || h_fail "idemd died during the alarm"
alarm_on || h_fail "the alarm ended early"
c_log "phase C: $((SECONDS - tc)) s blocked"
alarm 0.4
wait_alarm off
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE msg_id LIKE 'c%'" $'10\t10\t1' 60 ||
    h_fail "phase C's messages were not processed once after the alarm"
h_wait_depth "$qs.dlq" 1 30 || h_fail "the big message was not dead-lettered after the alarm"
h_wait_depth "$qs" 0 30
h_wait_depth "$qs.retry.200" 0 30
sleep 3 # copies that were left unconfirmed must not turn up now (they would be duplicates)
h_daemon_alive || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# ---------- what the alarms cost ----------
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects")" $'182\t182\t1' "effects"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id LIKE 'x%'")" 0 "effects of rejects"
h_mq get "$q.dlq" >dlq.txt
h_assert_eq "$(cut -f1 dlq.txt | sort | paste -sd' ')" "x1 x2 x3" "dead letters of $q"
h_assert_eq "$(h_depth "$q")$(h_depth "$q.retry.200")$(h_depth "$qs")$(h_depth "$qs.retry.200")$(h_depth "$qs.dlq")$(h_depth "$qo")" \
    000010 "messages left in $q, its delay queue, $qs, its delay and dead letter queues, $qo"
h_assert_eq "$(h_count_log idemd.log "outcome=duplicate")" 0 "copies taken in twice (duplicates)"
h_assert_eq "$(h_count_log idemd.log "shows no progress|killed by signal|exited with code [1-9]")" 0 \
    "watchdog withheld or workers lost"
blocked_mid=$(h_count_log idemd.log "copies not confirmed after [0-9]+ ms \(the broker blocks")
echo "t_fail_publish_blocked: ok (failed rounds: $(h_count_log idemd.log "republishing failed"); given up mid-round: $blocked_mid; longest pause: $(grep -oE "pausing [0-9]+ ms" idemd.log | awk '{ print $2 }' | sort -n | tail -n 1) ms)"
