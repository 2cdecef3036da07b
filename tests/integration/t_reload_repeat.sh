# t_reload_repeat: 100 reloads alternating two configs: the supervisor's memory stays flat (old generations are freed), effects stay exactly once, and a log_level change reaches a running worker.
db=t_reload_repeat
qa=t_reload_repeat.a # its prefetch differs between the two configs: drained on every reload
qs=t_reload_repeat.s # identical in both: its one worker runs through every reload
h_new_db "$db"

# 100 KB of handler settings make each generation weigh: 90 kept ones would be 9 MB.
blob=$(head -c 100000 /dev/zero | tr '\0' x)
conf()
{
    H_LOG_LEVEL=$1 h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qa"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = $2; batch_size = 10; },
  { name = "$qs"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; settings = { blob = "$blob"; }; }
);
CONF
}
rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$H_DAEMON_PID/status"; }

conf info 10 >idemd.conf
h_daemon_start idemd.conf idemd.log
# The worker of qs, by the pid in its log lines ("... [PID] QUEUE#0 info: consuming ...").
qs_pid=$(awk -v q="$qs#0" '$4 == q && /consuming queue/ { gsub(/[][]/, "", $3); print $3; exit }' idemd.log)
[[ -n "$qs_pid" ]] || h_fail "no 'consuming' line from $qs#0"

# 3,300 messages (300 duplicates) to qa, paced to arrive throughout the reloads.
awk 'BEGIN { for (i = 1; i <= 3000; i++) { printf "a%d\tbody\n", i; if (i % 10 == 0) printf "a%d\tbody\n", i - 5 } }' >a.txt
h_mq publish -r "$qa" --rate 120 <a.txt >pub_a.out &
pub=$!

ready=1
for i in $(seq 1 100); do
    if ((i % 2)); then conf debug 20; else conf info 10; fi >idemd.conf
    kill -HUP "$H_DAEMON_PID"
    ready=$((ready + 1))
    h_wait_log idemd.log "main info: ready:" "$ready" 60 || h_fail "reload $i: not ready again"
    ((i == 10)) && rss10=$(rss_kb)
done
rss100=$(rss_kb)
h_log "supervisor VmRSS: ${rss10} kB after reload 10, ${rss100} kB after reload 100"
# Under ASan (SANITIZE=1) freed memory sits in its quarantine: the RSS says nothing there.
if grep -qE ' __asan_init' <<<"$(nm -D --undefined-only "$IDEMD" 2>/dev/null)"; then
    h_log "an ASan build: the RSS bound is checked by the normal build only"
else
    ((rss100 - rss10 < 2048)) ||
        h_fail "supervisor VmRSS grew by $((rss100 - rss10)) kB between reload 10 and 100"
fi
h_assert_eq "$(h_count_log idemd.log "reload: queues.$qa.prefetch changed: draining queue '$qa'")" \
    100 "drains of $qa"

# Reload 100 set info: nothing from qs's worker at debug level now. Reload 101 sets debug:
# the same worker process (no restart) logs each message it commits.
printf 's1\tbody\n' | h_mq publish -r "$qs" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qs'" 1 30
conf debug 10 >idemd.conf
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log "main info: ready:" $((ready + 1)) 60 || h_fail "reload 101: not ready again"
printf 's2\tbody\n' | h_mq publish -r "$qs" >/dev/null
h_wait_log idemd.log "\[$qs_pid\] $qs#0 debug: outcome=ok queue=$qs id=s2 " 1 30 ||
    h_fail "no debug line from the running worker $qs#0 (pid $qs_pid) after reloading to debug"
h_assert_eq "$(h_count_log idemd.log "\[$qs_pid\] $qs#0 debug: outcome=ok queue=$qs id=s1 ")" 0 \
    "debug lines of $qs#0 while at info"

wait "$pub" || h_fail "publisher failed: $(cat pub_a.out)"
h_assert_eq "$(cat pub_a.out)" "published 3300 confirmed 3300" "publisher"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$qa'" 3000 120
h_wait_depth "$qa" 0 30
kill -0 "$H_DAEMON_PID" || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$qa'")" \
    $'3000\t3000\t1' "qa effects (count, sum, max)"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$qa'")" 3000 "qa records"
h_assert_eq "$(h_sql "SELECT COUNT(*), MAX(n) FROM effects WHERE queue = '$qs'")" $'2\t1' "qs effects"
h_assert_eq "$(h_count_log idemd.log 'outcome=(retry|reject)')" 0 "no retries or rejects"
echo "t_reload_repeat: ok"
