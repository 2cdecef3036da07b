# t_metrics: /metrics passes promtool, counts outcomes, copies, restarts exactly; a real Prometheus scrapes it; the shipped alert rules and Grafana dashboard name only exported metrics and parse (promtool, Prometheus); counters survive a reload.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_metrics
q=t_metrics.q
dlq=$q.dlq
h_new_db "$db"
c_fresh_queues "$q" "$dlq" "$q.retry.100"
mport=$(h_free_port 31000 2000)
pport=$(h_free_port 33000 2000)
prom_pid=
m_cleanup()
{
    [[ -n "$prom_pid" ]] && kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
    true
}
trap m_cleanup EXIT

m_conf()
{
    # shellcheck disable=SC2001 # one substitution in a heredoc's output
    sed 's/shutdown_timeout = 30;/shutdown_timeout = 30; reconcile_interval = 1;/' <<<"$(h_conf_common "$db")"
    cat <<CONF
metrics = { listen = "127.0.0.1:$1"; };
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = $2;
             batch_size = 50; max_attempts = 2; retry_delays_ms = [ 100 ]; handler_timeout = 1;
             record_retention_days = 5; } );
CONF
}

# The exposition, or fail.
m_scrape() { curl -sS --max-time 5 "http://127.0.0.1:$mport/metrics"; }

# The value of sample $1 (name{labels} exactly as exposed) in a scrape.
m_value() { awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print "absent" }' <<<"$(m_scrape)"; }

# Poll until sample $1 is $2; fail after $3 s.
m_wait()
{
    local deadline=$((SECONDS + $3)) got
    while :; do
        got=$(m_value "$1") || true
        [[ "$got" == "$2" ]] && return 0
        ((SECONDS < deadline)) || h_fail "metrics: $1 is '$got', expected '$2' after $3 s"
        sleep 0.2
    done
}

# The value of PromQL query $1 on our Prometheus (empty when no result).
m_query()
{
    curl -sS --max-time 5 "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1" |
        sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p'
}

# Retention deletes these at startup: three records and one crash count.
h_sql "INSERT INTO msg_id_record (consumer, msg_id, create_time) VALUES ('$q', 'old1', NOW() - INTERVAL 10 DAY),
       ('$q', 'old2', NOW() - INTERVAL 10 DAY), ('$q', 'old3', NOW() - INTERVAL 10 DAY)"
h_sql "INSERT INTO idemd_attempt (consumer, msg_id, attempts, updated_at) VALUES
       ('$q', 'old1', 2, NOW() - INTERVAL 10 DAY)"
m_conf "$mport" 200 >idemd.conf
h_daemon_start idemd.conf idemd.log
m_wait "idemd_retention_deleted_rows_total{queue=\"$q\"}" 4 30

# 500 distinct ids, 10 of them twice, 3 rejects, 2 that always retry.
{
    h_gen m 1 500
    h_gen m 1 10
    h_gen r 1 3 reject
    h_gen x 1 2 retry
} >msgs.txt
out=$(h_mq publish -r "$q" <msgs.txt)
h_assert_eq "$out" "published 515 confirmed 515" "publisher"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'" 500 60
h_wait_depth "$dlq" 5 30

m_wait "idemd_messages_total{queue=\"$q\",outcome=\"ok\"}" 500 10
m_wait "idemd_messages_total{queue=\"$q\",outcome=\"duplicate\"}" 10 10
m_wait "idemd_messages_total{queue=\"$q\",outcome=\"reject\"}" 3 10
# Each retry body: attempt 1 retried through the delay queue, attempt 2 dead-lettered.
m_wait "idemd_messages_total{queue=\"$q\",outcome=\"retry\"}" 4 10
m_wait "idemd_retry_copies_total{queue=\"$q\",outcome=\"published\"}" 2 10
m_wait "idemd_dead_letter_copies_total{queue=\"$q\",outcome=\"published\"}" 5 10
h_assert_eq "$(m_value "idemd_dead_letter_copies_total{queue=\"$q\",outcome=\"refused\"}")" 0 "refused"
h_assert_eq "$(m_value "idemd_workers_consuming{queue=\"$q\"}")" 1 "workers consuming"
h_assert_eq "$(m_value "idemd_worker_restarts_total{queue=\"$q\",outcome=\"crash\"}")" 0 "crashes"
# Every settled message went through one batch (517: the retried ones twice); the 500
# committed ones carry idemd-pub-us; duplicates never reach the handler.
h_assert_eq "$(m_value "idemd_batch_size_sum{queue=\"$q\"}")" 517 "messages in batches"
h_assert_eq "$(m_value "idemd_publish_to_commit_seconds_count{queue=\"$q\"}")" 500 "latencies"
h_assert_eq "$(m_value "idemd_publish_to_commit_seconds_bucket{queue=\"$q\",le=\"+Inf\"}")" 500 \
    "latency +Inf bucket"
