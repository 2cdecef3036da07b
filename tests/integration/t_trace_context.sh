# t_trace_context: W3C trace context: the handler sees traceparent/tracestate/baggage and idemd's processing span, the outcome lines carry trace_id and span_id, an onward message gets a child traceparent with the source's tracestate and baggage, retry and dead-letter copies keep the context, and a malformed traceparent is absent (the message still runs once).
source "$H_ROOT/tests/chaos/lib.sh"
db=t_trace_context
q=t_trace.q
dlq=$q.dlq
qo=t_trace.on
down=t_trace.down
mport=$(h_free_port 35000 2000)
h_new_db "$db"
c_fresh_queues "$q" "$dlq" "$q.retry.200" "$qo" "$qo.dlq" "$down"
trace=0af7651916cd43dd8448eb211c80319c
parent=b7ad6b7169203331
tp="00-$trace-$parent-01"
ts="rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
bg="userId=alice,isProduction=false"
{
    h_conf_common "$db"
    cat <<CONF
metrics = { listen = "127.0.0.1:$mport"; };
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; max_attempts = 2;
    retry_delays_ms = [ 200 ]; },
  { name = "$qo"; handler = "$H_TEST_PLUGINS/onward.so";
    settings = { routes = "- $down"; }; }
);
CONF
} >idemd.conf
h_mq declare "$down" >/dev/null || h_fail "declaring $down"
h_daemon_start idemd.conf idemd.log

# t1: traced, handled once; t2: traced, retried then dead-lettered; t3: a malformed (uppercase)
# traceparent, so no context and no tracestate, but its baggage stands alone; t4: no context.
{
    printf 't1\ttrace\ttraceparent=%s\ttracestate=%s\tbaggage=%s\n' "$tp" "$ts" "$bg"
    printf 't2\ttrace-retry\ttraceparent=%s\ttracestate=%s\tbaggage=%s\n' "$tp" "$ts" "$bg"
    printf 't3\ttrace\ttraceparent=%s\ttracestate=%s\tbaggage=%s\n' "${tp^^}" "$ts" "$bg"
    printf 't4\ttrace\n'
} >pub.txt
h_assert_eq "$(h_mq publish -r "$q" <pub.txt)" "published 4 confirmed 4" "publisher"
out=$(printf 'o1\thello\ttraceparent=%s\ttracestate=%s\tbaggage=%s\n' "$tp" "$ts" "$bg" |
    h_mq publish -r "$qo")
h_assert_eq "$out" "published 1 confirmed 1" "publisher of $qo"

h_wait_depth "$dlq" 1 30
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$q' AND msg_id IN ('t1', 't3', 't4')" 3 30
h_wait_depth "$down" 1 30

# The handler saw the context (ABI 1.4), each message once.
seen() { h_sql "SELECT traceparent, tracestate, baggage, trace_id, LENGTH(span_id) FROM trace_seen WHERE msg_id = '$1'"; }
h_assert_eq "$(seen t1)" "$tp"$'\t'"$ts"$'\t'"$bg"$'\t'"$trace"$'\t16' "what the handler saw of t1"
h_assert_eq "$(seen t3)" $'\t\t'"$bg"$'\t\t0' "t3: a malformed traceparent is absent (and its tracestate)"
h_assert_eq "$(seen t4)" $'\t\t\t\t0' "t4: no context"
h_assert_eq "$(h_sql "SELECT msg_id, n FROM effects WHERE queue = '$q' ORDER BY msg_id")" \
    $'t1\t1\nt3\t1\nt4\t1' "effects: each handled message once, t2 none"
span=$(h_sql "SELECT span_id FROM trace_seen WHERE msg_id = 't1'")
[[ "$span" =~ ^[0-9a-f]{16}$ && "$span" != "$parent" ]] ||
    h_fail "t1's processing span '$span' is not a new span id"

# The outcome lines carry the trace id and the processing span the handler saw.
h_assert_eq "$(h_count_log idemd.log "outcome=ok queue=$q id=t1 .* trace_id=$trace span_id=$span\$")" 1 \
    "t1's outcome line with its trace_id and span_id"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q id=t2 .* trace_id=$trace span_id=[0-9a-f]{16}\$")" 2 \
    "t2's two outcome lines (retry, then dead-lettered) with its trace_id"
h_assert_eq "$(h_count_log idemd.log "id=t[34] .*trace_id=")" 0 "no trace_id on t3 and t4"

# The dead letter of t2 (it went through a retry copy first) keeps the context as it came.
c_dead_letter "$dlq" t2 trace-retry "gave up after 2 attempts"
line=$C_DL_LINE
h_assert_eq "$(c_hdr "$line" traceparent)" "$tp" "dead letter's traceparent"
h_assert_eq "$(c_hdr "$line" tracestate)" "$ts" "dead letter's tracestate"
h_assert_eq "$(c_hdr "$line" baggage)" "$bg" "dead letter's baggage"
h_assert_eq "$(c_hdr "$line" idemd-attempts)" 2 "dead letter's attempts (it was retried once)"

