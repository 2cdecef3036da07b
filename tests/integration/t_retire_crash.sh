# t_retire_crash: workers drained by a reload die in their handler while draining: each crash is counted by one more run in its slot (which then drains), and each message is dead-lettered "handler crashed" within the crash guard's bound.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_retire_crash
q=t_retire_crash.q
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq"
conf() # WORKERS: a change the reload drains the queue's workers for
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = $1; prefetch = 1;
             batch_size = 1; max_attempts = 2; settings = { sleep_ms = 3000; }; } );
CONF
}
conf 2 >idemd.conf
h_daemon_start idemd.conf idemd.log

# doom0 and doom1 abort in the handler after its 3 s sleep, one in each worker; the reload
# lands during that sleep, so both workers are retiring when they die there. The new worker
# starts in a slot of its own, so no successor of theirs would count their crashes by chance.
out=$(printf 'doom0\tabort\ndoom1\tabort\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 2 confirmed 2" "publisher"
h_wait_depth "$q" 0 20 # both taken, each by one worker (prefetch 1), sleeping before the body
conf 1 >idemd.conf
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log "reload: .*changed: draining queue '$q'" 1 20 || h_fail "no drain of $q logged"

h_wait_depth "$q.dlq" 2 90 || h_fail "the doom messages were not both dead-lettered"
h_wait_log idemd.log "outcome=reject queue=$q id=doom0 .*reason=\"handler crashed" 1 10
h_wait_log idemd.log "outcome=reject queue=$q id=doom1 .*reason=\"handler crashed" 1 10
# Each message runs max_attempts (2) times, at most max_attempts + workers - 1 (3) when two
# workers race it (docs/failures.md, the crash guard's bound): 4 to 6 aborts in all.
aborts=$(h_count_log idemd.log "worker $q#[0-9] \(pid [0-9]+\) killed by signal 6")
((aborts >= 4 && aborts <= 6)) || h_fail "runs that aborted: $aborts, expected 4 to 6 (2 messages, max_attempts 2, 2 workers)"
noted=$(h_count_log idemd.log "while draining, in its handler: one more run in its slot counts the crash")
((noted >= 2)) || h_fail "retiring workers that died in the handler and had their note counted: $noted, expected 2 or more"

# The queue goes on under the new config: each message once.
out=$(h_gen g 1 20 | h_mq publish -r "$q")
h_assert_eq "$out" "published 20 confirmed 20" "publisher after"
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects" $'20\t20\t1' 120
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id LIKE 'doom%'")" 0 "effects of doom"
h_wait_depth "$q" 0 10
h_daemon_alive || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_retire_crash: ok ($aborts aborts, $noted notes counted by a run in the slot)"
