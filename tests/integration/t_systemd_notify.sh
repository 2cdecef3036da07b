# t_systemd_notify: sd_notify as systemd sees it: READY=1 after every worker consumes, STATUS=, WATCHDOG=1 each second, STOPPING=1; a wedged worker stops the pings.
#
# There is no systemd here: NOTIFY_SOCKET points at a datagram socket owned by notifysock
# (tests/tools/notifysock.c), which prints "EPOCH.USEC pid=PID TEXT" for each datagram.
# WATCHDOG_USEC=2000000 as WatchdogSec=2s would set it; WATCHDOG_PID must be the daemon's
# own pid, so a wrapper exports its $$ and then execs idemd (same pid).
db=t_systemd_notify
qa=t_systemd_notify.a
qb=t_systemd_notify.b
qh=t_systemd_notify.hang
qs=t_systemd_notify.slow
h_new_db "$db"

h_notify_wrapper 2000000 # WatchdogSec=2s

now() { date +%s.%N; }

trap h_notify_stop EXIT

# ---------- run 1: a healthy daemon, three workers on two queues ----------
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$qa"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; },
           { name = "$qb"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; } );
CONF
} >idemd.conf
h_notify_start notify.log
IDEMD=$PWD/idemd-notify h_daemon_start idemd.conf idemd.log
pid=$H_DAEMON_PID
h_wait_log notify.log ' READY=1$' 1 10 || h_fail "no READY=1 after the log said ready"

out=$(h_gen n 1 20 | h_mq publish -r "$qa")
h_assert_eq "$out" "published 20 confirmed 20" "publisher"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qa'" 20 30
# The supervisor refreshes STATUS= every 5 s once ready.
h_wait_log notify.log 'STATUS=3/3 workers consuming; 20 processed' 1 15 ||
    h_fail "no STATUS= line counting the 20 messages"
h_wait_log notify.log ' WATCHDOG=1$' 6 15 || h_fail "fewer than 6 WATCHDOG=1 pings"
t_term=$(now)
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
sleep 0.3
h_notify_stop
cat notify.log

# Every datagram comes from the main process (NotifyAccess=main would drop the others).
others=$(awk -v p="pid=$pid" '$2 != p' notify.log | wc -l)
((others == 0)) || h_fail "$others notification(s) not from the main pid $pid"

