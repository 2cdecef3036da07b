# t_reconcile_watchdog: a reconcile() longer than the watchdog interval but within reconcile_timeout keeps the WATCHDOG=1 pings going; one past the timeout is killed by it, and the pings go on.
#
# WATCHDOG_USEC=2000000 as WatchdogSec=2s would set it (see t_systemd_notify): the supervisor
# pings every second while every worker showed progress within the last second. A 6 s
# reconcile() used to stop the pings (systemd would have killed every queue).
db=t_reconcile_watchdog
q=t_reconcile_watchdog.q
h_new_db "$db"

h_notify_wrapper 2000000 # WatchdogSec=2s


trap h_notify_stop EXIT

# $1 reconcile_timeout, $2 reconcile() duration in ms. One run per lease: interval 3600 s.
rw_conf()
{
    h_conf_common "$db" |
        sed "s/shutdown_timeout = 30;/shutdown_timeout = 30; reconcile_interval = 3600; reconcile_timeout = $1;/"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; settings = { reconcile_sleep_ms = $2; }; } );
CONF
}

# The WATCHDOG=1 pings of $1 between epoch $2 and $3: at least $4 of them, no gap over 1.9 s.
rw_check_pings()
{
    local n
    n=$(h_notify_times "$1" WATCHDOG=1 | awk -v a="$2" -v b="$3" '$1 >= a && $1 <= b' | wc -l)
    echo "WATCHDOG=1 pings from $2 to $3: $n"
    ((n >= $4)) || h_fail "only $n WATCHDOG=1 pings while reconcile() ran (want $4)"
    h_notify_times "$1" WATCHDOG=1 | awk -v a="$2" -v b="$3" '$1 >= a - 1.9 && $1 <= b + 1.9' |
        awk 'NR > 1 { d = $1 - p; if (d > 1.9) { printf "gap %.3f s at %s\n", d, $1; bad++ } }
             { p = $1 } END { exit bad > 0 }' ||
        h_fail "a WATCHDOG=1 gap over 1.9 s while reconcile() ran (WATCHDOG_USEC is 2 s)"
}

# ---------- run 1: a 6 s reconcile() within reconcile_timeout = 30 ----------
rw_conf 30 6000 >idemd.conf
h_notify_start notify.log
IDEMD=$PWD/idemd-notify h_daemon_start idemd.conf idemd.log
h_wait_sql "SELECT COUNT(*) FROM reconcile_runs WHERE ended_at IS NOT NULL" 1 40
h_wait_log idemd.log 'reconcile: handler counter done in [0-9]+ ms' 1 10 ||
    h_fail "reconcile() did not end"
done_line=$(grep -E -m1 'reconcile: handler counter done in [0-9]+ ms' idemd.log)
took_ms=$(grep -oE 'done in [0-9]+' <<<"$done_line" | grep -oE '[0-9]+')
((took_ms >= 6000)) || h_fail "reconcile() took $took_ms ms, expected at least 6000"
t_end=$(h_log_epoch "$done_line")
t_begin=$(awk -v e="$t_end" -v t="$took_ms" 'BEGIN { printf "%.3f", e - t / 1000 }')
# A message during the run waits for it, then is handled: the worker was alive all along.
out=$(h_gen m 1 5 | h_mq publish -r "$q")
h_assert_eq "$out" "published 5 confirmed 5" "publisher"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$q'" 5 30
h_wait_log notify.log ' WATCHDOG=1$' 3 10 || h_fail "no WATCHDOG=1 pings after the run"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_notify_stop
rw_check_pings notify.log "$t_begin" "$t_end" 4
h_assert_eq "$(h_count_log idemd.log 'withholding watchdog ping')" 0 "withheld pings (6 s reconcile)"
h_assert_eq "$(h_count_log idemd.log 'killed')" 0 "workers killed (6 s reconcile)"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM reconcile_runs WHERE ended_at IS NOT NULL")" 1 "committed runs"

# ---------- run 2: reconcile_timeout = 4 ends a 60 s reconcile(); the pings never stop ----------
h_sql "DELETE FROM idemd_lease"
h_sql "DELETE FROM reconcile_runs"
rw_conf 4 60000 >idemd2.conf
h_notify_start notify2.log
IDEMD=$PWD/idemd-notify h_daemon_start idemd2.conf idemd2.log
h_wait_log idemd2.log "worker $q#0 \(pid [0-9]+\) killed: reconcile\(\) ran longer than reconcile_timeout = 4 s" 1 40 ||
    h_fail "reconcile_timeout did not end the run"
kill_line=$(grep -E -m1 'killed: reconcile\(\) ran longer' idemd2.log)
t_kill=$(h_log_epoch "$kill_line")
# The restarted worker consumes; the killed worker's lease keeps reconcile off meanwhile.
out=$(h_gen k 1 5 | h_mq publish -r "$q")
h_assert_eq "$out" "published 5 confirmed 5" "publisher (run 2)"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$q'" 10 30
h_wait_log notify2.log ' WATCHDOG=1$' 6 10 || h_fail "too few WATCHDOG=1 pings in run 2"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM (run 2)"
h_notify_stop
t_start=$(awk -v e="$t_kill" 'BEGIN { printf "%.3f", e - 4 }')
rw_check_pings notify2.log "$t_start" "$t_kill" 2
h_assert_eq "$(h_count_log idemd2.log 'withholding watchdog ping')" 0 "withheld pings (killed reconcile)"
h_assert_eq "$(h_count_log idemd2.log 'killed: reconcile')" 1 "reconcile kills"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM reconcile_runs")" 0 "committed runs of a killed reconcile"
echo "t_reconcile_watchdog: ok"
