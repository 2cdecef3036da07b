# t_retention_load: under a steady load (the queue never idle), retention deletes old records in short slices that take at most a tenth of the worker's time, and in slices of about a second when idle.
db=t_retention_load
q=t_retention_load.q
old=150000 # backdated records of this consumer: more than one slice deletes
total=12000 # 24 s of load at 500 messages/s
# Each message takes its handler 3 ms: two workers are about three quarters busy, so retention,
# after its first slice, takes short ones (at most a tenth of the worker's time).
h_new_db "$db"
h_sql "INSERT INTO msg_id_record (consumer, msg_id, create_time)
       SELECT '$q', CONCAT('old', seq), NOW(3) - INTERVAL 10 DAY FROM $(h_seq "$old")"
h_sql "INSERT INTO msg_id_record (consumer, msg_id, create_time) VALUES
       ('$q', 'recent', NOW() - INTERVAL 2 DAY), ('other', 'old1', NOW() - INTERVAL 10 DAY)"
h_sql "INSERT INTO idemd_attempt (consumer, msg_id, attempts, updated_at)
       SELECT '$q', CONCAT('old', seq), 1, NOW(3) - INTERVAL 10 DAY FROM $(h_seq 1500)"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; prefetch = 100;
             record_retention_days = 5; settings = { sleep_ms = 3; }; } );
CONF
} >idemd.conf

# The load starts before the daemon, so that its workers never wait a second for a message.
h_mq declare "$q"
h_gen l 1 $total | h_mq publish -r "$q" --rate 500 >pub.txt 2>pub.err &
pub=$!
deadline=$((SECONDS + 10))
while (($(h_depth "$q") < 200)); do
    ((SECONDS < deadline)) || h_fail "the publisher did not fill the queue: $(cat pub.err)"
    sleep 0.1
done
h_daemon_start idemd.conf idemd.log
t0=$SECONDS
# Retention deletes twice while the load goes on (the publisher still running), then all of it.
old_left() { h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q' AND msg_id LIKE 'old%'"; }
seen=$old
for slice in 1 2; do
    deadline=$((SECONDS + 60))
    while (($(old_left) >= seen)); do
        ((SECONDS < deadline)) || h_fail "no retention progress ($slice) within 60 s under load"
        sleep 0.1
    done
    seen=$(old_left)
    kill -0 "$pub" 2>/dev/null || h_fail "the publisher ended before retention progress $slice: nothing proven under load"
done
h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q' AND msg_id LIKE 'old%'" 0 120 ||
    h_fail "old records still there after the load"
h_wait_sql "SELECT COUNT(*) FROM idemd_attempt" 0 5 || h_fail "old crash counts still there"
echo "retention done $((SECONDS - t0)) s after the start"

wait "$pub" || h_fail "publisher failed: $(cat pub.err)"
h_assert_eq "$(cat pub.txt)" "published $total confirmed $total" "publisher"
h_wait_sql "SELECT COUNT(*), MAX(n) FROM effects" "$total	1" 60
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'")" $((total + 1)) \
    "this consumer's records: the load's and the recent one"
h_assert_eq "$(h_sql "SELECT msg_id FROM msg_id_record WHERE consumer = 'other'")" old1 "other consumer untouched"
# One run, by one worker, whatever number of slices it took.
h_assert_eq "$(h_count_log idemd.log "retention: deleted $((old + 1500)) rows older than 5 days in [0-9]+ slice")" 1 \
    "one retention run deleted every old row"
# Every slice stopped deleting after about a second (one DELETE of 1000 rows can overshoot a little).
slices=$(grep -oE 'retention: deleted [0-9]+ rows in [0-9]+ ms|last slice [0-9]+ ms' idemd.log | grep -oE '[0-9]+ ms' || true)
echo "retention slices:" $slices
(($(wc -l <<<"$slices") >= 2)) || h_fail "$old rows deleted in one slice"
while read -r ms _; do
    ((ms <= 2500)) || h_fail "a retention slice ran $ms ms"
done <<<"$slices"
# While its last batch had messages, a slice is short and the pause after it at least nine
# times as long (at most a tenth of the worker's time); the load's slices were such.
busy=$(grep -oE 'retention: deleted [0-9]+ rows in [0-9]+ ms \([0-9]+ in this run so far\): continuing in [0-9]+ ms \(busy\)' idemd.log |
    sed -E 's/.* in ([0-9]+) ms \(.*continuing in ([0-9]+) ms.*/\1 \2/' || true)
echo "busy slices (ms, pause ms):" $busy
[[ -n "$busy" ]] || h_fail "no retention slice was taken as busy under a load of 500 messages/s"
while read -r ms gap; do
    ((gap >= 1000 && gap >= 9 * ms)) || h_fail "a busy retention slice of $ms ms was followed by a pause of $gap ms"
done <<<"$busy"
h_assert_eq "$(h_sql "SELECT owner = '' FROM idemd_lease WHERE name = 'retention:$q'")" 0 "lease row written"
h_assert_eq "$(h_sql "SELECT due_at > NOW() + INTERVAL 3500 SECOND FROM idemd_lease WHERE name = 'retention:$q'")" 1 \
    "next run due in an hour"
echo "t_retention_load: ok"
