# t_two_workers_race: two workers, high prefetch, every id delivered 3 times interleaved: every n = 1.
# Runs once with group commit (default batch_size) and once with one transaction per message.
db=t_two_workers_race
q=t_two_workers_race.q
q1=t_two_workers_race.b1
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 1000; workers = 2; },
  { name = "$q1"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 1000; workers = 2; batch_size = 1; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

# Message k carries id w<k>, w<k-3>, w<k-7> in turn: each id's three copies sit a few
# deliveries apart, so with round-robin dispatch they reach both workers at about the same time.
awk 'BEGIN { n = 2000; for (i = 1; i <= n + 7; i++) {
        if (i <= n) printf "w%d\tbody\n", i;
        if (i > 3 && i - 3 <= n) printf "w%d\tbody\n", i - 3;
        if (i > 7 && i - 7 <= n) printf "w%d\tbody\n", i - 7 } }' >msgs.txt
h_assert_eq "$(wc -l <msgs.txt)" 6000 "message lines"
for queue in "$q" "$q1"; do
    out=$(h_mq publish -r "$queue" <msgs.txt)
    h_assert_eq "$out" "published 6000 confirmed 6000" "publisher to $queue"
done

for queue in "$q" "$q1"; do
    h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$queue'" 2000 120
    h_wait_log idemd.log "outcome=(ok|duplicate) queue=$queue " 6000 60
done
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

for queue in "$q" "$q1"; do
    h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$queue'")" \
        $'2000\t2000\t1' "$queue: effects (count, sum, max)"
    h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$queue'")" 2000 \
        "$queue: record rows"
    h_assert_eq "$(h_count_log idemd.log "outcome=ok queue=$queue ")" 2000 "$queue: ok outcomes"
    h_assert_eq "$(h_count_log idemd.log "outcome=duplicate queue=$queue ")" 4000 \
        "$queue: duplicate outcomes"
    # Both workers took part (log lines carry the worker's pid).
    pids=$(grep -E "outcome=ok queue=$queue " idemd.log | grep -oE '\[[0-9]+\]' | sort -u | wc -l) || true
    ((pids >= 2)) || h_fail "$queue: only $pids worker process(es) handled messages; expected 2"
    h_assert_eq "$(h_depth "$queue")" 0 "$queue: depth after stop"
done
echo "t_two_workers_race: ok"
