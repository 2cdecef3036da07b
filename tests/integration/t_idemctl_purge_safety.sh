# t_idemctl_purge_safety: records purge refuses a horizon under the longest retry delay of the consumers it touches plus a day, and every consumer's records without --yes; what it refuses stays.
IDEMCTL=$H_BUILD/idemctl
db=t_ictl_purge
h_new_db "$db"
# c1's longest retry delay is 2 h (floor 1d2h); c2 has the default tiers, up to 60 s (floor 1d1m).
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "t_ictl_purge.q1"; consumer = "c1"; handler = "$H_TEST_PLUGINS/counter.so";
    retry_delays_ms = [ 1000, 7200000, 60000 ]; },
  { name = "t_ictl_purge.q2"; consumer = "c2"; handler = "$H_TEST_PLUGINS/counter.so"; }
);
CONF
} >idemd.conf
chmod go= idemd.conf
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }

# Per consumer: 2 records of now, 2 of 1 day 30 min ago, 2 of 3 days ago.
for c in c1 c2; do
    h_sql "INSERT INTO msg_id_record (consumer, msg_id, create_time) VALUES
           ('$c', 'new1', NOW(3)), ('$c', 'new2', NOW(3)),
           ('$c', 'mid1', NOW(3) - INTERVAL 1470 MINUTE), ('$c', 'mid2', NOW(3) - INTERVAL 1470 MINUTE),
           ('$c', 'old1', NOW(3) - INTERVAL 3 DAY), ('$c', 'old2', NOW(3) - INTERVAL 3 DAY)"
done
counts() { h_sql "SELECT consumer, COUNT(*) FROM msg_id_record GROUP BY consumer ORDER BY consumer" | tr '\t\n' ': '; }
h_assert_eq "$(counts)" "c1:6 c2:6 " "records at the start"

# $1: expected exit status, $2: regex the error must match, rest: idemctl arguments.
refused()
{
    local want=$1 re=$2 rc=0
    shift 2
    ctl "$@" >refused.out 2>refused.err || rc=$?
    cat refused.err
    h_assert_eq "$rc" "$want" "idemctl $*: exit status"
    grep -qE -- "$re" refused.err || h_fail "idemctl $*: no '$re' in: $(cat refused.err)"
    h_assert_eq "$(counts)" "c1:6 c2:6 " "records after the refused idemctl $*"
}
refused 2 '--older-than 0s is too short: keep records at least 1d2h \(93600 s\), the longest retry delay \(7200000 ms, queue .t_ictl_purge\.q1.\) plus 1d' \
    records purge --older-than 0 --yes
refused 2 '--older-than 0s is too short' records purge --older-than 0
refused 2 '--older-than 1d1m is too short: keep records at least 1d2h' records purge --older-than 1d1m --yes
refused 2 '--older-than 1d1m is too short: keep records at least 1d2h .*queue .t_ictl_purge\.q1' \
    records purge --older-than 1d1m --consumer c1
# A consumer of no configured queue: the longest delay of them all.
refused 2 '--older-than 1d1m is too short: keep records at least 1d2h' records purge --older-than 1d1m --consumer other
refused 2 'deletes the records of every consumer \(c1, c2\): add --yes, or name one with --consumer; nothing was deleted' \
    records purge --older-than 3d
refused 2 'too short' --json records purge --older-than 1h --consumer c2

# Allowed: c2 alone from its floor (1d1m) deletes its 4 records older than that, not c1's.
h_assert_eq "$(ctl records purge --older-than 1d1m --consumer c2)" "deleted 4 records older than 86460 s" "purge c2"
h_assert_eq "$(counts)" "c1:6 c2:2 " "records after purging c2"
# Every consumer with --yes from the overall floor (1d2h): c1's 2 three-day-old records.
h_assert_eq "$(ctl --json records purge --older-than 1d2h --yes | jq -c .)" '{"deleted":2,"complete":true}' "purge all --yes"
h_assert_eq "$(counts)" "c1:4 c2:2 " "records after purging all"
echo "t_idemctl_purge_safety: ok"
