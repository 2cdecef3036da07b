# t_tls: idemd over TLS to both servers (client certificates, TLS-only listeners): exactly once; a wrong CA, a wrong host name and a plain-text server are each refused with a clear error and nothing is processed.
#
# The harness's servers speak plain text, so this case starts its own RabbitMQ node (TLS
# listener on 127.0.0.1 and 127.0.0.2, plain listener for mqtool) and its own database server
# (require_secure_transport, user REQUIRE X509), with certificates made here by openssl.
# The server certificate names localhost and 127.0.0.1 only: 127.0.0.2 reaches the same
# servers under a name the certificate does not carry. For the plain-text checks: the
# harness's RabbitMQ, and a third database server without TLS (from 11.4 on mariadbd
# offers TLS with a certificate it makes itself, so the harness's is no plain-text server).
# The servers are stopped on exit.
db=t_tls
q=t_tls.q
T_DIR=$PWD/tls
H_AMQP_PLAIN=$AMQP_PORT # the harness's servers, for the "server without TLS" checks
T_RABBIT_PGID=
T_MARIADB_PGID=
T_PLAIN_PGID=

t_cleanup()
{
    local rc=$?
    trap - EXIT
    h_daemon_kill9 || true # not set -e safe when no worker is alive
    if [[ -n "$T_RABBIT_PGID" ]]; then
        h_kill_group "$T_RABBIT_PGID" TERM 20
    fi
    if [[ -n "$T_MARIADB_PGID" ]]; then
        h_kill_group "$T_MARIADB_PGID" TERM 30
    fi
    if [[ -n "$T_PLAIN_PGID" ]]; then
        h_kill_group "$T_PLAIN_PGID" TERM 30
    fi
    # The logs stay with the case's output; the data directories (100+ MB) go.
    [[ "${H_KEEP:-0}" == 1 ]] || rm -rf "$T_DIR/mysql/data" "$T_DIR/plain/data" "$T_DIR/rabbit/mnesia"
    return $rc
}
trap t_cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# A CA, a second unrelated CA, a server certificate (localhost, 127.0.0.1 as DNS name and IP
# address: rabbitmq-c 0.11 matches DNS names only) and a client certificate.
t_certs()
{
    local d=$1 ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
    mkdir -p "$d"
    (
        cd "$d"
        openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 2 -subj "/CN=idemd test CA"
        openssl req -x509 "${ec[@]}" -keyout other-ca.key -out other-ca.pem -days 2 \
            -subj "/CN=some other CA"
        openssl req -new "${ec[@]}" -keyout server.key -out server.csr -subj "/CN=localhost"
        printf '%s\n' 'subjectAltName=DNS:localhost,DNS:127.0.0.1,IP:127.0.0.1' \
            'extendedKeyUsage=serverAuth' 'basicConstraints=CA:FALSE' >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 2 -days 2 \
            -extfile server.ext -out server.pem
        openssl req -new "${ec[@]}" -keyout client.key -out client.csr -subj "/CN=idemd"
        printf '%s\n' 'extendedKeyUsage=clientAuth' 'basicConstraints=CA:FALSE' >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -set_serial 3 -days 2 \
            -extfile client.ext -out client.pem
        chmod 600 ./*.key
    ) >"$d/openssl.log" 2>&1 || { cat "$d/openssl.log" >&2; h_fail "openssl could not make the certificates"; }
}

# Start a RabbitMQ node of our own (same HOME, hence cookie, and epmd as the harness's).
t_rabbit_start()
{
    local d=$T_DIR/rabbit
    mkdir -p "$d/mnesia" "$d/log"
    echo '[].' >"$d/enabled_plugins"
    : >"$d/rabbitmq-env.conf"
    cat >"$d/rabbitmq.conf" <<EOF
loopback_users = none
disk_free_limit.absolute = 10MB
log.console = false
log.file.level = info
listeners.ssl.1 = 127.0.0.1:$T_AMQPS_PORT
listeners.ssl.2 = 127.0.0.2:$T_AMQPS_PORT
ssl_options.cacertfile = $T_DIR/ca.pem
ssl_options.certfile = $T_DIR/server.pem
ssl_options.keyfile = $T_DIR/server.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
ssl_options.versions.1 = tlsv1.3
ssl_options.versions.2 = tlsv1.2
EOF
    (
        export RABBITMQ_NODENAME=$T_RABBIT_NODE RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
        export RABBITMQ_NODE_PORT=$T_AMQP_PORT RABBITMQ_DIST_PORT=$T_DIST_PORT
        export RABBITMQ_MNESIA_BASE=$d/mnesia RABBITMQ_LOG_BASE=$d/log
        export RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf
        export RABBITMQ_CONF_ENV_FILE=$d/rabbitmq-env.conf
        export RABBITMQ_ADVANCED_CONFIG_FILE=$d/advanced.config RABBITMQ_PID_FILE=$d/rabbit.pid
        export RABBITMQ_PLUGINS_EXPAND_DIR=$d/plugins-expand
        exec setsid "$H_RABBIT_BIN/rabbitmq-server" </dev/null >"$d/stdout.log" 2>&1
    ) &
    T_RABBIT_PGID=$!
}

t_rabbitmqctl()
{
    RABBITMQ_DIST_PORT=$T_DIST_PORT RABBITMQ_NODENAME=$T_RABBIT_NODE \
        "$H_RABBIT_BIN/rabbitmqctl" -q -n "$T_RABBIT_NODE" "$@"
}

t_rabbit_wait()
{
    if ! h_wait_port "$T_AMQPS_PORT" 60 "$T_RABBIT_PGID" ||
        ! RABBITMQ_DIST_PORT=$T_DIST_PORT RABBITMQ_NODENAME=$T_RABBIT_NODE timeout 60 \
            "$H_RABBIT_BIN/rabbitmqctl" -q -n "$T_RABBIT_NODE" await_startup >/dev/null 2>&1; then
        tail -n 30 "$T_DIR/rabbit/stdout.log" "$T_DIR"/rabbit/log/*.log >&2 2>/dev/null
        h_fail "the TLS RabbitMQ node did not start"
    fi
}

# A database server that accepts TCP only with TLS, on 127.0.0.1 and 127.0.0.2.
t_mariadb_start()
{
    local d=$T_DIR/mysql
    h_db_init "$d" || h_fail "initialising the TLS server failed"
    h_db_server "$d" "$T_MYSQL_SOCK" "$T_MYSQL_PORT" --bind-address=127.0.0.1,127.0.0.2 \
        --ssl-ca="$T_DIR/ca.pem" --ssl-cert="$T_DIR/server.pem" --ssl-key="$T_DIR/server.key" \
        --require-secure-transport=ON
    T_MARIADB_PGID=$!
}

# A database server without TLS, TCP on 127.0.0.1 only (MariaDB: --skip-ssl; MySQL: an
# empty tls_version, which turns encrypted connections off).
t_plain_mariadb_start()
{
    local d=$T_DIR/plain no_tls=--skip-ssl
    h_db_is_mysql && no_tls=--tls-version=
    h_db_init "$d" || h_fail "initialising the plain server failed"
    h_db_server "$d" "$d/sock" "$T_PLAIN_PORT" "$no_tls"
    T_PLAIN_PGID=$!
}

# Wait up to 60 s for the plain server (a client of MariaDB 11.4 or later needs --skip-ssl for it).
t_plain_mariadb_wait()
{
    local deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)); do
        "$H_DB_CLIENT" --no-defaults "$H_DB_CLIENT_NO_TLS" -S "$T_DIR/plain/sock" -uroot -N -e 'SELECT 1' \
            >/dev/null 2>&1 && return 0
        kill -0 "$T_PLAIN_PGID" 2>/dev/null || break
        sleep 0.2
    done
    tail -n 30 "$T_DIR/plain/err.log" >&2
    h_fail "the plain database server did not start"
}

# Print an idemd config. Variables (defaults: everything verified against our CA):
# BHOST BPORT BCA BVERIFY_HOST DHOST DPORT DCA DVERIFY.
t_conf()
{
    cat <<EOF
daemon = { log_level = "debug"; shutdown_timeout = 10; };
broker = { host = "${BHOST:-127.0.0.1}"; port = ${BPORT:-$T_AMQPS_PORT}; user = "guest";
           password_file = "$T_DIR/amqp.pw"; heartbeat = 30;
           tls = { enabled = true; ca_file = "${BCA:-$T_DIR/ca.pem}";
                   cert_file = "$T_DIR/client.pem"; key_file = "$T_DIR/client.key";
                   verify_peer = true; verify_hostname = ${BVERIFY_HOST:-true}; }; };
database = { host = "${DHOST:-127.0.0.1}"; port = ${DPORT:-$T_MYSQL_PORT}; user = "idemd";
             password_file = "$T_DIR/db.pw"; database = "$db"; connect_timeout = 5;
             tls = { enabled = true; ca_file = "${DCA:-$T_DIR/ca.pem}";
                     cert_file = "$T_DIR/client.pem"; key_file = "$T_DIR/client.key";
                     verify_server_cert = ${DVERIFY:-true}; }; };
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; consumer = "$q";
             prefetch = 100; workers = 2; } );
EOF
}

# t_refused NAME REGEX [VAR=VALUE...]: idemd with that config must log a line matching
# REGEX, never become ready, take nothing from the queue and change nothing in the database.
t_refused()
{
    local name=$1 re=$2 conf=idemd-$1.conf log=idemd-$1.log
    shift 2
    local "$@" # the config variables, seen by t_conf
    t_conf >"$conf"
    h_daemon_bg "$conf" "$log"
    h_wait_log "$log" "$re" 1 20 || { tail -n 20 "$log" >&2; h_fail "$name: no log line matching '$re'"; }
    sleep 1 # a few restarts: nothing may slip through meanwhile
    h_assert_eq "$(h_count_log "$log" 'ready:')" 0 "$name: idemd became ready"
    h_assert_eq "$(h_mq depth "$q")" "100 0" "$name: queue depth and consumers"
    h_assert_eq "$(h_sql "SELECT COUNT(*), SUM(n) FROM effects WHERE queue = '$q'")" $'500\t500' \
        "$name: effects"
    h_daemon_stop || h_fail "$name: idemd exited with status $? on SIGTERM"
    h_log "$name: refused: $(grep -Em1 "$re" "$log" | sed -E 's/^[-0-9]+ [0-9:.]+ \[[0-9]+\] [^ ]+ [a-z]+: //')"
}

# ---------- setup ----------
command -v openssl >/dev/null || h_fail "openssl is not installed"
t_certs "$T_DIR"
printf 'guest\n' >"$T_DIR/amqp.pw"
printf 'idemd-tls-pw\n' >"$T_DIR/db.pw"
chmod 600 "$T_DIR"/*.pw

T_AMQPS_PORT=$(h_free_port 20000 9000)
while :; do
    T_AMQP_PORT=$(h_free_port 20000 9000)
    [[ $T_AMQP_PORT != "$T_AMQPS_PORT" ]] && break
done
while :; do # rabbitmqctl uses DIST_PORT+10000.. for itself
    T_DIST_PORT=$(h_free_port 30000 9000)
    h_port_used $((T_DIST_PORT + 10000)) || break
done
T_MYSQL_PORT=$(h_free_port 54000 4000)
while :; do
    T_PLAIN_PORT=$(h_free_port 54000 4000)
    [[ $T_PLAIN_PORT != "$T_MYSQL_PORT" ]] && break
done
T_RABBIT_NODE="idemdtls$$@localhost"
T_MYSQL_SOCK=$T_DIR/mysql/sock

t_rabbit_start
t_mariadb_start
t_plain_mariadb_start
# From here on the h_* helpers talk to our servers.
export AMQP_PORT=$T_AMQP_PORT MYSQL_SOCK=$T_MYSQL_SOCK
h_db_wait "$T_MARIADB_PGID" "$T_DIR/mysql" || h_fail "the TLS database server did not start"
h_new_db "$db"
h_sql "CREATE USER 'idemd'@'%' IDENTIFIED BY 'idemd-tls-pw' REQUIRE X509;
       GRANT ALL ON \`$db\`.* TO 'idemd'@'%'"
t_rabbit_wait
h_log "TLS servers up: amqps $T_AMQPS_PORT (plain $T_AMQP_PORT), mysql $T_MYSQL_PORT"

# The database refuses plain text and a client without a certificate (the client with
# one gets in: the refusals are not about something else).
t_mysql_tcp() { h_mysql --protocol=TCP -h 127.0.0.1 -P "$T_MYSQL_PORT" -uidemd -pidemd-tls-pw "$@" -N -e 'SELECT 1'; }
h_assert_eq "$(t_mysql_tcp --ssl-ca="$T_DIR/ca.pem" --ssl-cert="$T_DIR/client.pem" \
    --ssl-key="$T_DIR/client.key" 2>&1 | grep -v 'Using a password on the command line')" 1 \
    "$H_DB_CLIENT client with TLS and a certificate"
t_mysql_tcp "$H_DB_CLIENT_NO_TLS" >/dev/null 2>&1 && h_fail "the server accepted a TCP session without TLS"
t_mysql_tcp --ssl-ca="$T_DIR/ca.pem" >/dev/null 2>&1 &&
    h_fail "the server accepted user idemd without a client certificate"

# ---------- everything verified: 500 messages exactly once ----------
t_conf >idemd.conf
h_daemon_start idemd.conf idemd.log
out=$(h_gen m 1 500 | h_mq publish -r "$q" --confirmed-file confirmed.txt)
h_assert_eq "$out" "published 500 confirmed 500" "publisher"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'" 500 30
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'" $'500\t500\t1' 10
# The broker sees TLS connections with our client certificate.
conns=$(t_rabbitmqctl list_connections --no-table-headers ssl ssl_protocol peer_cert_subject 2>&1)
h_assert_eq "$(grep -c $'^true\ttlsv1.[23]\tCN=idemd$' <<<"$conns")" \
    "$(grep -c . <<<"$conns")" "every broker connection is TLS with the client certificate: $conns"
[[ -n "$conns" ]] || h_fail "no broker connections listed"
h_wait_log idemd.log 'database 127\.0\.0\.1:[0-9]+ \(TLS\): TLS TLSv1\.[23], cipher .*verified \(chain and host name\)' 2 5
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
cmp -s <(h_sql "SELECT msg_id FROM effects WHERE queue = '$q'" | sort) <(sort confirmed.txt) ||
    h_fail "effect ids differ from the confirmed ids"
h_assert_eq "$(h_depth "$q")" 0 "queue depth after the verified run"

# ---------- refusals: 100 messages wait while idemd is refused ----------
out=$(h_gen m 501 600 | h_mq publish -r "$q")
h_assert_eq "$out" "published 100 confirmed 100" "publisher (second batch)"

t_refused broker-wrong-ca "broker 127\.0\.0\.1:[0-9]+ \(TLS\) vhost /: TLS: the broker's certificate is not trusted" \
    BCA="$T_DIR/other-ca.pem"
t_refused broker-wrong-name "broker 127\.0\.0\.2:[0-9]+ \(TLS\) vhost /: TLS: the broker's certificate is not issued to \"127\.0\.0\.2\"" \
    BHOST=127.0.0.2
t_refused broker-plain-port "broker 127\.0\.0\.1:[0-9]+ \(TLS\) vhost /: TLS handshake failed" \
    BPORT="$H_AMQP_PLAIN"
# The client library's words for a TLS failure: Connector/C's "TLS/SSL error: ...",
# libmysqlclient's "SSL connection error: ...".
tls_err='"?(TLS/SSL error|SSL connection error): '
t_refused db-wrong-ca "database 127\.0\.0\.1:[0-9]+ \(TLS\): TLS: cannot connect as idemd: $tls_err.*certificate" \
    DCA="$T_DIR/other-ca.pem"
# The wrong host name, in libmariadb 3.3's words (Debian 12) or 3.4's (Debian 13), or
# libmysqlclient's (OpenSSL checks the name in its chain verification there: the same words as
# for a wrong CA; the tls.ca_file in the line says it is not one).
t_refused db-wrong-name "database 127\.0\.0\.2:[0-9]+ \(TLS\): TLS: cannot connect as idemd: \"(TLS/SSL error: (Validation of SSL server certificate failed|Hostname verification failed)|SSL connection error: .*certificate verify failed)\" " \
    DHOST=127.0.0.2
# With the host name check off, the chain is still checked (libmariadb 3.4: idemd's own
# verification callback; 3.3: the library's).
t_refused db-wrong-ca-noname "database 127\.0\.0\.2:[0-9]+ \(TLS\): TLS: cannot connect as idemd: $tls_err.*certificate" \
    DHOST=127.0.0.2 DVERIFY=false DCA="$T_DIR/other-ca.pem"
t_plain_mariadb_wait
# The account exists there too, so that the refusal is about TLS (MySQL answers a host with no
# account at all before any TLS is negotiated).
"$H_DB_CLIENT" --no-defaults "$H_DB_CLIENT_NO_TLS" -S "$T_DIR/plain/sock" -uroot \
    -e "CREATE USER 'idemd'@'%' IDENTIFIED BY 'idemd-tls-pw'" || h_fail "no account on the plain server"
t_refused db-plain-server "database 127\.0\.0\.1:[0-9]+ \(TLS\): TLS: cannot connect as idemd: .*SSL is required,? but the server (does not|doesn't) support it" \
    DPORT="$T_PLAIN_PORT"

# ---------- the host name checks turned off: 127.0.0.2 is accepted, the rest is processed ----------
BHOST=127.0.0.2 BVERIFY_HOST=false DHOST=127.0.0.2 DVERIFY=false t_conf >idemd-noname.conf
h_daemon_start idemd-noname.conf idemd-noname.log
h_wait_sql "SELECT COUNT(*), SUM(n), MAX(n) FROM effects WHERE queue = '$q'" $'600\t600\t1' 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM (host name checks off)"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'")" 600 "record rows"
h_assert_eq "$(h_depth "$q")" 0 "queue depth at the end"
h_assert_eq "$(h_count_log idemd.log 'outcome=(retry|reject)')" 0 "retry/reject outcomes"
echo "t_tls: ok"
