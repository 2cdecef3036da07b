# t_idemctl_replay_pace: dlq replay of 2000 letters with --rate and --batch: --dry-run prints the plan (letters, route, rate, time) and moves nothing; kill -9 between a batch's confirmed copies and their acks, then the same command again: it acks those 100 from the trail without a second copy and replays the rest, paced; every letter applied once, no duplicate delivered, the DLQ empty, one acked trail row per letter, the final count line; progress only on a terminal; sql/014 applies twice, and without it replay refuses.
db=t_ictl_pace
q=t_ictl_pace.q
dlq=$q.dlq
side=t_ictl_pace.side
N=${T_PACE_N:-2000}
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 100; workers = 2; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }
dups() { h_count_log idemd.log "outcome=duplicate queue=$q "; }
effects() { h_sql "SELECT COUNT(*), COALESCE(SUM(n), 0) FROM effects"; }

# N letters, rejected until fixed: all in the dead letter queue.
out=$(h_gen m 1 $N reject-until-fixed | h_mq publish -r "$q")
h_assert_eq "$out" "published $N confirmed $N" "publish"
h_wait_depth "$dlq" $N 300 || h_fail "the letters did not all reach $dlq"
h_sql "INSERT INTO counter_flags VALUES ('fixed')"

# Bad --rate values are refused before anything is read.
rc=0
ctl dlq replay "$dlq" --all --rate 0 2>rate.err || rc=$?
h_assert_eq "$rc" 2 "--rate 0: usage"
rc=0
ctl dlq replay "$dlq" --all --rate 5/m 2>rate.err || rc=$?
h_assert_eq "$rc" 2 "--rate 5/m: usage"

# --dry-run: the plan, nothing moved.
rc=0
out=$(ctl dlq replay "$dlq" --all --rate 500/s --batch 100 --dry-run 2>dry.err) || rc=$?
h_assert_eq "$rc" 0 "--dry-run: exit status"
h_assert_eq "$(grep '^plan: ' <<<"$out")" \
    "plan: $N letters of $dlq go back: $N to exchange '' routing key '$q'
plan: at 500/s in batches of 100: about $(((N + 499) / 500))s" "--dry-run: the plan"
h_assert_eq "$(grep -c $'\treplay\t' <<<"$out")" $N "--dry-run: one line per letter"
jout=$(ctl --json dlq replay "$dlq" --all --rate 500 --dry-run)
h_assert_eq "$(jq -r '[.would_replay, .plan.replay, .plan.rate, .plan.batch, .plan.seconds, .plan.targets[0].routing_key] | @tsv' <<<"$jout")" \
    "$N"$'\t'"$N"$'\t500\t100\t'"$(((N + 499) / 500))"$'\t'"$q" "--dry-run --json: the plan"
h_assert_eq "$(h_depth "$dlq"):$(h_depth "$q"):$(effects)" "$N:0:0"$'\t'"0" "--dry-run moved nothing"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_replay")" 0 "--dry-run wrote no trail"

# kill -9 while the third batch's copies are confirmed and its letters not yet acked
# (--slow-ms waits there): batches 1 and 2 are acked, batch 3 is back in the DLQ.
"$IDEMCTL" -c idemd.conf dlq replay "$dlq" --all --rate 2000/s --batch 100 --slow-ms 8000 \
    >kill.out 2>kill.err &
ctl_pid=$!
h_wait_log kill.err "^idemctl: replayed m[0-9]+, acking in" 300 120 || h_fail "no third batch: $(tail -3 kill.err)"
kill -KILL "$ctl_pid"
wait "$ctl_pid" 2>/dev/null || true
h_wait_depth "$dlq" $((N - 200)) 60 || h_fail "batch 3 did not come back to $dlq"
h_wait_sql "SELECT COUNT(*), SUM(n) FROM effects" $'300\t300' 60 || h_fail "the copies of 3 batches were not applied"
h_assert_eq "$(h_sql "SELECT state, COUNT(*) FROM idemd_replay GROUP BY state ORDER BY state")" \
    $'acked\t200\nconfirmed\t100' "trail after kill -9: 2 batches acked, 1 confirmed"

