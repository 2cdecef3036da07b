# t_metrics_public: a metrics listener on an address that is not loopback (0.0.0.0, [::], an address of this host) without metrics.token_file is a configuration error naming the file, its line and the setting, at start, in --check-config and at reload; metrics.allow_unauthenticated = true starts it with a warning; with a token it starts; loopback listeners stay open as before.
db=t_metrics_public
q=t_metrics_public.q
h_new_db "$db"
mport=$(h_free_port 33000 2000)
tok=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
(umask 077 && printf '%s\n' "$tok" >token)
# A global address of this host, when it has one (not loopback, no token: refused too).
host_addr=$(ip -o -4 addr show scope global 2>/dev/null | awk '{ sub(/\/.*/, "", $4); print $4; exit }')

# conf LISTEN [MORE]: the case's configuration with metrics.listen = LISTEN; MORE goes into the
# metrics group on a line of its own.
conf()
{
    h_conf_common "$db"
    cat <<CONF
metrics = {
  listen = "$1";
  ${2:-}
};
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; } );
CONF
}
code() { curl -sS --max-time 3 -o /dev/null -w '%{http_code}' "${@:2}" "$1"; }
want="is not a loopback address and token_file is not set: anyone who can reach it would read /metrics and /status"

# lineof FILE TEXT: the number of FILE's first line holding TEXT.
lineof() { awk -v t="$2" 'index($0, t) { print NR; exit }' "$1"; }

# refused LISTEN: --check-config and a start both fail, naming FILE:LINE: metrics.listen.
refused()
{
    local rc=0 out line
    conf "$1" >bad.conf
    line=$(lineof bad.conf 'listen =')
    out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c bad.conf 2>&1) || rc=$?
    echo "$out"
    ((rc == 1)) || h_fail "--check-config with listen $1 and no token exited $rc, expected 1"
    grep -qF "bad.conf:$line: metrics.listen: \"$1\" $want" <<<"$out" ||
        h_fail "--check-config does not name bad.conf:$line: metrics.listen for $1"
    rc=0
    timeout 30 "$IDEMD" "${H_ALLOW_ROOT[@]}" -c bad.conf >start.out 2>&1 </dev/null || rc=$?
    cat start.out
    ((rc == 1)) || h_fail "idemd with listen $1 and no token exited $rc, expected 1"
    grep -qF "bad.conf:$line: metrics.listen: \"$1\" $want" start.out ||
        h_fail "idemd does not say why it refuses listen $1"
    h_assert_eq "$(h_count_log start.out 'ready:')" 0 "ready lines of a refused start"
}
refused "0.0.0.0:$mport"
refused "[::]:$mport"
if [[ -n "$host_addr" ]]; then
    refused "$host_addr:$mport"
else
    h_log "no global IPv4 address on this host: only the wildcards were tried"
fi

# allow_unauthenticated = true says so: it starts, with a warning at the setting's line, and
# answers without a token.
conf "0.0.0.0:$mport" "allow_unauthenticated = true;" >open.conf
h_daemon_start open.conf open.log
grep -qF "warning: open.conf:$(lineof open.conf allow_unauthenticated): metrics.allow_unauthenticated: true: \"0.0.0.0:$mport\" is not a loopback address and serves /metrics and /status without a token" open.log ||
    h_fail "no warning naming open.conf:LINE: metrics.allow_unauthenticated"
h_assert_eq "$(code "http://127.0.0.1:$mport/status")" 200 "GET /status, allow_unauthenticated"
if [[ -n "$host_addr" ]]; then
    h_assert_eq "$(code "http://$host_addr:$mport/status")" 200 "GET /status from $host_addr"
fi
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# With a token it needs no more: it starts, without the warning, and wants the token.
conf "0.0.0.0:$mport" "token_file = \"$PWD/token\";" >tok.conf
h_daemon_start tok.conf tok.log
h_assert_eq "$(h_count_log tok.log 'allow_unauthenticated|is not a loopback address')" 0 \
    "warnings about the listener with a token"
h_assert_eq "$(code "http://127.0.0.1:$mport/status")" 401 "GET /status without the token"
h_assert_eq "$(code "http://127.0.0.1:$mport/status" -H "Authorization: Bearer $tok")" 200 \
    "GET /status with the token"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# Loopback as before: no token, no warning, open. A reload to 0.0.0.0 without a token is
# refused and the running listener stays.
conf "127.0.0.1:$mport" >idemd.conf
h_daemon_start idemd.conf idemd.log
h_assert_eq "$(h_count_log idemd.log 'allow_unauthenticated|is not a loopback address')" 0 \
    "warnings about a loopback listener"
h_assert_eq "$(code "http://127.0.0.1:$mport/status")" 200 "GET /status on loopback"
conf "0.0.0.0:$mport" >idemd.conf
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log "reload failed, keeping the running configuration: idemd.conf:$(lineof idemd.conf 'listen ='): metrics.listen: \"0.0.0.0:$mport\" is not a loopback" 1 20 ||
    h_fail "the reload to 0.0.0.0 without a token was not refused"
h_assert_eq "$(code "http://127.0.0.1:$mport/status")" 200 "GET /status after the refused reload"
printf 'p1\tgood\n' | h_mq publish -r "$q" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM effects" 1 30 || h_fail "no effect after the refused reload"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_metrics_public: ok"