# READY=1: once, and not before the log says every worker consumes.
mapfile -t ready < <(h_notify_times notify.log READY=1)
((${#ready[@]} == 1)) || h_fail "READY=1 sent ${#ready[@]} times"
for ctx in "$qa#0" "$qa#1" "$qb#0"; do
    line=$(grep -F " $ctx info: consuming queue " idemd.log | head -n 1) ||
        h_fail "no 'consuming' line for worker $ctx"
    t=$(h_log_epoch "$line")
    awk -v r="${ready[0]}" -v c="$t" 'BEGIN { exit !(r >= c) }' ||
        h_fail "READY=1 at ${ready[0]} came before worker $ctx consumed at $t"
    echo "worker $ctx consuming at $t, READY=1 at ${ready[0]}"
done

# STATUS=: a starting line before READY=1, counting lines after it.
st_first=$(grep -m1 -n ' STATUS=' notify.log | cut -d: -f1)
rd_line=$(grep -m1 -n ' READY=1$' notify.log | cut -d: -f1)
((st_first < rd_line)) || h_fail "no STATUS= line before READY=1"
(($(h_count_log notify.log ' STATUS=[0-9]+/[0-9]+ workers consuming; ') >= 2)) ||
    h_fail "fewer than 2 STATUS= lines with worker counts"

# WATCHDOG=1 about every second (half of WATCHDOG_USEC), never a gap near the 2 s limit.
mapfile -t wd < <(h_notify_times notify.log WATCHDOG=1)
((${#wd[@]} >= 6)) || h_fail "only ${#wd[@]} WATCHDOG=1 pings"
printf '%s\n' "${wd[@]}" | awk 'NR > 1 { d = $1 - p; printf "watchdog gap %.3f s\n", d;
        if (d < 0.5 || d > 1.9) bad++ } { p = $1 } END { exit bad > 0 }' ||
    h_fail "a WATCHDOG=1 gap outside 0.5..1.9 s (WATCHDOG_USEC is 2 s)"

# STOPPING=1: once, after SIGTERM.
mapfile -t stopping < <(h_notify_times notify.log STOPPING=1)
((${#stopping[@]} == 1)) || h_fail "STOPPING=1 sent ${#stopping[@]} times"
awk -v s="${stopping[0]}" -v t="$t_term" 'BEGIN { exit !(s >= t) }' ||
    h_fail "STOPPING=1 at ${stopping[0]} before SIGTERM at $t_term"

# ---------- run 2: a worker shows progress every 1.3 s: more than half the interval ----------
# Each message takes 1.3 s, so a check may find the worker's last progress older than 1 s and
# hold the ping back; it must go out as soon as the worker moves again, not a whole half
# interval later (that made 2 s gaps, a watchdog kill under systemd, for a working service).
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$qs"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1;
             settings = { sleep_ms = 1300; }; } );
CONF
} >slow.conf
h_notify_start notify-slow.log
IDEMD=$PWD/idemd-notify h_daemon_start slow.conf slow.log
h_wait_log notify-slow.log ' WATCHDOG=1$' 2 10 || h_fail "no WATCHDOG=1 pings before the slow messages"
out=$(h_gen s 1 6 | h_mq publish -r "$qs")
h_assert_eq "$out" "published 6 confirmed 6" "publisher (slow)"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qs'" 6 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM (slow messages)"
h_notify_stop
(($(h_count_log slow.log 'withholding watchdog ping') >= 1)) ||
    h_fail "no ping was held back: the 1.3 s messages did not test anything"
mapfile -t wd < <(h_notify_times notify-slow.log WATCHDOG=1)
printf '%s\n' "${wd[@]}" | awk 'NR > 1 { d = $1 - p; printf "watchdog gap %.3f s (slow messages)\n", d;
        if (d < 0.5 || d > 1.9) bad++ } { p = $1 } END { exit bad > 0 }' ||
    h_fail "a WATCHDOG=1 gap outside 0.5..1.9 s while a worker showed progress every 1.3 s"

# ---------- run 3: a handler hangs; the supervisor must withhold the pings ----------
{
    h_conf_common "$db" | sed 's/shutdown_timeout = 30/shutdown_timeout = 2/'
    cat <<CONF
queues = ( { name = "$qh"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1;
             handler_timeout = 3600; } );
CONF
} >hang.conf
h_notify_start notify2.log
IDEMD=$PWD/idemd-notify h_daemon_start hang.conf hang.log
h_wait_log notify2.log ' WATCHDOG=1$' 3 10 || h_fail "no WATCHDOG=1 pings before the hang"
t_hang=$(now)
out=$(printf 'h1\thang\n' | h_mq publish -r "$qh")
h_assert_eq "$out" "published 1 confirmed 1" "publisher (hang)"
h_wait_log hang.log 'shows no progress for [0-9]+ ms: withholding watchdog ping' 1 10 ||
    h_fail "the supervisor never withheld a ping"
# Watch the hang for 7 s from the publish (the first withheld ping can come at once: the
# worker's last progress may be up to ~1 s older than the message).
while awk -v a="$t_hang" -v b="$(now)" 'BEGIN { exit !(b - a < 7.0) }'; do sleep 0.2; done
h_daemon_alive || h_fail "idemd died while its worker hung"
(($(h_count_log hang.log 'withholding watchdog ping') >= 4)) ||
    h_fail "pings were withheld fewer than 4 times in the 7 s after the hang began"
! grep -E "worker $qh#0 .*(killed|exited)" hang.log || h_fail "the hung worker was restarted"
t_end=$(now)
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM (hung worker)"
h_notify_stop
cat notify2.log
grep -q 'shutdown_timeout reached: killing 1 workers' hang.log || h_fail "the hung worker was not killed"

# Healthy pings before the hang, none from 2 s after it (the worker's last progress was at
# most ~1 s before the message, plus one ping period) until the stop.
before=$(h_notify_times notify2.log WATCHDOG=1 | awk -v t="$t_hang" '$1 < t' | wc -l)
late=$(h_notify_times notify2.log WATCHDOG=1 | awk -v t="$t_hang" -v e="$t_end" '$1 > t + 2.0 && $1 <= e' | wc -l)
echo "pings before the hang: $before; pings from 2 s after it: $late"
((before >= 3)) || h_fail "only $before pings before the hang"
((late == 0)) || h_fail "$late WATCHDOG=1 ping(s) while the worker was wedged"
# The killed worker's transaction rolled back: no effect for h1.
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qh'")" 0 "effects of the hung message"
h_mq delete "$qh" >/dev/null 2>&1 || true
echo "t_systemd_notify: ok"
