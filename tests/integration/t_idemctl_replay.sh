# t_idemctl_replay: fix a handler, replay its dead letters by reason: a second letter of an id replayed in the same pass is skipped, --force sends both and the record absorbs one; replay again: nothing doubled; kill -9 of idemctl between confirmed copies and their acks loses nothing, and the next replay acks those letters from the trail without a second copy; --id with --to QUEUE strips idemd's headers; an unroutable copy stops the replay (exit 4).
db=t_ictl_replay
q=t_ictl_replay.q
x=t_ictl_replay.x
dlq=$q.dlq # the default dead letter queue
side=t_ictl_replay.side
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
h_mq exchange "$x" -t direct
h_mq declare "$side"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 5; workers = 1;
    declare = { bindings = ( { exchange = "$x"; routing_key = "k"; } ); }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }
ids() { cut -f1 <<<"$1" | tr '\n' ' '; }
dups() { h_count_log idemd.log "outcome=duplicate queue=$q "; }

# The handler is broken for f1..f5: each is sent twice and dead-lettered twice (a rejected
# message leaves no record). p1, p2 are plain rejects; g1 works.
{
    h_gen f 1 5 reject-until-fixed
    h_gen f 1 5 reject-until-fixed
    printf 'p1\treject\np2\treject\ng1\tgood\n'
} >pub.txt
out=$(h_mq publish -e "$x" -r k <pub.txt)
h_assert_eq "$out" "published 13 confirmed 13" "publish"
h_wait_depth "$dlq" 12 60
h_wait_sql "SELECT GROUP_CONCAT(msg_id) FROM effects" "g1" 10
all=$(ctl dlq list "$dlq")
h_assert_eq "$(cut -f5,6 <<<"$all" | sort -u)" "$x"$'\tk' "original exchange and routing key"
# Attempts rows the replay must clear (f1) and leave alone (p1: not replayed).
h_sql "INSERT INTO idemd_attempt (consumer, msg_id, attempts) VALUES ('$q', 'f1', 3), ('$q', 'p1', 2)"

# Fix the handler, replay by reason: the first letter of each id goes; the second, of an id
# this pass replayed already, is skipped (deterministically, whether or not the first copy was
# applied yet) and stays. --dry-run first: the same decisions, nothing done.
h_sql "INSERT INTO counter_flags VALUES ('fixed')"
out=$(ctl dlq replay "$dlq" --reason 'until-fixed' --to-original --dry-run)
h_assert_eq "$(sed '/^would replay /d; /^plan: /d' <<<"$out" | cut -f1,4 | sort | tr '\t\n' ': ')" \
    "f1:replay f1:skip f2:replay f2:skip f3:replay f3:skip f4:replay f4:skip f5:replay f5:skip " "--dry-run"
rc=0
out=$(ctl dlq replay "$dlq" --reason 'until-fixed' --to-original 2>pass.err) || rc=$?
h_assert_eq "$rc:$out" "4:replayed 5 of 12 dead letters in $dlq (10 matched, 5 refused and kept: see above)" \
    "replay by reason"
h_assert_eq "$(h_count_log pass.err "^idemctl: SKIPPED: dead letter f[1-5] .*replayed earlier in this pass")" 5 \
    "the second letters: skipped"
h_wait_sql "SELECT COUNT(*), SUM(n) FROM effects WHERE msg_id LIKE 'f%'" $'5\t5' 30
h_wait_depth "$dlq" 7 10
# --force sends the second letters too: five copies, absorbed by the record.
out=$(ctl dlq replay "$dlq" --reason 'until-fixed' --to-original --force 2>/dev/null)
h_assert_eq "$out" "replayed 5 of 7 dead letters in $dlq (5 matched)" "replay by reason --force"
h_wait_sql "SELECT COUNT(*), SUM(n) FROM effects WHERE msg_id LIKE 'f%'" $'5\t5' 30
h_wait_log idemd.log "outcome=duplicate queue=$q " 5 30
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE msg_id LIKE 'f%'")" 5 "records of f1..f5"
h_assert_eq "$(h_sql "SELECT msg_id FROM idemd_attempt")" "p1" "attempts rows left"
h_wait_depth "$dlq" 2 10
h_assert_eq "$(ids "$(ctl dlq list "$dlq")")" "p1 p2 " "dead letters left, in order"
h_assert_eq "$(ctl lookup f1 f5 | cut -f1,3)" $'f1\tprocessed\nf5\tprocessed' "lookup after the replay"

