# t_key_general_log: the relay keys never appear in a statement's text (issue 31, finding 7): with the server's general log on, idemd making the first key, idemctl key stage and key promote leave no key byte in the log, raw, hex or quoted; the log shows their statements (RANDOM_BYTES(32), the rows' ids changing) and nothing else about the keys.
db=t_key_general_log
q=t_key_general_log.q
IDEMCTL=$H_BUILD/idemctl
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }
h_new_db "$db"
{
    h_conf_common "$db"
    echo "queues = ( { name = \"$q\"; handler = \"$H_TEST_PLUGINS/counter.so\"; workers = 1; } );"
} >idemd.conf
chmod go= idemd.conf

# The general log, into mysql.general_log, for the whole server (every session's statements).
trap 'h_sql "SET GLOBAL general_log = 0" >/dev/null 2>&1 || true' EXIT
h_sql "SET GLOBAL log_output = 'TABLE'"
h_sql "SET GLOBAL general_log = 0"
h_sql "TRUNCATE TABLE mysql.general_log"
h_sql "SET GLOBAL general_log = 1"

h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_key")" 0 "no key before idemd starts"
h_daemon_start idemd.conf idemd.log # its first worker makes the signing key
h_wait_sql "SELECT COUNT(*) FROM idemd_key WHERE id = 1" 1 30 || h_fail "idemd made no key"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
first=$(h_sql "SELECT HEX(k) FROM idemd_key WHERE id = 1")

out=$(ctl key stage)
[[ "$out" == "staged a new relay key (row 2)"* ]] || h_fail "key stage: $out"
# (No statement of this test names a key while the log is on: the keys are compared here.)
h_assert_eq "$(h_sql "SELECT id, LENGTH(k) FROM idemd_key ORDER BY id")" $'1\t32\n2\t32' "keys after stage"
staged=$(h_sql "SELECT HEX(k) FROM idemd_key WHERE id = 2")
h_assert_eq "$(h_sql "SELECT HEX(k) FROM idemd_key WHERE id = 1")" "$first" "the signing key after stage"
[[ "$staged" != "$first" ]] || h_fail "key stage staged the signing key again"
h_sql "UPDATE idemd_key SET since = NOW() - INTERVAL 1 HOUR WHERE id = 2" # as if an hour passed
out=$(ctl key promote)
[[ "$out" == "promoted the staged key"* ]] || h_fail "key promote: $out"
h_assert_eq "$(h_sql "SELECT id, HEX(k) FROM idemd_key ORDER BY id")" $'1\t'"$staged"$'\n3\t'"$first" \
    "keys after promote: the staged one signs, the first is row 3"
h_sql "SET GLOBAL general_log = 0"

(($(h_sql "SELECT COUNT(*) FROM mysql.general_log WHERE CONVERT(argument USING latin1) LIKE '%idemd_key%'") >= 4)) ||
    h_fail "the general log caught no statements on idemd_key: was it on?"
# No key in the general log: not raw, not as hex (either case), and no statement on idemd_key carries a
# quoted value or a hex literal (the escaped form a bound parameter takes in the log).
for k in "$first" "$staged"; do
    h_assert_eq "$(h_sql "SELECT COUNT(*) FROM mysql.general_log
                          WHERE LOCATE(UNHEX('$k'), argument) > 0
                             OR LOCATE(UNHEX(HEX('$k')), argument) > 0
                             OR LOCATE(LOWER('$k'), CONVERT(argument USING latin1)) > 0
                             OR LOCATE(LEFT('$k', 16), CONVERT(argument USING latin1)) > 0
                             OR LOCATE(LOWER(LEFT('$k', 16)), CONVERT(argument USING latin1)) > 0")" 0 \
        "general log lines holding key $k"
done
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM mysql.general_log
                      WHERE CONVERT(argument USING latin1) LIKE '%idemd_key%'
                        AND (LOCATE('''', CONVERT(argument USING latin1)) > 0
                             OR LOCATE('X''', CONVERT(argument USING latin1)) > 0
                             OR LOCATE('0x', CONVERT(argument USING latin1)) > 0)")" 0 \
    "statements on idemd_key with a quoted or hex value"
# ... while the log has the statements (so it was on and caught them).
log_count() { h_sql "SELECT COUNT(*) FROM mysql.general_log WHERE CONVERT(argument USING latin1) LIKE '$1'"; }
(($(log_count '%INSERT IGNORE INTO idemd_key (id, k) VALUES (1, RANDOM_BYTES(32))%') >= 1)) ||
    h_fail "the general log lacks the worker's key INSERT"
h_assert_eq "$(log_count '%INSERT INTO idemd_key (id, k, since) VALUES (2, RANDOM_BYTES(32), NOW())%')" 1 "key stage's INSERT in the log"
h_assert_eq "$(log_count '%UPDATE idemd_key SET id = 1, since = NOW() WHERE id = 2%')" 1 "key promote's UPDATE in the log"
echo "t_key_general_log: ok"
