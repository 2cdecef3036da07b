# t_db_read_only: the server turns read-only under a running idemd (as a demoted primary or a replica): the batch refused with 1290 is given back with no attempt counted, the worker takes no messages while every server it may use is read-only, and once writable again each message is applied once.
db=t_db_read_only
q=t_db_read_only.q
h_new_db "$db"
# Never leave the shared server read-only for the cases after this one.
trap 'h_sql "SET GLOBAL read_only = 0" >/dev/null 2>&1 || true' EXIT
# A user without the privilege to write on a read-only server (root has it).
h_sql "CREATE USER IF NOT EXISTS 'ro'@'localhost' IDENTIFIED BY 'ro';
       GRANT ALL ON \`$db\`.* TO 'ro'@'localhost'" || h_fail "cannot create the user"
h_conf_common "$db" | sed 's/user = "root";/user = "ro"; password = "ro";/' >idemd.conf
cat >>idemd.conf <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 20;
             batch_size = 10; settings = { sleep_ms = 20; }; } );
CONF
h_daemon_start idemd.conf idemd.log
h_gen r 1 50 >pub1.txt
h_assert_eq "$(h_mq publish -r "$q" <pub1.txt)" "published 50 confirmed 50" "publish 1"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record" 50 30 || h_fail "first 50"

# Read-only while batches run (20 ms a message): a batch is refused with 1290.
h_gen r 51 250 >pub2.txt
h_assert_eq "$(h_mq publish -r "$q" <pub2.txt)" "published 200 confirmed 200" "publish 2"
h_wait_sql "SELECT COUNT(*) > 50 FROM msg_id_record" 1 30 || h_fail "no progress on the second load"
h_sql "SET GLOBAL read_only = 1"
h_wait_log idemd.log "error 1290" 1 30 || h_fail "no write refused with 1290"
h_wait_log idemd.log "$q#0 info: database socket .*: the server is read-only \(read_only = ON\): not writing here" 2 30 ||
    h_fail "the reconnecting worker did not refuse the read-only server"
h_wait_log idemd.log "$q#0 error: database: the one server configured takes no writes now" 2 10 ||
    h_fail "no reason given for waiting"
at=$(h_sql "SELECT COUNT(*) FROM msg_id_record")
((at < 250)) || h_fail "the load was done before the server turned read-only"
h_wait_depth "$q" $((250 - at)) 30 || h_fail "the rest is not back in the queue"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record")" "$at" "nothing written while read-only"

h_sql "SET GLOBAL read_only = 0"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record" 250 60 || h_fail "records after read_only = 0"
h_wait_depth "$q" 0 30 || h_fail "messages left in $q"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'")" \
    $'250\t250\t1' "effects (count, sum, max)"
h_assert_eq "$(h_count_log idemd.log "outcome=retry|outcome=reject")" 0 \
    "no message retried or rejected: a read-only server counts no attempt"
echo "t_db_read_only: ok"
