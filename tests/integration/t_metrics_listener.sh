# t_metrics_listener: one slow client holds at most 4 connections of the metrics listener, so scrapes and idemctl status still get in; a request trickled a byte at a time is cut at its 5 s deadline.
#
# 127.0.0.2 is a loopback address of its own: slowclient (tests/tools/slowclient.c) plays the
# slow client from there, curl and idemctl come from 127.0.0.1. The listener allows 16
# connections in all and used to let one client take every one, each kept open for ever by a
# byte every 500 ms (the idle timeout started again with each byte).
SLOWCLIENT=${SLOWCLIENT:-$H_BUILD/tests/tools/slowclient}
[[ -x "$SLOWCLIENT" ]] || h_fail "no slowclient at $SLOWCLIENT (make check-build)"
IDEMCTL=$H_BUILD/idemctl
db=t_metrics_listener
q=t_metrics_listener.q
h_new_db "$db"
mport=$(h_free_port 31000 2000)
{
    h_conf_common "$db"
    cat <<CONF
metrics = { listen = "127.0.0.1:$mport"; };
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

slow_pid=
sl_stop()
{
    [[ -n "$slow_pid" ]] || return 0
    kill "$slow_pid" 2>/dev/null || true
    wait "$slow_pid" 2>/dev/null || true
    slow_pid=
}
trap sl_stop EXIT

# 16 connections from 127.0.0.2, a byte every 500 ms each, for at most 12 s.
"$SLOWCLIENT" -b 127.0.0.2 -n 16 -i 500 -t 12 127.0.0.1 "$mport" >slow.out 2>slow.err &
slow_pid=$!
h_wait_log slow.out '^connected 16$' 1 10 || h_fail "slowclient did not connect: $(cat slow.err)"
# The listener takes 4 of them and closes the other 12 at once.
h_wait_log slow.out '^closed [0-9]+ after [0-9]+ ms$' 12 5 ||
    h_fail "the listener kept more than 4 connections of one client: $(cat slow.out)"
# While it holds its 4, a scrape and idemctl status from another address get in.
out=$(curl -sS --max-time 3 "http://127.0.0.1:$mport/metrics") || h_fail "scrape refused during the slow client"
grep -q '^idemd_build_info{' <<<"$out" || h_fail "scrape without idemd_build_info"
out=$("$IDEMCTL" -c idemd.conf status 2>status.err) || h_fail "idemctl status failed: $(cat status.err)"
grep -qE "^$q"$'\t' <<<"$out" || h_fail "idemctl status without the queue: $out"
grep -q 'did not answer' status.err && h_fail "idemctl status could not read the daemon: $(cat status.err)"
h_assert_eq "$(h_count_log slow.out '^closed ')" 12 "connections closed before the scrape"
wait "$slow_pid" || h_fail "slowclient failed"
slow_pid=
cat slow.out
# The 4 held ones were cut at the 5 s deadline although they never went 0.5 s without a byte.
h_assert_eq "$(h_count_log slow.out '^closed ')" 16 "connections closed in the end"
h_assert_eq "$(tail -n 1 slow.out)" "open 0" "connections still open after 12 s"
late=$(awk '/^closed / && $4 >= 1000 { print $4 }' slow.out)
h_assert_eq "$(wc -l <<<"$late")" 4 "connections held past the first second"
awk '{ if ($1 < 4500 || $1 > 7500) bad++ } END { exit bad > 0 }' <<<"$late" ||
    h_fail "held connections not cut 4.5..7.5 s after they opened: $late"
h_wait_log idemd.log 'metrics: closing a connection from 127\.0\.0\.2: no complete request within 5 s' 4 5 ||
    h_fail "the log does not name the cut connections"

# Clients that are not slow are served as before.
for _ in 1 2 3; do
    h_assert_eq "$(curl -sS --max-time 3 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$mport/status")" \
        200 "GET /status after the slow client"
done
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_metrics_listener: ok"
