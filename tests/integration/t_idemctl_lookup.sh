# t_idemctl_lookup: idemctl lookup (processed and unprocessed ids, exit codes, --json), status from the broker and the database, records purge --older-than in batches, usage and connection errors.
db=t_ictl_lookup
q=t_ictl_lookup.q
dlq=t_ictl_lookup.dlq
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 20; workers = 2;
    declare = { dead_letter_queue = "$dlq"; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }

out=$(h_gen a 1 30 | h_mq publish -r "$q")
h_assert_eq "$out" "published 30 confirmed 30" "publish"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record" 30 60

# lookup: processed ids print their consumer and time; exit 0 only when all were found.
rc=0
out=$(ctl lookup a1 a30) || rc=$?
h_assert_eq "$rc" 0 "lookup a1 a30: exit status"
h_assert_eq "$(cut -f1,2,3 <<<"$out")" $'a1\t'"$q"$'\tprocessed\na30\t'"$q"$'\tprocessed' "lookup a1 a30"
rc=0
out=$(ctl lookup a2 nope) || rc=$?
h_assert_eq "$rc" 1 "lookup with an unknown id: exit status"
h_assert_eq "$(cut -f1,3 <<<"$out")" $'a2\tprocessed\nnope\tnot-processed' "lookup a2 nope"
rc=0
out=$(ctl lookup --consumer other a1) || rc=$?
h_assert_eq "$rc" 1 "lookup under another consumer: exit status"
h_assert_eq "$(cut -f2,3 <<<"$out")" $'other\tnot-processed' "lookup --consumer other a1"
# An attempts row shows up too.
h_sql "INSERT INTO idemd_attempt (consumer, msg_id, attempts) VALUES ('$q', 'a3', 2)"
rc=0
out=$(ctl --json lookup a3 missing) || rc=$?
h_assert_eq "$rc" 1 "lookup --json: exit status"
echo "$out"
h_assert_eq "$(jq -r '.ids[] | [.id, .consumer, .processed, .attempts, (.time != null)] | @tsv' <<<"$out")" \
    $'a3\t'"$q"$'\ttrue\t2\ttrue\nmissing\t'"$q"$'\tfalse\t0\tfalse' "lookup --json"

# status: consumers (one per worker), depths and the records of the last minute.
out=$(ctl status)
echo "$out"
t=$'\t'
grep -qE "^$q${t}present${t}consumers=2/2${t}ready=0${t}dead_letters=0${t}delayed=0${t}records_60s=30${t}" <<<"$out" ||
    h_fail "status line: $out"
out=$(ctl --json status)
h_assert_eq "$(jq -r '.[0] | [.queue, .consumers, .workers_configured, .records_last_60s, .attempt_rows] | @tsv' <<<"$out")" \
    "$q"$'\t2\t2\t30\t1' "status --json"

# A queue that is not there is shown as absent (its delay tiers and dead letter queue too).
sed "s/name = \"$q\"/name = \"t_ictl_lookup.absent\"/" idemd.conf >absent.conf
chmod go= absent.conf
out=$("$IDEMCTL" -c absent.conf status)
grep -qE "^t_ictl_lookup.absent${t}absent${t}consumers=0/2${t}ready=0${t}dead_letters=0${t}delayed=0${t}" <<<"$out" ||
    h_fail "status of an absent queue: $out"

# records purge: nothing is older than a day and a minute (the shortest horizon with the
# default retry delays, see t_idemctl_purge_safety); then 20 of 30 rows made old are deleted
# in batches of 7 (3 batches), the 10 new ones stay.
h_assert_eq "$(ctl records purge --older-than 1d1m --yes)" "deleted 0 records older than 86460 s" "records purge 1d1m"
h_sql "UPDATE msg_id_record SET create_time = NOW(3) - INTERVAL 2 DAY WHERE CAST(SUBSTRING(msg_id, 2) AS UNSIGNED) <= 20"
out=$(ctl -v records purge --older-than 1d12h --batch 7 --yes 2>purge.err)
h_assert_eq "$out" "deleted 20 records older than 129600 s" "records purge 1d12h"
h_assert_eq "$(h_count_log purge.err 'records purge: consumer .*: [0-9]+ deleted')" 3 "purge batches"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record")" 10 "records left"
h_assert_eq "$(ctl --json records purge --older-than 2d --consumer "$q" | jq -c .)" '{"deleted":0,"complete":true}' "records purge --json"

# Usage errors exit 2, an unreachable broker or database 3.
for args in "" "bogus" "lookup" "records purge" "records purge --older-than 3x" \
    "dlq replay $dlq" "dlq replay $dlq --all --reason x" "dlq replay $dlq --all --to $dlq" \
    "dlq list" "dlq list $dlq --all"; do
    rc=0
    # shellcheck disable=SC2086 # word splitting wanted
    ctl $args >/dev/null 2>usage.err || rc=$?
    h_assert_eq "$rc" 2 "idemctl $args: exit status"
done
sed "s/port = $AMQP_PORT;/port = 1;/" idemd.conf >nobroker.conf
rc=0
"$IDEMCTL" -c nobroker.conf status >/dev/null 2>nobroker.err || rc=$?
h_assert_eq "$rc" 3 "status without a broker: exit status"
sed "s|socket = \"$MYSQL_SOCK\";|socket = \"/nonexistent/sock\";|" idemd.conf >nodb.conf
rc=0
"$IDEMCTL" -c nodb.conf lookup a1 >/dev/null 2>nodb.err || rc=$?
h_assert_eq "$rc" 3 "lookup without a database: exit status"
rc=0
"$IDEMCTL" -c missing.conf status >/dev/null 2>noconf.err || rc=$?
h_assert_eq "$rc" 2 "missing config: exit status"

h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_idemctl_lookup: ok"