# The plan of a rerun: the 100 confirmed ones are only acked.
out=$(ctl dlq replay "$dlq" --all --rate 500/s --batch 200 --dry-run 2>/dev/null)
h_assert_eq "$(grep '^plan: ' <<<"$out" | head -2)" \
    "plan: $((N - 300)) letters of $dlq go back: $((N - 300)) to exchange '' routing key '$q'
plan: 100 only acked: the trail says their copies went back before a replay was cut short" \
    "--dry-run after kill -9: the plan"
h_assert_eq "$(grep -c $'\tack\t' <<<"$out")" 100 "--dry-run after kill -9: 100 ack lines"

# The same command again: goes on where it stopped, paced (at least (N - 300 - burst 100) / 500 s).
d0=$(dups)
t0=$(date +%s.%N)
rc=0
out=$(ctl dlq replay "$dlq" --all --rate 500/s --batch 200 2>rerun.err) || rc=$?
t1=$(date +%s.%N)
h_assert_eq "$rc:$out" "0:replayed $((N - 200)) of $((N - 200)) dead letters in $dlq ($((N - 200)) matched)" "rerun"
h_assert_eq "$(tail -1 rerun.err)" \
    "replayed $((N - 300)), skipped 0, failed 0, already back 100 (acked from the trail: their copies went back before an interruption)" \
    "rerun: the final count line"
awk -v a="$t0" -v b="$t1" -v min="$(((N - 400) / 500))" 'BEGIN { exit !(b - a >= min) }' || h_fail "rerun at 500/s took $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s"
[[ "$(cat rerun.err)" != *$'\r'* ]] || h_fail "progress written to a file"
# RabbitMQ 3.10's quorum queue can drop acks its channel had not passed on when the channel
# closes: such letters come back though their copies went. Their trail rows say so, and one
# more run acks them, publishing nothing.
back=$(h_depth "$dlq")
if ((back > 0)); then
    out=$(ctl dlq replay "$dlq" --all 2>again.err)
    h_assert_eq "$(tail -1 again.err)" \
        "replayed 0, skipped 0, failed 0, already back $back (acked from the trail: their copies went back before an interruption)" \
        "letters whose acks the broker lost: acked from the trail"
fi
h_wait_depth "$dlq" 0 30
h_wait_sql "SELECT COUNT(*), SUM(n) FROM effects" "$N"$'\t'"$N" 120 || h_fail "not every letter applied once"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE n <> 1")" 0 "no effect applied twice"
h_assert_eq "$(dups)" "$d0" "no duplicate delivered: the confirmed ones were not sent again"
h_assert_eq "$(h_sql "SELECT COUNT(*), COUNT(DISTINCT letter_id), SUM(state = 'acked') FROM idemd_replay")" \
    "$N"$'\t'"$N"$'\t'"$N" "one acked trail row per letter"
h_assert_eq "$(h_depth "$q")" 0 "work queue drained"

# kill -9 while a batch is being published (--rate 20/s: 100 copies take five seconds): its rows
# say 'sending', some copies went and were applied, the rest not. The same command again acks
# the applied ones from the trail, sends the others again (a copy in flight is absorbed by the
# record) and the untouched ones: each effect once, one acked row per letter.
h_sql "DELETE FROM counter_flags"
out=$(h_gen s 1 200 reject-until-fixed | h_mq publish -r "$q")
h_assert_eq "$out" "published 200 confirmed 200" "publish s1..s200"
h_wait_depth "$dlq" 200 120
h_sql "INSERT INTO counter_flags VALUES ('fixed')"
"$IDEMCTL" -c idemd.conf dlq replay "$dlq" --all --rate 20/s --batch 100 >send.out 2>send.err &
ctl_pid=$!
h_wait_sql "SELECT COUNT(*) >= 20 FROM effects WHERE msg_id LIKE 's%'" 1 60 || h_fail "no copies applied"
kill -KILL "$ctl_pid"
wait "$ctl_pid" 2>/dev/null || true
h_wait_depth "$dlq" 200 60 || h_fail "the letters did not come back after kill -9"
h_assert_eq "$(h_sql "SELECT state, COUNT(*) FROM idemd_replay WHERE letter_id LIKE 's%' GROUP BY state")" \
    $'sending\t100' "trail after kill -9 mid-publish"