h_assert_eq "$(m_value "idemd_handler_duration_seconds_count{queue=\"$q\"}" | awk '{ print ($1 >= 507) }')" \
    1 "handler calls"
# reconcile() runs every second (counter.so logs each committed run).
deadline=$((SECONDS + 20))
until (($(m_value "idemd_reconcile_runs_total{queue=\"$q\"}") >= 2)); do
    ((SECONDS < deadline)) || h_fail "no reconcile runs counted"
    sleep 0.2
done
h_assert_eq "$(m_value "idemd_reconcile_failures_total{queue=\"$q\"}")" 0 "reconcile failures"
(($(h_sql "SELECT COUNT(*) FROM reconcile_runs") >= 2)) || h_fail "reconcile_runs has fewer than 2 rows"
commits=$(m_value "idemd_commits_total{queue=\"$q\"}")
((commits >= 10 && commits <= 517)) || h_fail "commits: $commits"
grep -qE '^idemd_build_info\{version="[0-9.]+",abi="1\.[0-9]+"\} 1$' <<<"$(m_scrape)" ||
    h_fail "no idemd_build_info"

# The exposition passes the linter.
m_scrape >scrape.txt
promtool check metrics <scrape.txt >promtool.log 2>&1 || { cat promtool.log; h_fail "promtool check metrics"; }

# Other paths and methods are refused; only the supervisor holds the listening socket
# (forked workers close their copies).
h_assert_eq "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$mport/")" 404 "GET /"
h_assert_eq "$(curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$mport/metrics")" \
    405 "POST /metrics"
holders=$(ss -Htlnp "sport = :$mport" | grep -o 'pid=[0-9]*' | sort -u)
h_assert_eq "$holders" "pid=$H_DAEMON_PID" "processes holding the metrics socket"
for pid in $(h_daemon_pids); do
    [[ $pid == "$H_DAEMON_PID" ]] && continue
    n=$(find "/proc/$pid/fd" -lname 'anon_inode:*eventpoll*' 2>/dev/null | wc -l)
    ((n == 0)) || h_fail "worker $pid holds $n epoll descriptors"
done

# The alert rules idemd ships (conf/prometheus/idemd-alerts.yml) are valid.
cp "$H_ROOT/conf/prometheus/idemd-alerts.yml" rules.yml
grep -q 'alert: IdemdDeadLettersGrowing' rules.yml || h_fail "no alert rules found in conf/prometheus/idemd-alerts.yml"
promtool check rules rules.yml >promtool.log 2>&1 || { cat promtool.log; h_fail "promtool check rules"; }

# Every metric an expression of the rules or of the dashboard (conf/grafana/idemd-dashboard.json)
# names is one idemd exports (a histogram by its _bucket, _sum or _count series).
python3 - "$H_ROOT/conf/grafana/idemd-dashboard.json" >dash-exprs.txt <<'PY' || h_fail "the dashboard is not JSON with panels and targets"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
exprs = [t["expr"] for p in d["panels"] for t in p["targets"]]
assert len(exprs) >= 10, exprs
print("\n".join(exprs))
PY
awk '/^# TYPE idemd_/ { print $3 }' scrape.txt | sort -u >exported.txt
grep -E '^[[:space:]]*expr:' rules.yml | cat dash-exprs.txt - | grep -oE 'idemd_[a-z_]+' |
    sed -E 's/_(bucket|sum|count)$//' | sort -u >named.txt