# Replay again: nothing matches, nothing is published, nothing doubles.
rc=0
out=$(ctl dlq replay "$dlq" --reason 'until-fixed') || rc=$?
h_assert_eq "$rc:$out" "1:replayed 0 of 2 dead letters in $dlq (0 matched)" "second replay"
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n) FROM effects")" $'6\t6' "effects after the second replay"

# kill -9 between the confirmed copies and their acks (k1..k4 are one batch): their copies are
# applied and their dead letters stay, with trail rows that say 'confirmed'; the next replay
# acks them without a second copy.
h_sql "DELETE FROM counter_flags"
out=$(h_gen k 1 4 reject-until-fixed | h_mq publish -e "$x" -r k)
h_assert_eq "$out" "published 4 confirmed 4" "publish k1..k4"
h_wait_depth "$dlq" 6 60
h_sql "INSERT INTO counter_flags VALUES ('fixed')"
"$IDEMCTL" -c idemd.conf dlq replay "$dlq" --reason 'until-fixed' --slow-ms 60000 >slow.out 2>slow.err &
ctl_pid=$!
h_wait_log slow.err "idemctl: replayed k4, acking in" 1 30
h_wait_sql "SELECT COUNT(*), SUM(n) FROM effects WHERE msg_id LIKE 'k%'" $'4\t4' 30
kill -KILL "$ctl_pid"
wait "$ctl_pid" 2>/dev/null || true
h_wait_depth "$dlq" 6 30
h_assert_eq "$(ids "$(ctl dlq list "$dlq")")" "p1 p2 k1 k2 k3 k4 " "dead letters after kill -9, in order"
h_assert_eq "$(h_sql "SELECT GROUP_CONCAT(state ORDER BY letter_id) FROM idemd_replay WHERE letter_id LIKE 'k%'")" \
    "confirmed,confirmed,confirmed,confirmed" "trail after kill -9"
d0=$(dups)
rc=0
out=$(ctl --json dlq replay "$dlq" --reason 'until-fixed' 2>kill.err) || rc=$?
h_assert_eq "$rc:$(jq -r '[.scanned, .matched, .replayed, .refused, .already_back, .complete] | @tsv' <<<"$out")" \
    $'0:6\t4\t4\t0\t4\ttrue' "replay after kill -9"
h_assert_eq "$(tail -1 kill.err)" \
    "replayed 0, skipped 0, failed 0, already back 4 (acked from the trail: their copies went back before an interruption)" \
    "replay after kill -9: the count"
h_wait_depth "$dlq" 2 10
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n) FROM effects WHERE msg_id LIKE 'k%'")" $'4\t4' "k1..k4 applied once"
h_assert_eq "$(h_sql "SELECT GROUP_CONCAT(state ORDER BY letter_id) FROM idemd_replay WHERE letter_id LIKE 'k%'")" \
    "acked,acked,acked,acked" "trail after the rerun"
h_assert_eq "$(dups)" "$d0" "no duplicate delivered for k1..k4"

# --id with --to QUEUE: the copy goes to that queue through the default exchange, without
# idemd's headers; p2 stays.
out=$(ctl dlq replay "$dlq" --id p1 --to "$side")
h_assert_eq "$out" "replayed 1 of 2 dead letters in $dlq (1 matched)" "replay --id p1 --to"
h_wait_depth "$side" 1 10
got=$(h_mq get "$side")
echo "$got"
h_assert_eq "$(cut -f1,2 <<<"$got")" $'p1\treject' "copy in $side"
# idemd-publish-seq is the replay's own publish number (returns are matched by it), not a kept header.
hdrs=$(cut -f3 <<<"$got" | tr ';' '\n' | { grep -v '^idemd-publish-seq=' || true; })
[[ "$hdrs" != *idemd-* && "$hdrs" != *x-death* ]] || h_fail "the copy kept failure headers: $hdrs"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_attempt")" 0 "p1's attempts row cleared"

# A copy nothing routes is refused: the replay stops with exit 4 and p2 stays.
rc=0
out=$(ctl dlq replay "$dlq" --all --to no.such.queue 2>unroutable.err) || rc=$?
h_assert_eq "$rc" 4 "unroutable replay: exit status"
grep -q "not confirmed; the dead letter stays" unroutable.err || h_fail "unroutable: $(cat unroutable.err)"
h_wait_depth "$dlq" 1 10
h_assert_eq "$(ids "$(ctl dlq list "$dlq")")" "p2 " "p2 stays"

h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE n <> 1")" 0 "no effect applied twice"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_idemctl_replay: ok ($(dups) duplicates absorbed)"
