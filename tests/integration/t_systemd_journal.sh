# t_systemd_journal: with stderr on a journal stream idemd writes native journal entries (PRIORITY, MESSAGE, IDEMD_* fields) and no stderr lines.
#
# There is no journald here. In a private mount namespace a tmpfs hides /run, and notifysock
# listens on /run/systemd/journal/socket, the address sd_journal_sendv() sends to; it prints
# one line per entry with the fields separated by a literal "\n". idemd's stderr is a file
# whose DEVICE:INODE go into JOURNAL_STREAM, which is how systemd marks its stream socket.
#
# In a plain chroot, where / is not a mount point, `unshare --propagation private` fails
# (EINVAL), and the chroot's directory may sit on a shared mount: a tmpfs mounted over /run
# there would show up in the host's mount table too. There the case listens on
# /run/systemd/journal/socket directly instead, which it only does where nothing is there (no
# journald in the chroot), under a lock, and removes afterwards.
NOTIFYSOCK=${NOTIFYSOCK:-$H_BUILD/tests/tools/notifysock}
[[ -x "$NOTIFYSOCK" ]] || h_fail "no notifysock at $NOTIFYSOCK (make check-build)"
if unshare --mount --propagation private true 2>unshare.err; then
    mode=namespace
elif unshare --mount --propagation unchanged true 2>/dev/null; then
    mode=direct # a namespace, but / cannot be made private: a plain chroot
    h_log "$(cat unshare.err): / is not a mount point; listening on the real journal socket path"
else
    h_fail "cannot create a mount namespace (unshare needs root or CAP_SYS_ADMIN): $(cat unshare.err)"