(($(wc -l <named.txt) >= 15)) || h_fail "only $(wc -l <named.txt) metrics named by the rules and the dashboard"
h_assert_eq "$(comm -23 named.txt exported.txt | tr '\n' ' ')" "" "metrics the rules or the dashboard name that idemd does not export"

# A real Prometheus scrapes it, with those rules; PromQL sees the count.
cat >prom.yml <<YML
global: { scrape_interval: 1s, evaluation_interval: 1s }
rule_files: [ "$PWD/rules.yml" ]
scrape_configs:
  - job_name: idemd
    static_configs: [ { targets: [ "127.0.0.1:$mport" ] } ]
YML
rm -rf prom-data # a fresh database: no series from an earlier run of this case
prometheus --config.file=prom.yml --storage.tsdb.path="$PWD/prom-data" \
    --web.listen-address="127.0.0.1:$pport" >prom.log 2>&1 &
prom_pid=$!
deadline=$((SECONDS + 60))
until curl -sf --max-time 2 "http://127.0.0.1:$pport/-/ready" >/dev/null; do
    kill -0 "$prom_pid" 2>/dev/null || { tail prom.log; h_fail "prometheus exited"; }
    ((SECONDS < deadline)) || { tail prom.log; h_fail "prometheus not ready"; }
    sleep 0.5
