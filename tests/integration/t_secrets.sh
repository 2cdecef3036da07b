# t_secrets: idemd run as an unprivileged user, with passwords from files: supervisor and workers are not dumpable, and a world-readable password file is warned about.
db=t_secrets
q=t_secrets.q
h_new_db "$db"
pw="t-secrets-$RANDOM$RANDOM"
h_sql "CREATE USER IF NOT EXISTS 't_secrets'@'%' IDENTIFIED BY '$pw'"
h_sql "GRANT ALL ON \`$db\`.* TO 't_secrets'@'%'"

# nobody must reach everything it reads: its own directory, outside the private case dir.
sdir=$(mktemp -d /tmp/t_secrets.XXXXXX)
trap 'rm -rf "$sdir"' EXIT
chmod 0711 "$sdir"
cp "$IDEMD" "$H_TEST_PLUGINS/counter.so" "$sdir/"
printf '%s\n' "$pw" >"$sdir/db.pw"
printf 'guest\n' >"$sdir/amqp.pw"
cat >"$sdir/idemd.conf" <<CONF
daemon = { log_level = "debug"; shutdown_timeout = 30; };
broker = { host = "127.0.0.1"; port = $AMQP_PORT; user = "guest"; password_file = "$sdir/amqp.pw"; };
database = { host = "127.0.0.1"; port = $MYSQL_PORT; user = "t_secrets"; database = "$db";
             password_file = "$sdir/db.pw"; record_table = "msg_id_record";
             get_server_public_key = true; }; # MySQL: a password over plain TCP
queues = ( { name = "$q"; handler = "$sdir/counter.so"; workers = 2; } );
CONF
chown nobody "$sdir/idemd.conf" "$sdir/db.pw" "$sdir/amqp.pw"
chmod 0600 "$sdir/db.pw" "$sdir/amqp.pw"
printf '#!/bin/sh\nexec setpriv --reuid=nobody --regid=nogroup --clear-groups %s "$@"\n' \
    "$sdir/idemd" >"$sdir/idemd-as-nobody"
chmod 0755 "$sdir/idemd-as-nobody"

# A password file every user can read: a warning naming its line.
chmod 0644 "$sdir/db.pw"
out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$sdir/idemd" --check-config \
    -c "$sdir/idemd.conf" 2>&1) || h_fail "--check-config failed: $out"
echo "$out"
grep -qF "warning: $sdir/idemd.conf:4: database.password_file: \"$sdir/db.pw\" holds a password and is readable by every user (mode 0644)" <<<"$out" ||
    h_fail "no warning about the world-readable password_file"
chmod 0600 "$sdir/db.pw"
out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "$sdir/idemd" --check-config \
    -c "$sdir/idemd.conf" 2>&1) || h_fail "--check-config failed: $out"
h_assert_eq "$(grep -c 'warning: .*password' <<<"$out" || true)" 0 "password warnings with 0600 password files"

IDEMD="$sdir/idemd-as-nobody" h_daemon_start "$sdir/idemd.conf" idemd.log
out=$(printf 'a1\tgood\na2\tgood\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 2 confirmed 2" "publish"
h_wait_sql "SELECT COUNT(*) FROM effects" 2 30

# /proc/PID belongs to root, not to the process's user, exactly when it is not dumpable.
sup=$H_DAEMON_PID
mapfile -t workers < <(pgrep -P "$sup")
h_assert_eq "${#workers[@]}" 2 "workers"
for p in "$sup" "${workers[@]}"; do
    h_assert_eq "$(awk '/^Uid:/ { print $2 }' "/proc/$p/status")" 65534 "uid of $p"
    h_assert_eq "$(stat -c %u "/proc/$p/status")" 0 "owner of /proc/$p/status (0: not dumpable)"
done
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_sql "SELECT msg_id, n FROM effects ORDER BY msg_id")" $'a1\t1\na2\t1' "effects"
echo "t_secrets: ok"
