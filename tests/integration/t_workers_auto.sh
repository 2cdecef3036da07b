# t_workers_auto: workers = "auto" starts 2, goes above them on a backlog, never above workers_max, every message once, back to workers_min when idle; workers = 1 stays 1.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_workers_auto
qa=t_workers_auto.a
qf=t_workers_auto.fixed
n=20000
nf=3000
h_new_db "$db"
c_fresh_queues "$qa" "$qf"
mport=$(h_free_port 31000 2000)
sampler=
wa_cleanup()
{
    [[ -n "$sampler" ]] && kill "$sampler" 2>/dev/null && wait "$sampler" 2>/dev/null
    true
}
trap wa_cleanup EXIT

{
    H_LOG_LEVEL=info h_conf_common "$db"
    cat <<CONF
metrics = { listen = "127.0.0.1:$mport"; };
queues = (
  { name = "$qa"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 200; batch_size = 20;
    workers_max = 4; settings = { sleep_ms = 1; }; },
  { name = "$qf"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 200; batch_size = 20;
    workers = 1; settings = { sleep_ms = 1; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

scrape() { curl -sS --max-time 5 "http://127.0.0.1:$mport/metrics"; }
# value NAME QUEUE: a gauge of one queue in a scrape on stdin.
value() { awk -v k="$1{queue=\"$2\"}" '$1 == k { print $2; f = 1 } END { if (!f) print "absent" }'; }

h_wait_log idemd.log "queue '$qa': workers = \"auto\": 2 to start, at most 4" 1 5
h_assert_eq "$(scrape | value idemd_workers_max "$qa")" 4 "the cap is workers_max"
h_assert_eq "$(scrape | value idemd_workers_auto "$qa")" 1 "the auto queue says so"
h_assert_eq "$(scrape | value idemd_workers_auto "$qf")" 0 "the fixed queue says so"

# Sample the gauges and the worker processes every 0.2 s while the backlog drains.
(
    while :; do
        s=$(scrape 2>/dev/null) || true
        printf '%s %s %s %s\n' "$(value idemd_workers "$qa" <<<"$s")" \
            "$(value idemd_workers_consuming "$qa" <<<"$s")" \
            "$(value idemd_workers "$qf" <<<"$s")" "$(value idemd_workers_consuming "$qf" <<<"$s")"
        sleep 0.2
    done >samples.txt
) &
sampler=$!

h_gen a 1 "$n" >msgs_a.txt
h_gen f 1 "$nf" >msgs_f.txt
h_assert_eq "$(h_mq publish -r "$qf" <msgs_f.txt)" "published $nf confirmed $nf" "publisher to $qf"
h_assert_eq "$(h_mq publish -r "$qa" <msgs_a.txt)" "published $n confirmed $n" "publisher to $qa"

h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$qa'" "$n" 180 ||
    h_fail "the backlog of $qa did not drain"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$qf'" "$nf" 120 ||
    h_fail "the backlog of $qf did not drain"

# The chosen count and the reason are logged.
h_wait_log idemd.log "queue '$qa': workers 2 -> 3: workers [0-9]+% busy .*adding one" 1 5
# /status and idemctl status show it.
st=$(curl -sS --max-time 5 "http://127.0.0.1:$mport/status")
h_assert_eq "$(jq -r --arg q "$qa" '.queues[] | select(.queue == $q) | "\(.workers_mode) \(.workers_max)"' <<<"$st")" \
    "auto 4" "/status: mode and cap"
h_assert_eq "$(jq -r --arg q "$qf" '.queues[] | select(.queue == $q) | "\(.workers_mode) \(.workers) \(.workers_max)"' <<<"$st")" \
    "fixed 1 1" "/status of the fixed queue"
out=$("$H_BUILD/idemctl" -c idemd.conf status 2>ctl.err) || h_fail "idemctl status: $(cat ctl.err)"
grep -qE "^$qa"$'\t'"present"$'\t'".*"$'\t'"workers=auto\(max 4\)$" <<<"$out" ||
    h_fail "idemctl status does not show auto and the cap: $out"
grep -qE "^$qf"$'\t'"present"$'\t'"consumers=1/1"$'\t' <<<"$out" ||
    h_fail "idemctl status of the fixed queue: $out"

# Idle again: back down to workers_min, one at a time.
deadline=$((SECONDS + 90))
while [[ "$(scrape | value idemd_workers "$qa")" != 1 ]]; do
    ((SECONDS < deadline)) || h_fail "auto did not come back to 1 worker: $(scrape | grep '^idemd_workers')"
    sleep 0.5
done
h_wait_log idemd.log "queue '$qa': workers 2 -> 1: .*removing one" 1 5
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null || true
sampler=

most=$(awk '$1 ~ /^[0-9]+$/ && $1 > m { m = $1 } END { print m + 0 }' samples.txt)
most_up=$(awk '$2 ~ /^[0-9]+$/ && $2 > m { m = $2 } END { print m + 0 }' samples.txt)
fixed=$(awk '$3 ~ /^[0-9]+$/ { print $3 } $4 ~ /^[0-9]+$/ && $4 > 1 { print "consuming " $4 }' samples.txt | sort -u | tr '\n' ' ')
h_log "samples: $(wc -l <samples.txt), most workers $most, most consuming $most_up; fixed queue: $fixed"
((most > 2)) || h_fail "auto never went above the 2 it starts with on a backlog of $n (samples.txt)"
((most <= 4 && most_up <= 4)) || h_fail "auto went above workers_max = 4: $most chosen, $most_up consuming"
h_assert_eq "$fixed" "1 " "workers = 1 stays exactly 1"
h_assert_eq "$(h_count_log idemd.log "queue '$qf': workers [0-9]")" 0 "no change logged for the fixed queue"

h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
for q in "$qa" "$qf"; do
    want=$n
    [[ $q == "$qf" ]] && want=$nf
    h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'")" \
        "$want"$'\t'"$want"$'\t'1 "$q: every message's effect exactly once"
    h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'")" "$want" "$q: records"
    h_assert_eq "$(h_depth "$q")" 0 "$q: depth after stop"
done
echo "t_workers_auto: ok"
