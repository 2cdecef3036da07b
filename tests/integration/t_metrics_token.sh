# t_metrics_token: with metrics.token_file, /metrics and /status answer 401 (WWW-Authenticate: Bearer) without the token or with a wrong one, 200 with it; idemctl status and Prometheus (docs/monitoring.md's credentials_file) send it; a reload reads a new token; a token file others may read, or a short token, is refused naming the file and the setting.
IDEMCTL=$H_BUILD/idemctl
db=t_metrics_token
q=t_metrics_token.q
h_new_db "$db"
mport=$(h_free_port 33000 2000)
pport=$(h_free_port 35000 2000)
prom_pid=
mt_cleanup()
{
    [[ -n "$prom_pid" ]] && kill "$prom_pid" 2>/dev/null && wait "$prom_pid" 2>/dev/null
    true
}
trap mt_cleanup EXIT
tok=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
other=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
(
    umask 077
    printf '%s\n' "$tok" >token
    printf '%s\n' "$other" >other.token
)
# conf TOKEN_FILE: the case's configuration with metrics.token_file = TOKEN_FILE.
conf()
{
    h_conf_common "$db"
    cat <<CONF
metrics = { listen = "127.0.0.1:$mport";
            token_file = "$PWD/$1"; };
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; } );
CONF
}
# code PATH [CURL ARGS]: the HTTP status of GET PATH.
code() { curl -sS --max-time 3 -o /dev/null -w '%{http_code}' "${@:2}" "http://127.0.0.1:$mport$1"; }

# Token files idemd must refuse: the error names the file, its line and the setting.
check_refused()
{
    local rc=0
    conf "$1" >bad.conf
    chmod go= bad.conf
    "$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c bad.conf >bad.out 2>&1 || rc=$?
    cat bad.out
    ((rc != 0)) || h_fail "--check-config accepted $1 ($2)"
    grep -qF "bad.conf:$(grep -n token_file bad.conf | cut -d: -f1): metrics.token_file: \"$PWD/$1\" $2" bad.out ||
        h_fail "--check-config does not say '$2' for $1 with its line"
}
cp token open.token
chmod 0644 open.token
check_refused open.token "holds the metrics bearer token and others may use it (mode 0644): chmod g-w,o= it"
printf 'short-token-15b\n' >short.token
chmod 0600 short.token
check_refused short.token "holds 15 bytes: a bearer token needs at least 16"

conf token >idemd.conf
h_daemon_start idemd.conf idemd.log
h_wait_log idemd.log 'metrics: bearer token set from metrics.token_file' 1 5 || h_fail "no log of the token"
printf 'a%d\tgood\n' 1 2 3 | h_mq publish -r "$q" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM effects" 3 30

# No token, a wrong one, another scheme: 401 with WWW-Authenticate: Bearer, on every path.
for p in /metrics /status /nothing; do
    h_assert_eq "$(code "$p")" 401 "GET $p without a token"
done
curl -sS --max-time 3 -D headers.txt -o body.txt "http://127.0.0.1:$mport/metrics" || h_fail "curl"
grep -qi '^WWW-Authenticate: Bearer realm="idemd"' headers.txt || h_fail "401 without WWW-Authenticate: Bearer: $(cat headers.txt)"
grep -q 'idemd_' body.txt && h_fail "a 401 answer holds metrics"
h_assert_eq "$(code /metrics -H "Authorization: Bearer $other")" 401 "GET /metrics with a wrong token"
curl -sS --max-time 3 -D headers.txt -o /dev/null -H "Authorization: Bearer $other" "http://127.0.0.1:$mport/metrics"
grep -qi '^WWW-Authenticate: Bearer realm="idemd", error="invalid_token"' headers.txt ||
    h_fail "a wrong token without error=\"invalid_token\": $(cat headers.txt)"
h_assert_eq "$(code /metrics -H "Authorization: Bearer ${tok}x")" 401 "GET /metrics with the token and a byte more"
h_assert_eq "$(code /metrics -H "Authorization: Bearer ${tok:0:16}")" 401 "GET /metrics with a prefix of the token"
h_assert_eq "$(code /metrics -H "Authorization: Basic $tok")" 401 "GET /metrics with a Basic header"
h_assert_eq "$(code /metrics -u "u:$tok")" 401 "GET /metrics with basic credentials"
h_wait_log idemd.log 'metrics: refused a request from 127\.0\.0\.1 with 401: no Authorization header' 1 5 ||
    h_fail "the refusal is not logged"
h_assert_eq "$(h_count_log idemd.log 'metrics: refused a request')" 1 "refusals logged (one a minute)"
grep -qF "$tok" idemd.log && h_fail "the log holds the token"
grep -qF "$other" idemd.log && h_fail "the log holds the wrong token"

# The token: 200, with the metrics; the scheme's case does not matter (RFC 9110).
out=$(curl -sS --fail --max-time 3 -H "Authorization: Bearer $tok" "http://127.0.0.1:$mport/metrics") ||
    h_fail "scrape with the token failed"
grep -q "^idemd_messages_total{queue=\"$q\",outcome=\"ok\"} 3$" <<<"$out" || h_fail "scrape without 3 ok: $out"
h_assert_eq "$(code /metrics -H "authorization: bearer $tok")" 200 "GET /metrics, scheme in lower case"
h_assert_eq "$(code /status -H "Authorization: Bearer $tok")" 200 "GET /status with the token"
h_assert_eq "$(code /nothing -H "Authorization: Bearer $tok")" 404 "GET /nothing with the token"

