# t_failover_hosts: broker.hosts and database.hosts with a dead first entry: workers spread over the lists, move past the dead node, and every id has one effect.
db=t_failover_hosts
q=t_failover_hosts.q
h_new_db "$db"
# A TCP account: database.hosts are host:port entries.
h_mysql -e "CREATE USER IF NOT EXISTS 'fo'@'127.0.0.1' IDENTIFIED BY 'fo';
            GRANT ALL ON \`$db\`.* TO 'fo'@'127.0.0.1'" || h_fail "cannot create the TCP user"
# Nothing listens on these: a connection is refused at once, as by a killed node.
dead_mq=$(h_free_port 40000 2000) || h_fail "no free port"
dead_db=$(h_free_port 42000 2000) || h_fail "no free port"
cat >idemd.conf <<CONF
daemon = { log_level = "debug"; shutdown_timeout = 30; };
broker = { hosts = [ "127.0.0.1:$dead_mq", "127.0.0.1:$AMQP_PORT" ]; user = "guest";
           password = "guest"; };
database = { hosts = [ "127.0.0.1:$dead_db", "127.0.0.1:$MYSQL_PORT" ]; user = "fo";
             password = "fo"; database = "$db"; connect_timeout = 2;
             get_server_public_key = true; }; # MySQL: a password over plain TCP
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; prefetch = 100; } );
CONF
h_daemon_start idemd.conf idemd.log

# Worker 0 starts at the dead entries and moves on (its consumer, and its republisher when it
# has opened one by now); worker 1 starts at the live ones.
n=$(h_count_log idemd.log "$q#0 error: broker 127.0.0.1:$dead_mq vhost /: cannot connect")
((n >= 1)) || h_fail "worker 0 was not refused by the dead broker node"
h_assert_eq "$(h_count_log idemd.log "$q#0 info: broker: trying the next of 2 hosts")" "$n" \
    "worker 0 moves to the next broker node after each refusal"
h_assert_eq "$(h_count_log idemd.log "$q#0 info: database: trying the next of 2 hosts")" 1 \
    "worker 0 moves to the next database node"
h_assert_eq "$(h_count_log idemd.log "$q#1 .*(trying the next|cannot connect)")" 0 \
    "worker 1 starts at the live nodes"

h_gen f 1 1000 | awk -F'\t' '{ print; n = substr($1, 2) + 0; if (n % 20 == 0) print }' >pub.txt
out=$(h_mq publish -r "$q" <pub.txt)
h_assert_eq "$out" "published 1050 confirmed 1050" "publish"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record" 1000 60
h_wait_log idemd.log "outcome=(ok|duplicate) queue=$q " 1050 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'")" \
    $'1000\t1000\t1' "effects (count, sum, max)"
h_assert_eq "$(h_count_log idemd.log "outcome=duplicate queue=$q ")" 50 "duplicate outcomes"
h_assert_eq "$(h_depth "$q")" 0 "queue depth after stop"
echo "t_failover_hosts: ok"
