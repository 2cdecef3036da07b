# t_idemctl_replay_trail: dlq list and dlq replay --dry-run say whether a letter's id is already recorded for its consumer (applied / not-applied; unknown under dedup = "none"); replay skips an applied letter (it stays, one line says why) unless --force; every replayed letter gets an idemd_replay row (who, host, id, source, target, signature, applied, forced) that dlq history lists newest first (text, --json, --limit, QUEUE); without the table replay refuses unless --force; sql/013 applied twice is harmless.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_ictl_trail
q=t_ictl_trail.q
dlq=$q.dlq
qn=t_ictl_trail.none # dedup = "none": no records, applied is unknown
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
c_fresh_queues $q $dlq $qn $qn.dlq
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 1; },
  { name = "$qn"; handler = "$H_TEST_PLUGINS/counter.so"; dedup = "none"; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
# As an operator without sudo, unless a step sets SUDO_USER.
ctl() { env -u SUDO_USER "$IDEMCTL" -c idemd.conf "$@"; }
me=$(id -un)
host=$(hostname)
t=$'\t'

# r1 and r2 are dead-lettered (rejected until fixed); r1's id is then recorded for consumer $q,
# as if an edited copy had been applied meanwhile. n1 is a letter of the dedup = "none" queue.
out=$(printf 'r1\treject-until-fixed\nr2\treject-until-fixed\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 2 confirmed 2" "publish r1 r2"
out=$(printf 'n1\treject-until-fixed\n' | h_mq publish -r "$qn")
h_wait_depth "$dlq" 2 30 || h_fail "r1 and r2 were not dead-lettered"
h_wait_depth "$qn.dlq" 1 30 || h_fail "n1 was not dead-lettered"
h_sql "INSERT INTO msg_id_record (consumer, msg_id) VALUES ('$q', 'r1')"
h_sql "INSERT INTO counter_flags VALUES ('fixed')"

# list: column 10 (and .applied, .consumer in JSON).
out=$(ctl dlq list "$dlq")
echo "$out"
h_assert_eq "$(cut -f1,10 <<<"$out" | tr '\t\n' ': ')" "r1:applied r2:not-applied " "list: applied"
out=$(ctl --json dlq list "$dlq")
h_assert_eq "$(jq -r '[.letters[] | "\(.id):\(.consumer):\(.applied)"] | join(" ")' <<<"$out")" \
    "r1:$q:true r2:$q:false" "list --json: applied"
out=$(ctl dlq list "$qn.dlq")
h_assert_eq "$(cut -f1,9,10 <<<"$out")" "n1${t}verified${t}unknown" "list: dedup none: unknown"

# --dry-run: what would happen, nothing done.
rc=0
out=$(ctl dlq replay "$dlq" --all --dry-run) || rc=$?
echo "$out"
h_assert_eq "$rc" 0 "--dry-run: exit status"
h_assert_eq "$(sed -n 1p <<<"$out" | cut -f1-4)" "r1${t}verified${t}applied${t}skip" "--dry-run: r1"
h_assert_eq "$(sed -n 2p <<<"$out")" "r2${t}verified${t}not-applied${t}replay${t}${t}$q${t}-" "--dry-run: r2"
h_assert_eq "$(sed -n 3p <<<"$out")" \
    "would replay 1 of 2 dead letters in $dlq (2 matched, 1 refused or skipped); nothing was replayed (--dry-run)" \
    "--dry-run: summary"
out=$(ctl --json dlq replay "$dlq" --all --dry-run)
h_assert_eq "$(jq -r '[.would_replay, ([.letters[] | "\(.id):\(.action):\(.routing_key)"] | join(" "))] | @tsv' <<<"$out")" \
    "1${t}r1:skip:null r2:replay:$q" "--dry-run --json"
h_wait_depth "$dlq" 2 10
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_replay")" 0 "--dry-run wrote no trail"

# replay: r1 is skipped and stays (one line says why), r2 is replayed and applied.
rc=0
out=$(ctl dlq replay "$dlq" --all 2>replay.err) || rc=$?
cat replay.err >&2
h_assert_eq "$rc:$out" "4:replayed 1 of 2 dead letters in $dlq (2 matched, 1 refused and kept: see above)" "replay --all"
h_assert_eq "$(h_count_log replay.err "^idemctl: SKIPPED: dead letter r1 \(queue '$q'\): its id is already recorded for consumer '$q' in table msg_id_record.*--force")" 1 \
    "r1: skipped, saying why"
h_wait_sql "SELECT n FROM effects WHERE queue = '$q' AND msg_id = 'r2'" 1 30 || h_fail "r2 was not applied"
h_wait_depth "$dlq" 1 10 || h_fail "r1 is not back in $dlq"
h_assert_eq "$(h_depth "$q")" 0 "$q got nothing for r1"
h_assert_eq "$(h_sql "SELECT os_user, IFNULL(sudo_user, '-'), db_user, host, letter_id, source_queue,
    CONCAT('[', target_exchange, ']'), target_routing_key, consumer, signature, applied, forced FROM idemd_replay")" \
    "$me$t-${t}root@localhost$t$host${t}r2$t$dlq$t[]$t$q$t$q${t}verified${t}0${t}0" "the trail row of r2"

# --force replays r1 anyway; the daemon acks it as a duplicate (no second effect).
rc=0
out=$(SUDO_USER=alice "$IDEMCTL" -c idemd.conf dlq replay "$dlq" --id r1 --force 2>force.err) || rc=$?
cat force.err >&2
h_assert_eq "$rc:$out" "0:replayed 1 of 1 dead letters in $dlq (1 matched)" "replay r1 --force"
h_assert_eq "$(h_count_log force.err "FORCED: dead letter r1 was already applied")" 1 "r1: forced, said"
h_wait_depth "$dlq" 0 10
h_wait_log idemd.log "outcome=duplicate queue=$q .*id=r1" 1 30 || h_fail "r1 was not acked as a duplicate"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id = 'r1'")" 0 "r1 applied no effect"
h_assert_eq "$(h_sql "SELECT letter_id, IFNULL(sudo_user, '-'), applied, forced FROM idemd_replay ORDER BY id")" \
    "r2$t-${t}0${t}0"$'\n'"r1${t}alice${t}1${t}1" "the trail rows"

# dlq history: newest first; text columns time, operator, db user, host, id, source, exchange,
# routing key, consumer, signature, applied, forced.
out=$(ctl dlq history)
echo "$out"
h_assert_eq "$(wc -l <<<"$out")" 2 "history: two rows"
h_assert_eq "$(sed -n 1p <<<"$out" | cut -f2-)" \
    "$me(alice)${t}root@localhost$t$host${t}r1$t$dlq$t\"\"$t$q$t$q${t}verified${t}applied${t}forced" "history: r1 first"
h_assert_eq "$(sed -n 2p <<<"$out" | cut -f2-)" \
    "$me${t}root@localhost$t$host${t}r2$t$dlq$t\"\"$t$q$t$q${t}verified${t}not-applied$t-" "history: then r2"
grep -qE "^20[0-9-]+ [0-9:.]+$t" <<<"$out" || h_fail "history: no time column"
h_assert_eq "$(ctl dlq history --limit 1 | cut -f5)" r1 "history --limit 1"
out=$(ctl --json dlq history "$dlq")
h_assert_eq "$(jq -r '[.replays[] | "\(.id):\(.os_user):\(.sudo_user):\(.applied):\(.forced):\(.target_routing_key)"] | join(" ")' <<<"$out")" \
    "r1:$me:alice:true:true:$q r2:$me:null:false:false:$q" "history --json"
rc=0
out=$(ctl dlq history "$qn.dlq") || rc=$?
h_assert_eq "$rc:$out" "1:" "history of a queue without replays"

# sql/013 applied twice: harmless, the rows stay.
for i in 1 2; do h_mysql "$db" <"$H_ROOT/sql/013_idemd_replay.sql" || h_fail "sql/013, time $i"; done
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_replay")" 2 "rows after sql/013 twice"

# Without the table: replay refuses (nothing moves) unless --force, which warns.
h_sql "RENAME TABLE idemd_replay TO idemd_replay_away"
rc=0
ctl dlq replay "$qn.dlq" --all >/dev/null 2>notrail.err || rc=$?
h_assert_eq "$rc" 3 "no trail table: exit status"
h_assert_eq "$(h_count_log notrail.err "there is no table idemd_replay.*nothing was replayed.*sql/013_idemd_replay.sql")" 1 \
    "no trail table: why"
h_assert_eq "$(h_depth "$qn.dlq")" 1 "n1 stays"
out=$(ctl dlq replay "$qn.dlq" --all --force 2>notrail.err)
h_assert_eq "$out" "replayed 1 of 1 dead letters in $qn.dlq (1 matched)" "no trail table, --force"
h_assert_eq "$(h_count_log notrail.err "WARNING: replaying without a trail")" 1 "no trail table, --force: warned"
h_wait_sql "SELECT n FROM effects WHERE queue = '$qn' AND msg_id = 'n1'" 1 30 || h_fail "n1 was not applied"
h_sql "RENAME TABLE idemd_replay_away TO idemd_replay"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_replay")" 2 "no row without the table"

h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE n <> 1")" 0 "no effect applied twice"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_idemctl_replay_trail: ok"
