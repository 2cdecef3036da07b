# t_wrong_abi: handlers with a wrong ABI, without the symbol, or calling idemd's own functions stop idemd at startup, naming the .so file.
db=t_wrong_abi
h_new_db "$db"
for so in wrong_abi.so no_symbol.so newer_minor.so no_handle.so no_name.so calls_log_msg.so; do
    [[ -f "$H_TEST_PLUGINS/$so" ]] || h_fail "test plugin $H_TEST_PLUGINS/$so is missing"
    q=t_wrong_abi.${so%.so}
    {
        h_conf_common "$db"
        echo "queues = ( { name = \"$q\"; handler = \"$H_TEST_PLUGINS/$so\"; } );"
    } >"$so.conf"

    rc=0
    timeout 30 "$IDEMD" "${H_ALLOW_ROOT[@]}" -c "$so.conf" >"$so.log" 2>&1 || rc=$?
    cat "$so.log"
    ((rc != 124)) || h_fail "$so: idemd still running after 30 s"
    ((rc != 0)) || h_fail "$so: idemd exited 0"
    grep -qF "$so" "$so.log" || h_fail "$so: no message names the file"
    ! grep -q 'ready:' "$so.log" || h_fail "$so: idemd announced ready"
    # It refused before any worker consumed: the queue has no consumer (or was not even declared).
    depth=$(h_mq depth "$q" 2>/dev/null) || depth="none"
    [[ "$depth" == none || "$depth" == "0 0" ]] || h_fail "$so: queue $q has '$depth' (ready consumers)"

    rc=0
    timeout 30 "$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c "$so.conf" >"$so.check.log" 2>&1 || rc=$?
    cat "$so.check.log"
    ((rc != 0 && rc != 124)) || h_fail "$so: --check-config exited $rc"
    grep -qF "$so" "$so.check.log" || h_fail "$so: --check-config does not name the file"
done
# A plugin that calls idemd's own functions (idemd exports none) is refused with dlopen's reason.
for f in calls_log_msg.so.log calls_log_msg.so.check.log; do
    grep -qF "$H_TEST_PLUGINS/calls_log_msg.so: cannot load handler: undefined symbol: log_msg" "$f" ||
        h_fail "$f: no 'undefined symbol: log_msg' refusal naming the file"
done

# A path that does not exist is refused the same way.
{
    h_conf_common "$db"
    echo "queues = ( { name = \"t_wrong_abi.missing\"; handler = \"$H_CASE_DIR/missing.so\"; } );"
} >missing.conf
rc=0
timeout 30 "$IDEMD" "${H_ALLOW_ROOT[@]}" -c missing.conf >missing.log 2>&1 || rc=$?
cat missing.log
((rc != 0 && rc != 124)) || h_fail "missing.so: idemd exited $rc"
grep -qF "missing.so" missing.log || h_fail "missing.so: no message names the file"
echo "t_wrong_abi: ok"
