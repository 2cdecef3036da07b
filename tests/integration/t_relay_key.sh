# t_relay_key: sql/010 adds idemd_key.since to an old table (twice is harmless); a relay key under 32 bytes is refused (the worker names the table and the remedy, and acks nothing); idemctl key stage / promote / retire change the key while idemd runs: each step early is refused, workers pick the keys up without a restart, and a copy signed by the old key still counts its attempts after the new one signs, so the message reaches the dead letter queue at max_attempts with idemd-attempts = max.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_relay_key
q=t_relay_key.q
IDEMCTL=$H_BUILD/idemctl
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }
h_new_db "$db"
# sql/010 on a table made by the old 007 (no since column): adds it; twice is harmless.
h_sql "ALTER TABLE idemd_key DROP COLUMN since"
for _ in 1 2; do
    h_mysql "$db" <"$H_SQL_DIR/010_idemd_key_since.sql" || h_fail "sql/010 failed"
done
h_assert_eq "$(h_sql "SELECT COLUMN_NAME, IS_NULLABLE FROM information_schema.COLUMNS
                      WHERE TABLE_SCHEMA = '$db' AND TABLE_NAME = 'idemd_key' ORDER BY ORDINAL_POSITION")" \
    $'id\tNO\nk\tNO\nsince\tNO' "idemd_key's columns after sql/010"
c_fresh_queues $q $q.dlq $q.retry.20000 $q.retry.1000
h_mq declare "$q" --dlq "$q.dlq" # as idemd declares it: s1 waits there before any worker runs
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; max_attempts = 3;
             retry_delays_ms = [ 20000, 1000 ]; } );
CONF
} >idemd.conf
chmod go= idemd.conf

# A 16-byte key (accepted and zero-padded before): refused, nothing consumed.
h_sql "INSERT INTO idemd_key (id, k) VALUES (1, UNHEX('00112233445566778899aabbccddeeff'))"
out=$(printf 's1\tgood\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publish s1"
setsid "$IDEMD" "${H_ALLOW_ROOT[@]}" -c idemd.conf </dev/null >short.log 2>&1 &
H_DAEMON_PID=$!
mkdir -p "$H_DIR/daemons"
: >"$H_DIR/daemons/$H_DAEMON_PID"
h_wait_log short.log "table idemd_key row id 1 holds a key of 16 bytes; a key needs 32 random bytes and a shorter one is refused: delete that row" 1 30 ||
    h_fail "the short key was not refused"
h_assert_eq "$(h_count_log short.log "ready: 1 queues, 1 workers consuming")" 0 "workers consuming with a short key"
h_daemon_kill9
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects")" 0 "nothing applied with a short key"
h_assert_eq "$(ctl key status | cut -f1,3,6)" $'1\t16 bytes\ttoo short: refused' "key status shows the short key"

# The remedy: delete the row; idemd makes a 32-byte key and s1 flows.
h_sql "DELETE FROM idemd_key"
export IDEMD_TEST_KEY_REREAD_MS=300 # workers read the keys every 0.3 s instead of 30 s
export IDEMD=$H_BUILD/idemd-test      # ... in the test build only (the release build has no knob)
h_daemon_start idemd.conf idemd.log
h_wait_sql "SELECT n FROM effects WHERE msg_id = 's1'" 1 30 || h_fail "s1 was not applied"
h_assert_eq "$(h_sql "SELECT id, LENGTH(k) FROM idemd_key")" $'1\t32' "a new 32-byte key"
old=$(h_sql "SELECT HEX(k) FROM idemd_key WHERE id = 1")

# m1 fails; its first copy, signed by the old key, waits 20 s in the delay queue (room for
# the rotation below on a loaded machine; the second waits 1 s).
out=$(printf 'm1\tretry\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publish m1"
h_wait_log idemd.log "outcome=retry queue=$q id=m1 .*attempt=1/3 .*then=\"retry scheduled" 1 30 ||
    h_fail "m1's first attempt"

# Rotation. Each step taken too early is refused and changes nothing.
rc=0
ctl key promote >/dev/null 2>early.err || rc=$?
h_assert_eq "$rc" 1 "promote with nothing staged: exit status"
out=$(ctl key stage)
[[ "$out" == "staged a new relay key (row 2)"* ]] || h_fail "key stage: $out"
h_wait_log idemd.log "relay keys changed in table idemd_key: same signing key, 2 accepted" 1 10 ||
    h_fail "the worker did not read the staged key"
rc=0
ctl key promote >/dev/null 2>early.err || rc=$?
h_assert_eq "$rc" 2 "promote right after stage: exit status"
h_assert_eq "$(h_count_log early.err "key promote: the key was staged [0-9]+ s ago; wait .* more")" 1 "promote too early: why"
h_assert_eq "$(h_sql "SELECT HEX(k) FROM idemd_key WHERE id = 1")" "$old" "the signing key is unchanged"
h_sql "UPDATE idemd_key SET since = NOW() - INTERVAL 1 HOUR WHERE id = 2" # as if an hour passed
new=$(h_sql "SELECT HEX(k) FROM idemd_key WHERE id = 2")
out=$(ctl key promote)
[[ "$out" == "promoted the staged key"* ]] || h_fail "key promote: $out"
h_assert_eq "$(h_sql "SELECT id, HEX(k) FROM idemd_key ORDER BY id")" $'1\t'"$new"$'\n3\t'"$old" "keys after promote"
h_wait_log idemd.log "relay keys changed in table idemd_key: new signing key, 2 accepted" 1 10 ||
    h_fail "the worker did not read the promoted key"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q id=m1 .*attempt=2/3")" 0 \
    "m1's old-key copy is still waiting (the rotation took under 20 s)"

# m1's copy signed by the old key verifies: attempts 2 and 3, then the dead letter queue.
h_wait_depth "$q.dlq" 1 60 || h_fail "m1 did not reach $q.dlq"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q id=m1 .*attempt=2/3 .*then=\"retry scheduled")" 1 "m1 attempt 2"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q id=m1 .*attempt=3/3 .*then=\"dead-lettered")" 1 "m1 attempt 3"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q id=m1 ")" 3 "outcome lines of m1"

# Retire: too early is refused; later the old key goes, and the workers follow.
rc=0
ctl key retire >/dev/null 2>early.err || rc=$?
h_assert_eq "$rc" 2 "retire right after promote: exit status"
h_assert_eq "$(h_count_log early.err "key retire: the key was replaced [0-9]+ s ago; wait .* more: copies it signed may still sit in a delay queue \(longest retry delay 20000 ms")" 1 \
    "retire too early: why"
h_sql "UPDATE idemd_key SET since = NOW() - INTERVAL 1 HOUR WHERE id = 3"
out=$(ctl key retire)
[[ "$out" == "retired the replaced key (row 3)"* ]] || h_fail "key retire: $out"
h_assert_eq "$(ctl key status | cut -f1,2,3,6)" $'1\tsigning\t32 bytes\tok' "key status after retire"
h_wait_log idemd.log "relay keys changed in table idemd_key: same signing key, 1 accepted" 1 10 ||
    h_fail "the worker did not drop the retired key"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

got=$(h_mq get "$q.dlq")
echo "$got"
h_assert_eq "$(cut -f1 <<<"$got")" m1 "m1 in $q.dlq"
h_assert_eq "$(c_hdr "$got" idemd-attempts)" 3 "m1: idemd-attempts = max_attempts"
echo "t_relay_key: ok"