applied=$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id LIKE 's%'")
rc=0
out=$(ctl dlq replay "$dlq" --all --batch 100 2>send2.err) || rc=$?
h_assert_eq "$rc:$out" "0:replayed 200 of 200 dead letters in $dlq (200 matched)" "rerun after kill -9 mid-publish"
read -r sent resumed < <(sed -nE 's/^replayed ([0-9]+), skipped 0, failed 0(, already back ([0-9]+).*)?$/\1 \3/p' send2.err)
h_assert_eq "$((sent + ${resumed:-0}))" 200 "mid-publish rerun: sent + already back"
((${resumed:-0} >= applied)) || h_fail "mid-publish rerun: only ${resumed:-0} acked from the trail, $applied were applied"
h_wait_sql "SELECT COUNT(*), SUM(n) FROM effects WHERE msg_id LIKE 's%'" $'200\t200' 120 || h_fail "s letters not applied once each"
h_assert_eq "$(h_sql "SELECT COUNT(*), COUNT(DISTINCT letter_id), SUM(state = 'acked') FROM idemd_replay WHERE letter_id LIKE 's%'")" \
    $'200\t200\t200' "mid-publish: one acked row per letter"
back=$(h_depth "$dlq")
if ((back > 0)); then # acks the broker lost, as above
    ctl dlq replay "$dlq" --all >/dev/null 2>again.err
    h_assert_eq "$(tail -1 again.err | cut -d' ' -f1-8)" "replayed 0, skipped 0, failed 0, already back $back" \
        "mid-publish: letters whose acks the broker lost"
fi
h_wait_depth "$dlq" 0 30

# On a terminal: the progress line rewritten in place, then the count. The copies go to a
# queue nothing consumes: all 300 there, once each.
h_mq declare "$side"
out=$(h_gen p 1 300 reject | h_mq publish -r "$q")
h_assert_eq "$out" "published 300 confirmed 300" "publish p1..p300"
h_wait_depth "$dlq" 300 120
script -qec "'$IDEMCTL' -c idemd.conf dlq replay '$dlq' --all --to '$side' --rate 300/s --batch 50" tty.out >/dev/null </dev/null || true
grep -qE $'\rreplayed [0-9]+/300, [0-9]+/s, eta ' tty.out || h_fail "no progress line on a terminal: $(tr '\r' '|' <tty.out | tail -c 400)"
h_assert_eq "$(h_count_log tty.out "replayed 300, skipped 0, failed 0")" 1 "terminal: the final count"
h_wait_depth "$side" 300 30
back=$(h_depth "$dlq")
if ((back > 0)); then # acks the broker lost, as above
    ctl dlq replay "$dlq" --all --to "$side" >/dev/null 2>again.err
    h_assert_eq "$(tail -1 again.err)" \
        "replayed 0, skipped 0, failed 0, already back $back (acked from the trail: their copies went back before an interruption)" \
        "terminal: letters whose acks the broker lost"
fi
h_wait_depth "$dlq" 0 30
h_assert_eq "$(h_depth "$side")" 300 "each letter once in $side"
# sql/014 applied twice is harmless; a trail table without its columns (sql/013 alone): replay
# refuses (exit 3), names sql/014 and moves nothing; with them back, old rows say 'acked'.
for i in 1 2; do h_mysql "$db" <"$H_ROOT/sql/014_idemd_replay_resume.sql" || h_fail "sql/014, time $i"; done
h_sql "ALTER TABLE idemd_replay DROP COLUMN fingerprint, DROP COLUMN state"
out=$(printf 'z1\treject\n' | h_mq publish -r "$q")
h_wait_depth "$dlq" 1 60
rc=0
ctl dlq replay "$dlq" --all >/dev/null 2>old.err || rc=$?
h_assert_eq "$rc" 3 "trail without state: exit status"
h_assert_eq "$(h_count_log old.err "no columns state and fingerprint.*nothing was replayed.*sql/014_idemd_replay_resume.sql")" 1 \
    "trail without state: why"
h_assert_eq "$(h_depth "$dlq")" 1 "trail without state: z1 stays"
h_mysql "$db" <"$H_ROOT/sql/014_idemd_replay_resume.sql" || h_fail "sql/014 on the old table"
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(state = 'acked'), COUNT(fingerprint) FROM idemd_replay")" \
    "$((N + 500))"$'\t'"$((N + 500))"$'\t0' "old rows after sql/014"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_idemctl_replay_pace: ok"
