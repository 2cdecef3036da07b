# t_outbox_blocked: 600 onward messages nobody can route and a batch of them to a missing exchange (which closes the channel) do not hold back the good onward messages of the same consumer: those arrive within seconds, the bad rows wait out their backoff, nothing is lost.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_outbox_blocked
q=t_ob_blk.q
sink=t_ob_blk.sink
bad=600
good=50
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$sink"
h_mq declare "$sink"
h_mq bind "$sink" amq.topic good.k
{
    h_conf_common "$db" | sed 's/shutdown_timeout = 30;/shutdown_timeout = 30; outbox_grace = 1; outbox_backoff_ms = 100;/'
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/onward.so"; workers = 2; batch_size = 100;
    settings = { routes = "amq.direct nowhere;t_ob_blk.missing k;amq.topic good.k"; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
# 600 sources whose onward message is unroutable: 600 rows that keep failing.
seq 1 $bad | awk '{ printf "u%d\troute:0\n", $1 }' | h_mq publish -r "$q" >pub.txt || h_fail "publish: $(cat pub.txt)"
h_wait_sql "SELECT COUNT(*) FROM idemd_outbox WHERE attempts >= 1" $bad 60 ||
    h_fail "the $bad unroutable rows were not tried: $(h_sql 'SELECT COUNT(*), MIN(attempts) FROM idemd_outbox')"
# Then sources that send one onward message each to the unroutable route, the missing exchange
# (the broker closes the channel) and the good route, in that order.
t0=$(date +%s.%N)
seq 1 $good | awk '{ printf "g%d\tmixed\n", $1 }' | h_mq publish -r "$q" >pub2.txt || h_fail "publish: $(cat pub2.txt)"
h_wait_depth "$sink" $good 20 || h_fail "the good onward messages did not arrive within 20 s (sink holds $(h_depth "$sink"))"
h_log "the $good good onward messages arrived $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s after their sources were published, behind $bad refused rows"
h_wait_depth "$q" 0 10 || h_fail "$q not drained"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_outbox WHERE exchange = 'amq.topic'")" 0 "good rows left in the outbox"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_outbox WHERE exchange = 'amq.direct'")" $((bad + good)) "unroutable rows kept (attempts left)"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_outbox WHERE exchange = 't_ob_blk.missing'")" $good "missing-exchange rows kept"
# Sources without trace context leave the trace columns NULL (libmysqlclient once stored '').
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_outbox WHERE traceparent IS NOT NULL OR tracestate IS NOT NULL OR baggage IS NOT NULL")" 0 \
    "outbox rows without trace context whose trace columns are not NULL"
h_wait_sql "SELECT COUNT(*) FROM idemd_outbox WHERE exchange = 't_ob_blk.missing' AND last_error LIKE '%404 NOT_FOUND%'" $good 30 ||
    h_fail "missing-exchange rows without the broker's reason: $(h_sql "SELECT last_error FROM idemd_outbox WHERE exchange = 't_ob_blk.missing' LIMIT 3")"
h_assert_eq "$(h_depth "$q.dlq")" 0 "nothing dead-lettered before outbox_max_attempts"
# The operator sees them: idemctl outbox list and status.
ctl() { "$H_BUILD/idemctl" -c idemd.conf "$@"; }
ctl outbox list "$q" --limit 5000 >list.txt || h_fail "idemctl outbox list exited with $?"
h_assert_eq "$(awk -F'\t' '$7 == "retrying"' list.txt | wc -l)" $((bad + 2 * good)) "rows listed as retrying"
h_assert_eq "$(awk -F'\t' '$4 == "t_ob_blk.missing" && $10 ~ /404 NOT_FOUND/' list.txt | wc -l)" $good \
    "missing-exchange rows listed with the broker's reason"
ctl status >status.txt || h_fail "idemctl status exited with $?"
[[ "$(cat status.txt)" == *$'\toutbox='$((bad + 2 * good))/$((bad + 2 * good))/0$'\t'* ]] ||
    h_fail "idemctl status: $(cat status.txt)"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_mq get "$sink" -n 1000 >sink.txt
h_assert_eq "$(cut -f1 sink.txt | sort -u | wc -l)" $good "distinct good onward messages"
h_assert_eq "$(wc -l <sink.txt)" $good "good onward messages, none twice"
echo "t_outbox_blocked: ok"
