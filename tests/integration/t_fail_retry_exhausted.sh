# t_fail_retry_exhausted: a message that always asks to retry goes through both delay tiers and ends in the DLQ with its history.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_fail_retry_exhausted
q=t_fail_retry.q
dlq=$q.dlq # the default dead letter queue name
x=t_fail_retry.x
h_new_db "$db"
c_fresh_queues "$q" "$dlq" "$q.retry.200" "$q.retry.400"
h_mq exchange "$x" -t direct
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 20;
             max_attempts = 3; retry_delays_ms = [ 200, 400 ];
             declare = { bindings = ( { exchange = "$x"; routing_key = "rk.retry"; } ); }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

out=$(printf 'x1\tretry\tcustom=kept\ng1\tgood\n' | h_mq publish -e "$x" -r rk.retry)
h_assert_eq "$out" "published 2 confirmed 2" "publisher"

h_wait_depth "$dlq" 1 30
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$q' AND msg_id = 'g1'" 1 10
h_wait_log idemd.log "outcome=retry queue=$q id=x1 .*then=\"dead-lettered to $dlq\"" 1 10

# Three attempts: two retries through the tiers, then the dead letter.
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q id=x1 .*attempt=1/3 .*then=\"retry scheduled\"")" 1 \
    "attempt 1 scheduled for retry"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q id=x1 .*attempt=2/3 .*then=\"retry scheduled\"")" 1 \
    "attempt 2 scheduled for retry"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q id=x1 .*attempt=3/3 .*then=\"dead-lettered")" 1 \
    "attempt 3 dead-lettered"
h_assert_eq "$(h_count_log idemd.log "outcome=[a-z]+ queue=$q id=x1 ")" 3 "outcome lines of x1"

# Nothing of x1 was ever committed.
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'x1'")" 0 "effects of x1"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE msg_id = 'x1'")" 0 "record rows of x1"
h_assert_eq "$(h_sql "SELECT msg_id, n FROM effects")" $'g1\t1' "effects"
h_assert_eq "$(h_sql "SELECT consumer, msg_id FROM msg_id_record")" "$q"$'\tg1' "record rows"

# The delay queues exist and are empty; so is the work queue.
for tier in 200 400; do
    d=$(h_depth "$q.retry.$tier") || h_fail "delay queue $q.retry.$tier does not exist"
    h_assert_eq "$d" 0 "depth of $q.retry.$tier"
done
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"

h_daemon_alive || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

c_dead_letter "$dlq" x1 retry "gave up after 3 attempts"
line=$C_DL_LINE
h_assert_eq "$(c_hdr "$line" idemd-attempts)" 3 "idemd-attempts"
err=$(c_hdr "$line" idemd-error)
[[ "$err" == *"test retry"* ]] || h_fail "idemd-error '$err' lacks the handler's reason 'test retry'"
h_assert_eq "$(c_hdr "$line" idemd-queue)" "$q" "idemd-queue"
h_assert_eq "$(c_hdr "$line" idemd-original-exchange)" "$x" "idemd-original-exchange"
h_assert_eq "$(c_hdr "$line" idemd-original-routing-key)" rk.retry "idemd-original-routing-key"
first=$(c_hdr "$line" idemd-first-failure)
last=$(c_hdr "$line" idemd-last-failure)
iso='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$'
[[ "$first" =~ $iso ]] || h_fail "idemd-first-failure '$first' is not an ISO 8601 UTC time"
[[ "$last" =~ $iso ]] || h_fail "idemd-last-failure '$last' is not an ISO 8601 UTC time"
# The first failure is attempt 1's; the last is attempt 3's, at least 200 + 400 ms later.
gap_ms=$(($(date -d "$last" +%s%3N) - $(date -d "$first" +%s%3N)))
((gap_ms >= 550)) || h_fail "first failure $first and last failure $last are only $gap_ms ms apart"
h_assert_eq "$(c_hdr "$line" custom)" kept "the publisher's own header"
! c_has_hdr "$line" x-death || h_fail "the dead letter carries the broker's x-death header"
h_assert_eq "$(h_depth "$dlq")" 0 "depth of $dlq after get"
echo "t_fail_retry_exhausted: ok (first failure $first, last $last)"
