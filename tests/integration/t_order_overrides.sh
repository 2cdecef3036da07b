# t_order_overrides: an ordered queue with workers = "auto" runs one worker: a workers_max or workers_min written in the file with another value is a warning naming the file, the line and the setting (--check-config and the daemon's log), --print-config shows the effective 1; workers = N > 1 stays an error.
db=t_order_overrides
q=t_order_overrides.q
h_new_db "$db"

# conf LINES...: the case's config, its queue ordered, LINES inside the queue's group.
conf()
{
    h_conf_common "$db"
    printf 'queues = ( { name = "%s"; handler = "%s";\n' "$q" "$H_TEST_PLUGINS/counter.so"
    printf '  order_key = "header:k"; workers = "auto";\n'
    printf '  %s\n' "$@"
    printf '} );\n'
}
lineof() { awk -v t="$2" 'index($0, t) { print NR; exit }' "$1"; }

conf 'workers_max = 4;' 'workers_min = 2;' >idemd.conf
out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config --print-config -c idemd.conf 2>&1) ||
    h_fail "--check-config refused the file: $out"
echo "$out"
lmax=$(lineof idemd.conf workers_max)
lmin=$(lineof idemd.conf workers_min)
wmax="warning: idemd.conf:$lmax: queues.[0].workers_max: 4 is not used: the queue has order_key = \"header:k\", so workers = \"auto\" runs 1 worker per instance"
wmin="warning: idemd.conf:$lmin: queues.[0].workers_min: 2 is not used: the queue has order_key = \"header:k\", so workers = \"auto\" runs 1 worker per instance"
grep -qF "$wmax" <<<"$out" || h_fail "--check-config does not warn about workers_max at line $lmax"
grep -qF "$wmin" <<<"$out" || h_fail "--check-config does not warn about workers_min at line $lmin"
grep -qF "the effective value is 1" <<<"$out" || h_fail "the warning does not give the effective value"
# The effective configuration says 1 for all three.
for s in workers workers_min workers_max; do
    h_assert_eq "$(grep -cxE "[[:space:]]*$s = 1;" <<<"$out" || true)" 1 "--print-config: $s = 1"
done

# The daemon logs the same warnings and runs one worker.
h_daemon_start idemd.conf idemd.log
grep -qF "$wmax" idemd.log || h_fail "the daemon's log does not warn about workers_max"
grep -qF "$wmin" idemd.log || h_fail "the daemon's log does not warn about workers_min"
h_assert_eq "$(h_daemon_pids | wc -l)" 2 "supervisor and its one worker"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# workers_max = 1 or "auto" left out: nothing to say.
conf 'workers_max = 1;' >quiet.conf
out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c quiet.conf 2>&1) || h_fail "quiet.conf: $out"
h_assert_eq "$(grep -c 'is not used' <<<"$out" || true)" 0 "warnings with workers_max = 1"

# An explicit number of workers above 1 is still an error (docs/ordering.md says why).
h_conf_common "$db" >fixed.conf
printf 'queues = ( { name = "%s"; handler = "%s"; order_key = "header:k";\n  workers = 3; } );\n' \
    "$q" "$H_TEST_PLUGINS/counter.so" >>fixed.conf
rc=0
out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c fixed.conf 2>&1) || rc=$?
((rc == 1)) || h_fail "workers = 3 on an ordered queue: --check-config exited $rc"
grep -qF "fixed.conf:$(lineof fixed.conf 'workers = 3'): queues.[0].workers: is 3, but the queue has order_key" <<<"$out" ||
    h_fail "workers = 3 is not refused at its line: $out"
echo "t_order_overrides: ok"
