# t_plugin_isolation: plugin code never runs in the supervisor (checked in a child at start and reload); a plugin file or directory others may write is refused; root without --allow-root is refused.
db=t_plugin_isolation
q=t_plugin_isolation.q
h_new_db "$db"

# ctor.so's constructor appends its pid to $IDEMD_TEST_MARKER and starts a thread.
export IDEMD_TEST_MARKER=$PWD/marker
: >marker
mkdir -p plugins
cp "$H_TEST_PLUGINS/ctor.so" plugins/ctor.so
chmod 0755 plugins plugins/ctor.so
# A relative handler path is taken from the config file's directory, not the working directory.
{
    h_conf_common "$db"
    # No delay tiers: a classic queue's at-most-once delay hop would be warned about on stderr.
    echo "queues = ( { name = \"$q\"; handler = \"plugins/ctor.so\"; retry_delays_ms = [ ]; } );"
} >ctor.conf

threads() { awk '/^Threads:/ { print $2 }' "/proc/$1/status"; }

cd /
h_daemon_start "$H_CASE_DIR/ctor.conf" "$H_CASE_DIR/ctor.log"
cd "$H_CASE_DIR"
sup=$H_DAEMON_PID
grep -qF "handler 'ctor' from $PWD/plugins/ctor.so" ctor.log ||
    h_fail "the handler is not logged with its absolute path $PWD/plugins/ctor.so"
workers=$(ps --ppid "$sup" -o pid= | tr -d ' ')
[[ -n "$workers" ]] || h_fail "no worker under the supervisor $sup"
cat marker
grep -qx "$sup" marker && h_fail "the plugin's constructor ran in the supervisor (pid $sup)"
h_assert_eq "$(threads "$sup")" 1 "threads of the supervisor"
for w in $workers; do
    grep -qx "$w" marker || h_fail "the worker $w did not load the plugin itself"
done
checker=$(grep -vxF -f <(printf '%s\n' $workers) marker) || h_fail "no checker process ran the plugin"
for pid in $checker; do
    ! kill -0 "$pid" 2>/dev/null || h_fail "the checker $pid is still running"
done

# It works: messages are handled.
printf 'm%d\tbody\n' 1 2 3 | h_mq publish -r "$q" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'" 3 30

# A reload checks the handler again, in a new child.
before=$(grep -c . marker)
kill -HUP "$sup"
h_wait_log ctor.log "ready:" 2 30
(($(grep -c . marker) > before)) || h_fail "the reload did not check the handler"
grep -qx "$sup" marker && h_fail "the reload ran the plugin's constructor in the supervisor"
h_assert_eq "$(threads "$sup")" 1 "threads of the supervisor after the reload"

# A reload to a plugin others could replace is refused; the running configuration stays.
chmod g+w plugins/ctor.so
kill -HUP "$sup"
h_wait_log ctor.log "reload failed, keeping the running configuration" 1 30
grep -qF "$PWD/plugins/ctor.so: refused: $PWD/plugins/ctor.so is writable by group" ctor.log ||
    h_fail "the reload refusal does not say the plugin is group-writable"
kill -0 "$sup" || h_fail "idemd died on the refused reload"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# At startup and in --check-config: refused, naming the file and the reason.
for bad in "chmod 0775 plugins/ctor.so" "chmod 0755 plugins/ctor.so; chmod 0775 plugins"; do
    chmod 0755 plugins plugins/ctor.so
    eval "$bad"
    rc=0
    timeout 30 "$IDEMD" "${H_ALLOW_ROOT[@]}" -c ctor.conf >bad.log 2>&1 || rc=$?
    cat bad.log
    ((rc != 0 && rc != 124)) || h_fail "$bad: idemd exited $rc"
    grep -qE "$PWD/plugins/ctor.so: refused: .*writable by group" bad.log ||
        h_fail "$bad: no refusal naming the file"
    ! grep -q 'ready:' bad.log || h_fail "$bad: idemd announced ready"
    rc=0
    timeout 30 "$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c ctor.conf >bad.check 2>&1 || rc=$?
    cat bad.check
    ((rc == 1)) || h_fail "$bad: --check-config exited $rc"
    grep -qE "ctor.conf:[0-9]+: queues.\[0\].handler: $PWD/plugins/ctor.so: refused: .*writable by group" \
        bad.check || h_fail "$bad: --check-config does not name the file and setting"
done
chmod 0755 plugins plugins/ctor.so

# Root is refused unless --allow-root is given.
if (($(id -u) == 0)); then
    for args in "-c ctor.conf" "--check-config -c ctor.conf"; do
        rc=0
        # shellcheck disable=SC2086 # two words
        timeout 30 "$IDEMD" $args >root.log 2>&1 || rc=$?
        cat root.log
        h_assert_eq "$rc" 1 "exit status of idemd $args as root"
        grep -qF "idemd: refusing to run as root" root.log && grep -qF -- "--allow-root" root.log ||
            h_fail "idemd $args as root: no clear refusal"
    done
    out=$("$IDEMD" --allow-root --check-config -c ctor.conf 2>root.err) ||
        h_fail "--allow-root --check-config: $out $(cat root.err)"
    h_assert_eq "$out" "ctor.conf: configuration OK (1 queue)" "--check-config --allow-root as root"
else
    echo "# not root: the root refusal is not tested here"
fi
echo "t_plugin_isolation: ok"