fi
jdir=/run/systemd/journal
marker=$jdir/idemd-t_systemd_journal
made_dirs=()
direct_cleanup()
{
    local i
    rm -f "$jdir/socket" "$marker"
    for ((i = ${#made_dirs[@]} - 1; i >= 0; i--)); do rmdir "${made_dirs[i]}" 2>/dev/null || true; done
}
if [[ $mode == direct ]]; then
    lockdir=/run/lock
    [[ -d $lockdir && -w $lockdir ]] || lockdir=/tmp
    exec {lock_fd}>>"$lockdir/idemd-t_systemd_journal.lock"
    flock -w 150 "$lock_fd" || h_fail "another t_systemd_journal held the lock for 150 s"
    # Under the lock, a socket with this case's marker is a leftover of a killed run.
    if [[ -e $jdir/socket || -L $jdir/socket ]] && [[ ! -e $marker ]]; then
        h_fail "$jdir/socket exists (a journald?): it cannot be faked here"
    fi
    for d in /run/systemd "$jdir"; do
        [[ -d $d ]] && continue
        mkdir "$d" || h_fail "cannot create $d"
        made_dirs+=("$d")
    done
    rm -f "$jdir/socket"
    : >"$marker"
    trap direct_cleanup EXIT
fi
db=t_systemd_journal
q=t_systemd_journal.q
h_new_db "$db"
{
    h_conf_common "$db"
    echo "queues = ( { name = \"$q\"; handler = \"$H_TEST_PLUGINS/counter.so\"; workers = 1; } );"
} >idemd.conf
chmod 0600 idemd.conf # it holds the broker password: idemd warns (on stderr) about a readable one

cat >inner.sh <<'EOF'
# Runs in the private mount namespace (or, with "direct", where nothing hides /run): fake
# journald, then idemd with stderr on a "journal stream".
set -eu
[[ $1 == direct ]] || mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/journal
"$NOTIFYSOCK" -t 120 /run/systemd/journal/socket >journal.log 2>notifysock.err &
ns=$!
for _ in $(seq 50); do [[ -S /run/systemd/journal/socket ]] && break; sleep 0.1; done
: >stderr.log
JOURNAL_STREAM=$(stat -c '%d:%i' stderr.log)
export JOURNAL_STREAM
unset IDEMD_LOG_TARGET
rc=0
# The namespace needs root: idemd refuses it without --allow-root (a no-op for others).
"$IDEMD" --allow-root -c idemd.conf 2>>stderr.log &
echo $! >daemon.pid
wait $! || rc=$?
echo "$rc" >daemon.rc
sleep 0.3
kill "$ns"
wait "$ns" || true
EOF
export NOTIFYSOCK
rm -f daemon.pid daemon.rc journal.log stderr.log
if [[ $mode == namespace ]]; then
    setsid unshare --mount --propagation private bash inner.sh namespace </dev/null >inner.out 2>&1 &
else
    setsid bash inner.sh direct </dev/null >inner.out 2>&1 &
fi
inner=$!
mkdir -p "$H_DIR/daemons"
: >"$H_DIR/daemons/$inner" # the harness kills this process group if the case dies
for _ in $(seq 100); do [[ -s daemon.pid ]] && break; sleep 0.1; done
[[ -s daemon.pid ]] || h_fail "idemd did not start in the namespace: $(cat inner.out)"
pid=$(cat daemon.pid)
h_wait_log journal.log 'MESSAGE=main: ready: ' 1 30 ||
    h_fail "no 'ready:' journal entry; stderr.log: $(tail -n 5 stderr.log)"

out=$(h_gen j 1 10 | h_mq publish -r "$q")
h_assert_eq "$out" "published 10 confirmed 10" "publisher"
out=$(printf 'bad1\treject\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publisher (reject)"
h_wait_sql "SELECT COUNT(*) FROM effects WHERE queue = '$q'" 10 30
h_wait_log journal.log 'outcome=reject' 1 10 || h_fail "no journal entry for the rejected message"
kill -TERM "$pid"
for _ in $(seq 300); do [[ -s daemon.rc ]] && break; sleep 0.1; done
[[ -s daemon.rc ]] || h_fail "idemd did not stop within 30 s"
wait "$inner" || true
rm -f "$H_DIR/daemons/$inner"
h_assert_eq "$(cat daemon.rc)" 0 "idemd exit status"
echo "--- journal entries (first 12) ---"
head -n 12 journal.log

# Nothing on stderr: every line went to the journal.
[[ ! -s stderr.log ]] || h_fail "idemd wrote to stderr: $(head -n 5 stderr.log)"

count() # count FIXED-STRING...: number of journal entries containing all of them
{
    local lines s
    lines=$(cat journal.log)
    for s in "$@"; do lines=$(grep -F -- "$s" <<<"$lines" || true); done
    if [[ -z "$lines" ]]; then echo 0; else wc -l <<<"$lines"; fi
}
nl='\n' # notifysock writes a newline inside a datagram as backslash-n

(($(count "pid=$pid " "MESSAGE=main: ready: " "${nl}PRIORITY=6${nl}" \
    "${nl}SYSLOG_IDENTIFIER=idemd${nl}" "${nl}IDEMD_CONTEXT=main${nl}") == 1)) ||
    h_fail "the ready entry lacks PRIORITY=6, SYSLOG_IDENTIFIER=idemd or IDEMD_CONTEXT=main"
(($(count "MESSAGE=$q#0: consuming queue '$q'" "${nl}IDEMD_CONTEXT=$q#0${nl}" "${nl}PRIORITY=6${nl}") == 1)) ||
    h_fail "no consuming entry from worker $q#0 with its context"
(($(count "MESSAGE=$q#0: consuming queue" "pid=$pid ") == 0)) ||
    h_fail "the worker's entry came from the supervisor's pid"
(($(count "MESSAGE=$q#0: " "outcome=ok" "${nl}PRIORITY=7${nl}") == 10)) ||
    h_fail "expected 10 debug (PRIORITY=7) outcome=ok entries, got $(count outcome=ok)"
(($(count "outcome=reject" "${nl}PRIORITY=4${nl}") == 1)) ||
    h_fail "the reject outcome is not one PRIORITY=4 (warning) entry"
(($(count "MESSAGE=main: signal 15: stopping") == 1)) || h_fail "no stopping entry"

# Structured outcome fields, once src/worker.c logs outcomes with log_fields().
if grep -q 'log_fields' "$H_ROOT/src/worker.c"; then
    (($(count "outcome=ok" "${nl}IDEMD_QUEUE=$q${nl}" "${nl}IDEMD_CONSUMER=$q${nl}" \
        "${nl}IDEMD_HANDLER=counter${nl}" "${nl}IDEMD_OUTCOME=ok${nl}" "${nl}IDEMD_MSG_ID=j") == 10)) ||
        h_fail "outcome=ok entries lack IDEMD_QUEUE/CONSUMER/HANDLER/OUTCOME/MSG_ID"
    (($(count "outcome=reject" "${nl}IDEMD_OUTCOME=reject${nl}" "${nl}IDEMD_MSG_ID=bad1") == 1)) ||
        h_fail "the reject entry lacks IDEMD_OUTCOME=reject or IDEMD_MSG_ID=bad1"
else
    echo "src/worker.c does not call log_fields() yet: outcome fields not checked"
fi
echo "t_systemd_journal: ok ($(wc -l <journal.log) entries)"