done
m_prom_wait()
{
    local deadline=$((SECONDS + $3)) got
    while :; do
        got=$(m_query "$1") || true
        [[ "$got" == "$2" ]] && return 0
        ((SECONDS < deadline)) || h_fail "PromQL $1 gave '$got', expected '$2' after $3 s"
        sleep 0.5
    done
}
m_prom_wait "sum(idemd_messages_total{queue=\"$q\",outcome=\"ok\"})" 500 60
# Each of the dashboard's expressions is PromQL Prometheus takes, with its variables filled in.
while IFS= read -r e; do
    e=${e//\$__rate_interval/1m}
    e=${e//\$queue/.*}
    out=$(curl -sf --max-time 5 --data-urlencode "query=$e" "http://127.0.0.1:$pport/api/v1/query") ||
        h_fail "Prometheus refused the dashboard's expression: $e"
    [[ "$out" == *'"status":"success"'* ]] || h_fail "dashboard expression $e: $out"
done <dash-exprs.txt
m_prom_wait "up{job=\"idemd\",instance=\"127.0.0.1:$mport\"}" 1 10

# A message that kills its worker: two crashes, then the crash guard dead-letters it.
out=$(printf 's1\tsegv\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publisher (segv)"
h_wait_depth "$dlq" 6 60
m_wait "idemd_worker_restarts_total{queue=\"$q\",outcome=\"crash\"}" 2 10
m_wait "idemd_dead_letter_copies_total{queue=\"$q\",outcome=\"published\"}" 6 10
m_wait "idemd_workers_consuming{queue=\"$q\"}" 1 30
m_prom_wait "sum(idemd_worker_restarts_total{queue=\"$q\",outcome=\"crash\"})" 2 30
# The dead letter it added fires the documented alert.
m_prom_wait "count(ALERTS{alertname=\"IdemdDeadLettersGrowing\",alertstate=\"firing\",queue=\"$q\"})" 1 30

# A handler that hangs: killed at handler_timeout twice (restarts by timeout), then dead-lettered.
out=$(printf 'h1\thang\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publisher (hang)"
h_wait_depth "$dlq" 7 60
m_wait "idemd_worker_restarts_total{queue=\"$q\",outcome=\"timeout\"}" 2 10
m_wait "idemd_workers_consuming{queue=\"$q\"}" 1 30

# idemctl status reads the daemon's /status: workers up, restarts, the last error or warning.
"$H_BUILD/idemctl" -c idemd.conf --json status >status.json 2>status.err || h_fail "idemctl status: $(cat status.err)"
h_assert_eq "$(jq -r '.[0] | "\(.daemon) \(.workers_up) \(.restarts.timeout) \(.restarts.crash)"' status.json)" \
    "ok 1 2 2" "idemctl status: daemon, workers up, restarts by timeout and crash"
# The newest: the worker dead-lettered h1 after its second timeout.
h_assert_eq "$(jq -r '.[0].last_error | "\(.level) \(.text | test("id=h1 .*handler crashed: its worker died in the handler 2 times"))"' status.json)" \
    "warning true" "idemctl status: last error"
# A daemon that does not answer: everything else is shown, exit 4, and why.
sed "s/listen = \"127.0.0.1:$mport\"/listen = \"127.0.0.1:$(h_free_port 37000 2000)\"/" idemd.conf >deaf.conf
chmod go= deaf.conf
rc=0
out=$("$H_BUILD/idemctl" -c deaf.conf status 2>deaf.err) || rc=$?
h_assert_eq "$rc" 4 "idemctl status with the daemon unreachable: exit status"
grep -q "^$q"$'\t'"present.*workers_up=?"$'\t' <<<"$out" || h_fail "status line without the daemon: $out"
grep -q "did not answer GET /status: connect: Connection refused" deaf.err || h_fail "deaf.err: $(cat deaf.err)"

# The server closes the worker's idle database session: reopened in place, one reconnect.
ids=$(h_sql "SELECT GROUP_CONCAT(id) FROM information_schema.processlist WHERE db = '$db' AND id <> CONNECTION_ID()")
[[ -n "$ids" && "$ids" != NULL ]] || h_fail "no idemd session in the processlist"
for id in ${ids//,/ }; do h_sql "KILL $id"; done
m_wait "idemd_database_reconnects_total{queue=\"$q\"}" 1 20
h_assert_eq "$(m_value "idemd_worker_restarts_total{queue=\"$q\",outcome=\"database\"}")" 0 \
    "restarts after the database session was killed"

# The broker closes the consuming connection: the worker exits, is restarted, reconnects.
c_close_named_conn "idemd $q#0 consumer"
m_wait "idemd_worker_restarts_total{queue=\"$q\",outcome=\"broker\"}" 1 20
m_wait "idemd_broker_reconnects_total{queue=\"$q\"}" 1 20
m_wait "idemd_workers_consuming{queue=\"$q\"}" 1 30
# What the supervisor said of that exit is now the queue's last error (text output).
out=$("$H_BUILD/idemctl" -c idemd.conf status 2>status.err) || h_fail "idemctl status: $(cat status.err)"
echo "$out" >/tmp/t_metrics_status.txt
grep -q "workers_up=1/1"$'\t'"restarts=5"$'\t'"last_error=[0-9]*s ago: worker $q#0 (pid [0-9]*) exited with code 75" <<<"$out" ||
    h_fail "status after the broker close: $out"

# A reload that changes the queue (its worker drains, a new one starts in another slot)
# and the metrics address: counters go on from where they were, on the new address.
oldport=$mport
mport=$(h_free_port 35000 2000)
m_conf "$mport" 100 >idemd.conf
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log "metrics: serving http://127.0.0.1:$mport/metrics" 1 30
h_wait_log idemd.log "drained" 1 30
m_wait "idemd_workers_consuming{queue=\"$q\"}" 1 30
h_assert_eq "$(m_value "idemd_messages_total{queue=\"$q\",outcome=\"ok\"}")" 500 "ok after reload"
h_assert_eq "$(m_value "idemd_worker_restarts_total{queue=\"$q\",outcome=\"crash\"}")" 2 \
    "crashes after reload"
curl -s --max-time 2 "http://127.0.0.1:$oldport/metrics" >/dev/null && h_fail "old address still served"
out=$(h_gen n 1 20 | h_mq publish -r "$q")
h_assert_eq "$out" "published 20 confirmed 20" "publisher (after reload)"
m_wait "idemd_messages_total{queue=\"$q\",outcome=\"ok\"}" 520 30
m_scrape >scrape2.txt
promtool check metrics <scrape2.txt >promtool.log 2>&1 || { cat promtool.log; h_fail "promtool check metrics (2)"; }

h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_sql "SELECT COUNT(*), MAX(n) FROM effects WHERE queue = '$q'")" $'520\t1' "effects"
echo "t_metrics: ok"
