# t_mysql_auth: Oracle MySQL's caching_sha2_password over TCP: a cold login without TLS fails with the remedy named, get_server_public_key or TLS log in, tls.enabled = false means no TLS, and the client library writes nothing of its own into idemd's log.
h_db_is_mysql || h_skip "MySQL only: caching_sha2_password and libmysqlclient's SSL modes"
db=t_mysql_auth
q=t_mysql_auth.q
h_new_db "$db"
# An account with a password and MySQL's default plugin, reachable over TCP.
h_sql "CREATE USER 'pw'@'127.0.0.1' IDENTIFIED WITH caching_sha2_password BY 's3cret';
       GRANT ALL ON \`$db\`.* TO 'pw'@'127.0.0.1'"
umask 077
printf 's3cret\n' >db.pw

# t_conf EXTRA: a config reaching the server over TCP as pw, with EXTRA in the database group.
t_conf()
{
    cat <<EOF
daemon = { log_level = "debug"; shutdown_timeout = 10; };
broker = { host = "127.0.0.1"; port = $AMQP_PORT; user = "guest"; password = "guest"; };
database = { host = "127.0.0.1"; port = $MYSQL_PORT; user = "pw"; password_file = "$PWD/db.pw";
             database = "$db"; connect_timeout = 5; $1 };
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; } );
EOF
}

# t_ssl_of_pw: the TLS version of pw's sessions as the server sees them ("" = plain text).
t_ssl_of_pw()
{
    h_sql "SELECT DISTINCT s.VARIABLE_VALUE FROM performance_schema.status_by_thread s
           JOIN performance_schema.threads t USING (THREAD_ID)
           WHERE t.PROCESSLIST_USER = 'pw' AND s.VARIABLE_NAME = 'Ssl_version'"
}

# 1. Cold: the server has no cached login for pw. Without TLS or the RSA key the password
# cannot be sent: the worker says what to do and processes nothing.
h_sql "FLUSH PRIVILEGES"
t_conf "" >cold.conf
chmod go= cold.conf
h_daemon_bg cold.conf cold.log
h_wait_log cold.log "cannot connect as pw: .*needs a secure connection for a password: set database.tls .*database.get_server_public_key = true" 1 30 ||
    h_fail "no remedy named for the cold caching_sha2_password login"
h_daemon_kill9
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record")" 0 "records written without a login"

# 2. The same cold login with get_server_public_key: messages flow, in plain text.
h_sql "FLUSH PRIVILEGES"
t_conf "get_server_public_key = true;" >key.conf
h_daemon_start key.conf key.log
out=$(h_gen k 1 50 | h_mq publish -r "$q")
h_assert_eq "$out" "published 50 confirmed 50" "publisher"
h_wait_sql "SELECT COUNT(*), MAX(n) FROM effects WHERE queue = '$q'" $'50\t1' 30
h_assert_eq "$(t_ssl_of_pw)" "" "TLS of idemd's sessions with tls.enabled = false"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# 3. Cold again, over TLS (the server's own certificate, not verified): messages flow, encrypted.
h_sql "FLUSH PRIVILEGES"
t_conf "tls = { enabled = true; verify_server_cert = false; };" >tls.conf
h_daemon_start tls.conf tls.log
out=$(h_gen t 1 50 | h_mq publish -r "$q")
h_assert_eq "$out" "published 50 confirmed 50" "publisher"
h_wait_sql "SELECT COUNT(*), MAX(n) FROM effects WHERE queue = '$q'" $'100\t1' 30
case $(t_ssl_of_pw) in
TLSv1.2 | TLSv1.3) ;;
*) h_fail "idemd's sessions with tls.enabled = true are not TLS 1.2+: '$(t_ssl_of_pw)'" ;;
esac
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# Every line of the three logs is idemd's own (a log line, or a config warning on stderr before
# logging starts): the library printed nothing (no "WARNING:
# MYSQL_OPT_RECONNECT is deprecated", no other raw line without idemd's timestamp).
h_assert_eq "$(cat cold.log key.log tls.log | awk '/MYSQL_OPT_RECONNECT|^WARNING/ { n++ } END { print n + 0 }')" 0 \
    "library warnings in idemd's log"
h_assert_eq "$(cat cold.log key.log tls.log |
    awk '!/^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+ \[[0-9]+\] / && !/^warning: [a-z]+\.conf:[0-9]+: / { n++ }
         END { print n + 0 }')" 0 \
    "lines in idemd's log that idemd did not write"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record")" 100 "dedup records"
echo "t_mysql_auth: ok"
