# t_two_workers_race: two workers, high prefetch, every id delivered 3 times interleaved: every n = 1.
db=t_two_workers_race
q=t_two_workers_race.q
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 1000; workers = 2; } );
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
out=$(h_mq publish -r "$q" <msgs.txt)
h_assert_eq "$out" "published 6000 confirmed 6000" "publisher"

h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'" 2000 90
h_wait_log idemd.log "outcome=(ok|duplicate) queue=$q " 6000 60
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'")" \
    $'2000\t2000\t1' "effects (count, sum, max)"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'")" 2000 "record rows"
h_assert_eq "$(h_count_log idemd.log "outcome=ok queue=$q ")" 2000 "ok outcomes"
h_assert_eq "$(h_count_log idemd.log "outcome=duplicate queue=$q ")" 4000 "duplicate outcomes"
# Both workers took part (log lines carry the worker's pid).
pids=$(grep -E "outcome=ok queue=$q " idemd.log | grep -oE '\[[0-9]+\]' | sort -u | wc -l)
((pids >= 2)) || h_fail "only $pids worker process(es) handled messages; expected 2"
h_assert_eq "$(h_depth "$q")" 0 "queue depth after stop"
echo "t_two_workers_race: ok"
