# t_config_trust: a config file (or an @include'd one) that its group or others may write, or that another non-root user owns, is refused like a plugin: --check-config and a start exit 1 naming the file and the fix; a reload to such a file keeps the running configuration; root:GROUP 0640 is accepted.
db=t_config_trust
q=t_config_trust.q
h_new_db "$db"
# The case directory's parents are root's and writable by root only (the rule covers them).
{
    h_conf_common "$db"
    echo "queues = ( { name = \"$q\"; handler = \"$H_TEST_PLUGINS/counter.so\"; workers = 1; } );"
} >idemd.conf
real=$(realpath idemd.conf)

# refused FILE WHY: --check-config and a start both exit 1 with "FILE: refused: REAL WHY".
refused()
{
    local f=$1 why=$2 rc=0 out
    out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c "$f" 2>&1) || rc=$?
    echo "--- $f (--check-config status $rc): $out"
    ((rc == 1)) || h_fail "$f: --check-config exited $rc, expected 1"
    grep -qF "$why" <<<"$out" || h_fail "$f: --check-config does not say '$why': $out"
    rc=0
    out=$(timeout 30 "$IDEMD" "${H_ALLOW_ROOT[@]}" -c "$f" 2>&1 </dev/null) || rc=$?
    ((rc == 1)) || h_fail "$f: idemd exited $rc, expected 1: $out"
    grep -qF "$why" <<<"$out" || h_fail "$f: idemd does not say '$why': $out"
    h_assert_eq "$(grep -c 'ready:' <<<"$out" || true)" 0 "$f: ready lines of a refused start"
}

chmod 0664 idemd.conf
refused idemd.conf "idemd.conf: refused: $real is writable by group (mode 0664): a config file must be writable by its owner only: chmod go-w $real"
chmod 0602 idemd.conf
refused idemd.conf "idemd.conf: refused: $real is writable by others (mode 0602): a config file must be writable by its owner only: chmod go-w $real"
chmod 0640 idemd.conf
chown nobody idemd.conf
refused idemd.conf "idemd.conf: refused: $real is owned by uid $(id -u nobody), not by root or the user this runs as (uid $(id -u)): chown root $real"
chown root idemd.conf
# A symlink is judged by the file it points to.
ln -s idemd.conf link.conf
chmod 0660 idemd.conf
refused link.conf "link.conf: refused: $real is writable by group (mode 0660)"
chmod 0640 idemd.conf
# An @include'd file is the config too.
cp idemd.conf main.conf
sed -i '/^queues = /d' main.conf
echo "@include \"queues.inc\"" >>main.conf
grep '^queues = ' idemd.conf >queues.inc
chmod 0620 queues.inc
refused main.conf "queues.inc: refused: $(realpath queues.inc) is writable by group (mode 0620)"
chmod 0640 queues.inc
out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c main.conf 2>&1) || h_fail "main.conf with a 0640 include: $out"

# root:GROUP 0640, as docs/deploying.md installs it: accepted, and it runs.
chgrp "$(id -gn nobody)" idemd.conf
chmod 0640 idemd.conf
out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c idemd.conf 2>&1) || h_fail "a root:group 0640 config was refused: $out"
h_daemon_start idemd.conf idemd.log
printf 'a1\tgood\n' | h_mq publish -r "$q" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM effects" 1 30

# A reload to a file others may change keeps the running configuration (and says why).
sed -i 's/workers = 1;/workers = 2;/' idemd.conf
chmod 0664 idemd.conf
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log "reload failed, keeping the running configuration: idemd.conf: refused: $real is writable by group \\(mode 0664\\)" 1 20 ||
    h_fail "the reload of a group-writable config was not refused"
printf 'a2\tgood\n' | h_mq publish -r "$q" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM effects" 2 30
h_assert_eq "$(h_daemon_pids | wc -l)" 2 "supervisor and workers after the refused reload (workers = 1 kept)"
# Fixed, the same reload goes through.
chmod 0640 idemd.conf
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log "reload: queues.\\[0\\].workers changed|reload: .*workers changed" 1 20 ||
    h_fail "the reload of the fixed config did not apply"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_config_trust: ok"
