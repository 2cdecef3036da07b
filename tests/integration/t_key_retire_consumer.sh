# t_key_retire_consumer: idemctl key retire --consumer C waits for the longest retry delay of EVERY configured queue, not only C's: a copy the old key signed may still sit in another queue's longer delay tier (issue 31, finding 5). Retire with the short queue's consumer is refused (exit 2, the long queue and its delay named, row 3 kept); once the long wait is over it retires.
db=t_key_retire_consumer
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "short.q"; consumer = "short"; handler = "$H_TEST_PLUGINS/counter.so";
             retry_delays_ms = [ 1000 ]; },
           { name = "long.q"; consumer = "long"; handler = "$H_TEST_PLUGINS/counter.so";
             retry_delays_ms = [ 1000, 7200000 ]; } );
CONF
} >idemd.conf
chmod go= idemd.conf
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }

# A promotion 30 minutes ago: short.q's floor (60 s + 1 s + 10 min) is over, long.q's
# (60 s + 2 h + 10 min) is not.
h_sql "INSERT INTO idemd_key (id, k, since) VALUES
         (1, UNHEX(SHA2('new', 256)), NOW() - INTERVAL 30 MINUTE),
         (3, UNHEX(SHA2('old', 256)), NOW() - INTERVAL 30 MINUTE)"
for who in short long; do
    rc=0
    ctl key retire --consumer "$who" >out.txt 2>err.txt || rc=$?
    cat err.txt
    h_assert_eq "$rc" 2 "retire --consumer $who after 30 minutes: exit status"
    h_assert_eq "$(cat out.txt)" "" "retire --consumer $who: nothing on stdout"
    h_assert_eq "$(h_count_log err.txt "^idemctl: key retire: --consumer $who does not narrow it: the key signs the copies of every queue")" 1 \
        "retire --consumer $who: says --consumer does not narrow the wait"
    h_assert_eq "$(h_count_log err.txt "^idemctl: key retire: the key was replaced 18[0-9][0-9] s ago; wait 1h4[0-9]m.* more: copies it signed may still sit in a delay queue \(longest retry delay 7200000 ms, queue long.q\)")" 1 \
        "retire --consumer $who: refused on long.q's delay"
    h_assert_eq "$(h_sql "SELECT id, HEX(k) = SHA2('old', 256) FROM idemd_key WHERE id = 3")" $'3\t1' \
        "row 3 kept after retire --consumer $who"
done
# Without --consumer: the same refusal.
rc=0
ctl key retire >/dev/null 2>err.txt || rc=$?
h_assert_eq "$rc" 2 "retire without --consumer after 30 minutes: exit status"
h_assert_eq "$(h_count_log err.txt "longest retry delay 7200000 ms, queue long.q")" 1 "retire: refused on long.q's delay"

# Past long.q's floor: retired, whatever --consumer names.
h_sql "UPDATE idemd_key SET since = NOW() - INTERVAL 3 HOUR WHERE id = 3"
out=$(ctl key retire --consumer short 2>err.txt)
[[ "$out" == "retired the replaced key (row 3)"* ]] || h_fail "key retire after 3 hours: $out $(cat err.txt)"
h_assert_eq "$(h_sql "SELECT GROUP_CONCAT(id ORDER BY id) FROM idemd_key")" 1 "rows after retire"
echo "t_key_retire_consumer: ok"