# idemctl status reads the token file through the config and sends it.
out=$("$IDEMCTL" -c idemd.conf status 2>status.err) || h_fail "idemctl status failed: $(cat status.err)"
cat status.err
grep -qE "^$q"$'\t'"present"$'\t'".*workers_up=1/1" <<<"$out" || h_fail "idemctl status without the daemon's view: $out"
grep -q 'did not answer' status.err && h_fail "idemctl status could not read the daemon: $(cat status.err)"
# With another token it says why it got nothing, and exits with the partial status.
conf other.token >ctl-other.conf
rc=0
"$IDEMCTL" -c ctl-other.conf status >/dev/null 2>status.err || rc=$?
cat status.err
((rc != 0)) || h_fail "idemctl status with a wrong token exited 0"
grep -qF "did not answer GET /status: answered 401: it wants another token than metrics.token_file holds" status.err ||
    h_fail "idemctl status does not say the token was refused: $(cat status.err)"

# Prometheus with the scrape config of docs/monitoring.md (authorization.credentials_file)
# scrapes it; a job with a wrong token is down.
(
    umask 077
    printf '%s\n' "$tok" >prom.token
    printf '%s\n' "$other" >prom-wrong.token
)
awk '/^```yaml/ { b = ""; p = 1; next } p && /^```/ { if (b ~ /credentials_file/) { printf "%s", b; exit } p = 0 } p { b = b $0 "\n" }' \
    "$H_ROOT/docs/monitoring.md" >doc-scrape.yml
grep -q 'credentials_file: /etc/prometheus/idemd.token' doc-scrape.yml || h_fail "no scrape config with credentials_file in docs/monitoring.md"
{
    echo "global: { scrape_interval: 1s }"
    sed -e "s|/etc/prometheus/idemd.token|$PWD/prom.token|; s|127.0.0.1:9187|127.0.0.1:$mport|; s|scrape_interval: 15s|scrape_interval: 1s|" doc-scrape.yml
    cat <<YML
  - job_name: idemd-wrong
    authorization: { credentials_file: $PWD/prom-wrong.token }
    static_configs: [ { targets: [ "127.0.0.1:$mport" ] } ]
YML
} >prom.yml
cat prom.yml
promtool check config prom.yml >promtool.log 2>&1 || { cat promtool.log; h_fail "promtool check config"; }
# prom_start: Prometheus on prom.yml, waited for until ready.
prom_start()
{
    local deadline=$((SECONDS + 60))
    prometheus --config.file=prom.yml --storage.tsdb.path="$PWD/prom-data" \
        --web.listen-address="127.0.0.1:$pport" >>prom.log 2>&1 &
    prom_pid=$!
    until curl -sf --max-time 2 "http://127.0.0.1:$pport/-/ready" >/dev/null; do
        kill -0 "$prom_pid" 2>/dev/null || { tail prom.log; h_fail "prometheus exited"; }
        ((SECONDS < deadline)) || { tail prom.log; h_fail "prometheus not ready"; }
        sleep 0.5
    done
}
prom_start
# prom_wait QUERY WANT SECONDS: until PromQL QUERY gives WANT.
prom_wait()
{
    local deadline=$((SECONDS + $3)) got
    while :; do
        got=$(curl -sS --max-time 5 "http://127.0.0.1:$pport/api/v1/query" --data-urlencode "query=$1" |
            sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p') || true
        [[ "$got" == "$2" ]] && return 0
        ((SECONDS < deadline)) || h_fail "PromQL $1 gave '$got', expected '$2' after $3 s"
        sleep 0.5
    done
}
prom_wait "sum(idemd_messages_total{job=\"idemd\",queue=\"$q\",outcome=\"ok\"})" 3 30
prom_wait 'up{job="idemd"}' 1 10
prom_wait 'up{job="idemd-wrong"}' 0 10
h_assert_eq "$(h_count_log idemd.log 'metrics: refused a request')" 1 "refusals logged after the wrong job's scrapes (one line a minute)"

# A reload reads the file again: the new token works, the old one no longer does.
printf '%s\n' "$other" >token
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log 'metrics: bearer token set from metrics.token_file' 2 30 || h_fail "the reload did not read the new token"
h_assert_eq "$(code /metrics -H "Authorization: Bearer $other")" 200 "the new token after the reload"
h_assert_eq "$(code /metrics -H "Authorization: Bearer $tok")" 401 "the old token after the reload"
"$IDEMCTL" -c idemd.conf status >/dev/null 2>status.err || h_fail "idemctl status after the reload: $(cat status.err)"
# Prometheus 2 reads its credentials file at each scrape: the new token there, no restart, and
# both jobs are up. Prometheus 3 (3.5 in Debian sid) keeps the token it read, even across a
# SIGHUP reload of an unchanged config: it is restarted (docs/monitoring.md says so).
printf '%s\n' "$other" >prom.token.new
mv prom.token.new prom.token
if [[ $(prometheus --version 2>&1 | awk 'NR == 1 { split($3, v, "."); print v[1] }') -ge 3 ]]; then
    mt_cleanup
    prom_start
fi
since=$(date +%s)
prom_wait "up{job=\"idemd\"} == 1 and timestamp(up{job=\"idemd\"}) > $since" 1 15
prom_wait 'up{job="idemd-wrong"}' 1 10
mt_cleanup
prom_pid=
# A reload onto a token file others may read is refused; the running token stays.
chmod 0604 token
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log "reload failed, keeping the running configuration: .*metrics.token_file: \"$PWD/token\" holds the metrics bearer token and others may use it" 1 30 ||
    h_fail "a reload onto a readable token file was not refused"
h_assert_eq "$(code /metrics -H "Authorization: Bearer $other")" 200 "the token after the refused reload"
h_assert_eq "$(code /metrics)" 401 "no token after the refused reload"
chmod 0600 token

h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_sql "SELECT COUNT(*), MAX(n) FROM effects")" $'3\t1' "effects"
echo "t_metrics_token: ok"