# The onward message: same trace, a new parent id (idemd's span that sent it), the source's
# tracestate and baggage, captured into its outbox row at publish() time.
h_mq get "$down" >down.txt
cat down.txt
h_assert_eq "$(wc -l <down.txt)" 1 "messages in $down"
line=$(cat down.txt)
otp=$(c_hdr "$line" traceparent)
[[ "$otp" =~ ^00-$trace-([0-9a-f]{16})-01$ ]] || h_fail "onward traceparent '$otp' is not a child of $tp"
[[ "${BASH_REMATCH[1]}" != "$parent" && "${BASH_REMATCH[1]}" != 0000000000000000 ]] ||
    h_fail "onward traceparent '$otp' keeps the incoming parent id"
h_assert_eq "$(c_hdr "$line" tracestate)" "$ts" "onward tracestate"
h_assert_eq "$(c_hdr "$line" baggage)" "$bg" "onward baggage"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_outbox")" 0 "outbox rows left"
h_assert_eq "$(h_count_log idemd.log "outcome=ok queue=$qo id=o1 .* trace_id=$trace span_id=")" 1 \
    "o1's outcome line with its trace_id"

# The handler duration histogram offers exemplars with the trace id, in OpenMetrics only.
curl -sS --max-time 5 -D om.hdr -H 'Accept: application/openmetrics-text; version=1.0.0' \
    "http://127.0.0.1:$mport/metrics" >om.txt || h_fail "scrape (OpenMetrics)"
grep -i '^content-type: application/openmetrics-text' om.hdr >/dev/null || h_fail "content type: $(cat om.hdr)"
n=$(h_count_log om.txt "^idemd_handler_duration_seconds_bucket\\{queue=\"$q\",le=\"[^\"]+\"\\} [0-9]+ # \\{trace_id=\"$trace\",span_id=\"[0-9a-f]{16}\"\\} [0-9.]+ [0-9.]+\$")
((n >= 1)) || { cat om.txt; h_fail "no exemplar with trace_id $trace on $q's handler duration buckets"; }
h_assert_eq "$(tail -n 1 om.txt)" "# EOF" "OpenMetrics ends with # EOF"
curl -sS --max-time 5 "http://127.0.0.1:$mport/metrics" >plain.txt || h_fail "scrape (plain)"
h_assert_eq "$(h_count_log plain.txt ' # \{')" 0 "exemplars in plain Prometheus text"
promtool check metrics <plain.txt >promtool.log 2>&1 || { cat promtool.log; h_fail "promtool check metrics"; }

# A real Prometheus (it asks for OpenMetrics) stores the exemplars.
pport=$(h_free_port 36000 2000)
cat >prom.yml <<YML
global: { scrape_interval: 1s }
scrape_configs:
  - job_name: idemd
    static_configs: [ { targets: [ "127.0.0.1:$mport" ] } ]
YML
rm -rf prom-data
prometheus --config.file=prom.yml --storage.tsdb.path="$PWD/prom-data" --enable-feature=exemplar-storage \
    --web.listen-address="127.0.0.1:$pport" >prom.log 2>&1 &
prom_pid=$!
deadline=$((SECONDS + 60))
until curl -sS --max-time 5 -G "http://127.0.0.1:$pport/api/v1/query_exemplars" \
    --data-urlencode "query=idemd_handler_duration_seconds_bucket{queue=\"$q\"}" \
    --data-urlencode "start=$(($(date +%s) - 600))" --data-urlencode "end=$(($(date +%s) + 60))" \
    >exemplars.json 2>/dev/null && [[ "$(cat exemplars.json)" == *"\"trace_id\":\"$trace\""* ]]; do
    kill -0 "$prom_pid" 2>/dev/null || { tail prom.log; h_fail "prometheus exited"; }
    ((SECONDS < deadline)) || { cat exemplars.json; tail prom.log; h_fail "no exemplar with trace_id $trace in Prometheus"; }
    sleep 0.5
done
kill "$prom_pid"
wait "$prom_pid" 2>/dev/null || true

h_daemon_alive || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# An outbox table from before sql/011: idemd says which file to apply and keeps the context
# among the row's headers; then sql/011 adds the columns, twice without harm.
h_sql "ALTER TABLE idemd_outbox DROP COLUMN traceparent, DROP COLUMN tracestate, DROP COLUMN baggage"
h_daemon_start idemd.conf idemd2.log
out=$(printf 'o2	hello	traceparent=%s	tracestate=%s	baggage=%s
' "$tp" "$ts" "$bg" |
    h_mq publish -r "$qo")
h_assert_eq "$out" "published 1 confirmed 1" "publisher of $qo (before sql/011)"
h_wait_depth "$down" 1 30
line=$(h_mq get "$down")
echo "$line"
[[ "$(c_hdr "$line" traceparent)" =~ ^00-$trace-[0-9a-f]{16}-01$ ]] ||
    h_fail "onward traceparent before sql/011: '$(c_hdr "$line" traceparent)'"
h_assert_eq "$(c_hdr "$line" tracestate)$(c_hdr "$line" baggage)" "$ts$bg" \
    "onward tracestate and baggage before sql/011"
h_wait_log idemd2.log "apply sql/011_idemd_outbox_trace.sql" 1 10
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM (2)"
for k in 1 2; do
    h_mysql "$db" <"$H_SQL_DIR/011_idemd_outbox_trace.sql" || h_fail "sql/011 failed ($k)"
done
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = '$db' AND TABLE_NAME = 'idemd_outbox' AND COLUMN_NAME IN ('traceparent', 'tracestate', 'baggage')")" 3 \
    "sql/011's columns"
echo "t_trace_context: ok"
