# t_quorum_default: queues are quorum queues by default (no warning about losing messages); an existing classic queue is kept, warned about once, and its messages handled exactly once.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_quorum_default
h_new_db "$db"

# type_of QUEUE: the queue's type as the broker lists it ("quorum", "classic"), or "".
type_of()
{
    local out
    out=$(h_rabbitmqctl list_queues name type)
    awk -v q="$1" '$1 == q { print $2 }' <<<"$out"
}

# conf_for QUEUE [DECLARE]: a queue with a delay tier and the given declare group.
conf_for()
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$1"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; prefetch = 300;
             max_attempts = 3; retry_delays_ms = [ 100 ]; ${2:-} } );
CONF
}

# 1. A new queue, quorum left unset: the queue, its delay tier and its dead letter queue are
# quorum queues, and --check-config says nothing about an at-most-once hop.
q=t_quorum_default.new
c_fresh_queues "$q" "$q.dlq" "$q.retry.100"
conf_for "$q" >new.conf
chmod go= new.conf
rc=0
"$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c new.conf >check.out 2>&1 || rc=$?
cat check.out
h_assert_eq "$rc" 0 "--check-config of the minimal queue"
h_assert_eq "$(h_count_log check.out 'at-most-once|is lost|are lost')" 0 \
    "--check-config lines warning of a loss"
h_daemon_start new.conf new.log
for x in "$q" "$q.dlq" "$q.retry.100"; do
    h_assert_eq "$(type_of "$x")" quorum "type of $x"
done
out=$({ h_gen n 1 1000; printf 'n-r\tretry\n'; } | h_mq publish -r "$q")
h_assert_eq "$out" "published 1001 confirmed 1001" "publisher (new queue)"
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE msg_id LIKE 'n%'" $'1000\t1000\t1' 60
h_wait_depth "$q.dlq" 1 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_count_log new.log 'exist as classic queues|at-most-once')" 0 \
    "warnings about classic queues for a new queue"

# 2. A deployment from before the default changed: its queues were declared classic
# (quorum = false then being the default, here set). Started again with quorum unset, idemd
# keeps them, warns once (not once per worker or per restart of a worker), and the
# messages are handled exactly once, the retried one dead-lettered after its attempts.
q=t_quorum_default.old
c_fresh_queues "$q" "$q.dlq" "$q.retry.100"
conf_for "$q" 'declare = { quorum = false; };' >old.conf
h_daemon_start old.conf old1.log
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
for x in "$q" "$q.dlq" "$q.retry.100"; do
    h_assert_eq "$(type_of "$x")" classic "type of $x (declared by the old config)"
done
conf_for "$q" >old2.conf
h_daemon_start old2.conf old2.log
out=$({ h_gen o 1 2000; printf 'o-r\tretry\n'; } | h_mq publish -r "$q")
h_assert_eq "$out" "published 2001 confirmed 2001" "publisher (old queue)"
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE msg_id LIKE 'o%'" $'2000\t2000\t1' 60
h_wait_depth "$q.dlq" 1 30
h_wait_depth "$q" 0 30
line=$(h_mq get "$q.dlq")
h_assert_eq "$(cut -f1,2 <<<"$line")" $'o-r\tretry' "dead letter of the old queue"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
for x in "$q" "$q.dlq" "$q.retry.100"; do
    h_assert_eq "$(type_of "$x")" classic "type of $x (kept)"
done
h_assert_eq "$(h_count_log old2.log "queue '$q': 3 of its queues exist as classic queues")" 1 \
    "warnings about the kept classic queues"
h_assert_eq "$(h_count_log old2.log 'declaring queue .* (406|PRECONDITION)')" 0 \
    "declaration errors logged"

# 3. quorum = true set on the classic queue: that is a request, not a default; the worker
# refuses it naming the queue and the way to move it, as before.
conf_for "$q" 'declare = { quorum = true; };' >explicit.conf
chmod go= explicit.conf
h_daemon_bg explicit.conf explicit.log
h_wait_log explicit.log "exists with other arguments, e.g. as a classic queue" 1 30 ||
    h_fail "no refusal of the classic queue with quorum = true set"
h_daemon_kill9
h_assert_eq "$(type_of "$q")" classic "type of $q after the refusal"
echo "t_quorum_default: ok"
