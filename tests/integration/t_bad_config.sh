# t_bad_config: --check-config reports FILE:LINE and the setting for bad files, exits 0 for a good one.
counter=$H_TEST_PLUGINS/counter.so

# check FILE LINE WORD: --check-config must fail and print FILE:LINE and WORD.
check_bad()
{
    local f=$1 line=$2 word=$3 rc=0
    "$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c "$f" >"$f.out" 2>&1 || rc=$?
    echo "--- $f (status $rc):"
    cat "$f.out"
    ((rc != 0)) || h_fail "$f: --check-config exited 0"
    grep -qF "$f:$line" "$f.out" || h_fail "$f: output does not name $f:$line"
    grep -qiF "$word" "$f.out" || h_fail "$f: output does not name '$word'"
}

cat >syntax.conf <<CONF
daemon = { log_level = "info"; };
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
broker = { port = ; };
queues = ( { name = "q1"; handler = "$counter"; } );
CONF
# libconfig names the line and says "syntax error".
check_bad syntax.conf 3 "syntax"

cat >prefetch.conf <<CONF
# prefetch must be positive
daemon = { log_level = "info"; };
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = (
  { name = "q1";
    handler = "$counter";
    prefetch = -1;
  }
);
CONF
check_bad prefetch.conf 7 "prefetch"

cat >dedup.conf <<CONF
daemon = { log_level = "info"; };
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = (
  { name = "q1";
    handler = "$counter";
    dedup = "maybe";
  }
);
CONF
check_bad dedup.conf 6 "dedup"

cat >loglevel.conf <<CONF
daemon = {
  log_level = "loud";
};
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = ( { name = "q1"; handler = "$counter"; } );
CONF
check_bad loglevel.conf 2 "log_level"

cat >workers.conf <<CONF
daemon = { log_level = "info"; };
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = ( { name = "q1"; handler = "$counter";
             workers = "two"; } );
CONF
check_bad workers.conf 4 "workers"

# Declarations RabbitMQ refuses would restart every worker for ever: refused at load.
cat >durable.conf <<CONF
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = ( { name = "q1"; handler = "$counter";
             declare = {
               durable = false; }; } );
CONF
check_bad durable.conf 4 "declare.durable"
grep -qF "dead letter queue" durable.conf.out || h_fail "durable.conf: the dead letter queue is not named"

cat >quorum_transient.conf <<CONF
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = ( { name = "q1"; handler = "$counter";
             declare = { quorum = true; dead_letter_queue = "";
               durable = false; }; } );
CONF
check_bad quorum_transient.conf 4 "declare.durable"

long=$(printf 'n%.0s' $(seq 244))
cat >retry_name.conf <<CONF
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = ( { handler = "$counter"; consumer = "c";
             name = "$long"; } );
CONF
check_bad retry_name.conf 3 "queues.[0].name"
grep -qF "$long.retry.10000" retry_name.conf.out || h_fail "retry_name.conf: the delay queue is not named"

cat >retry_tier.conf <<CONF
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = ( { handler = "$counter"; consumer = "c"; name = "${long:0:241}";
             declare = { dead_letter_queue = "q1.dlq"; };
             retry_delays_ms = [ 5, 86400000 ]; } );
CONF
check_bad retry_tier.conf 4 "queues.[0].retry_delays_ms"

long_dlq=$(printf 'n%.0s' $(seq 252))
cat >dlq_name.conf <<CONF
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = ( { handler = "$counter"; consumer = "c"; retry_delays_ms = [ ];
             name = "$long_dlq"; } );
CONF
check_bad dlq_name.conf 2 "dead_letter_queue"

# A length limit that loses messages: drop-head, or a classic delay hop into a full queue.
cat >drop_head.conf <<CONF
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = ( { name = "q1"; handler = "$counter";
             declare = { arguments = {
               x-max-length = 1000; }; }; } );
CONF
check_bad drop_head.conf 4 "x-max-length"
cat >classic_full.conf <<CONF
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
queues = ( { name = "q1"; handler = "$counter";
             declare = { quorum = false; arguments = { x-overflow = "reject-publish";
               x-max-length-bytes = 1000000; }; }; } );
CONF
check_bad classic_full.conf 4 "declare.quorum = true"

# TLS is never off by accident: a tls file set while tls.enabled is forgotten or false.
cat >tls_forgotten.conf <<CONF
database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };
broker = { port = 5671;
  tls = { ca_file = "/etc/hostname"; }; };
queues = ( { name = "q1"; handler = "$counter"; } );
CONF
check_bad tls_forgotten.conf 3 "broker.tls.ca_file: set, but tls.enabled is not set"
cat >tls_false.conf <<CONF
database = { host = "db.example"; user = "root"; database = "t";
  tls = { enabled = false;
          verify_server_cert = false; }; };
queues = ( { name = "q1"; handler = "$counter"; } );
CONF
check_bad tls_false.conf 3 "database.tls.verify_server_cert: set, but tls.enabled is false"

# A remote broker or database in plain text: a warning naming the host line, from
# --check-config (which still exits 0) and at start.
cat >plain_remote.conf <<CONF
broker = { user = "guest"; password_file = "/etc/hostname";
  host = "192.0.2.1"; };
database = { user = "root"; database = "t";
  host = "192.0.2.2"; connect_timeout = 1; };
queues = ( { name = "q1"; handler = "$counter"; } );
CONF
w_mq='plain_remote.conf:2: broker.host: "192.0.2.1" is not a loopback address and tls.enabled is false'
w_db='plain_remote.conf:4: database.host: "192.0.2.2" is not a loopback address and tls.enabled is false'
rc=0
"$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c plain_remote.conf >plain_remote.out 2>&1 || rc=$?
cat plain_remote.out
((rc == 0)) || h_fail "plain_remote.conf: --check-config exited $rc"
grep -qF "warning: $w_mq" plain_remote.out || h_fail "--check-config: no warning about the broker host"
grep -qF "warning: $w_db" plain_remote.out || h_fail "--check-config: no warning about the database host"
# The daemon would try to reach those hosts: it starts in a network namespace of its own with
# nothing but a loopback that is down, so no packet leaves this test.
unshare -n true 2>/dev/null || h_fail "unshare -n is not available (needs root)"
unshare -n setsid "$IDEMD" "${H_ALLOW_ROOT[@]}" -c plain_remote.conf </dev/null >plain_remote.start.out 2>&1 &
pr_pid=$!
h_wait_log plain_remote.start.out "$w_db" 1 20 || h_fail "no start-up warning about the database host"
kill -TERM -- -"$pr_pid" 2>/dev/null || true
wait "$pr_pid" || true
h_assert_eq "$(h_count_log plain_remote.start.out "$w_mq")" 1 "start-up warnings about the broker host"

# Starting the daemon with such a file fails the same way, before connecting anywhere.
rc=0
timeout 30 "$IDEMD" "${H_ALLOW_ROOT[@]}" -c durable.conf >durable.start.out 2>&1 || rc=$?
cat durable.start.out
((rc == 1)) || h_fail "idemd -c durable.conf exited $rc, expected 1"
grep -qF "durable.conf:4: queues.[0].declare.durable" durable.start.out ||
    h_fail "idemd -c durable.conf does not name durable.conf:4"

# order_key: its form; an ordered queue with workers > 1, without a delay tier, with dedup none;
# single_active_consumer twice.
ordered() # ordered FILE LINES...: a queue group with order_key and the given lines
{
    local f=$1
    shift
    {
        echo 'daemon = { log_level = "info"; };'
        echo 'database = { socket = "/nonexistent.sock"; user = "root"; database = "t"; };'
        echo 'queues = ('
        echo "  { name = \"q1\"; handler = \"$counter\";"
        printf '    %s\n' "$@"
        echo '  }'
        echo ');'
    } >"$f"
}
ordered order_key.conf 'order_key = "body:x";'
check_bad order_key.conf 5 "header:NAME"
ordered order_path.conf 'order_key = "json:a..b";'
check_bad order_path.conf 5 "empty field name"
ordered order_workers.conf 'order_key = "header:k";' 'workers = 2;'
check_bad order_workers.conf 6 "queues.[0].workers"
grep -qF "one worker per instance" order_workers.conf.out || h_fail "order_workers.conf: no reason given"
ordered order_delays.conf 'order_key = "json:order.id";' 'retry_delays_ms = [ ];'
check_bad order_delays.conf 6 "retry_delays_ms"
ordered order_dedup.conf 'order_key = "header:k";' 'dedup = "none";'
check_bad order_dedup.conf 6 "dedup"
ordered order_dl.conf 'order_key = "header:k";' 'order_dead_letter = "keep";'
check_bad order_dl.conf 6 "order_dead_letter"
ordered sac.conf 'declare = { single_active_consumer = true;' \
    '            arguments = { x-single-active-consumer = "true"; }; };'
check_bad sac.conf 5 "single_active_consumer"

# A good file (the servers need not be reachable: --check-config connects nowhere).
{
    h_conf_common t_bad_config
    cat <<CONF
queues = (
  { name = "q1"; handler = "$counter"; prefetch = 50; workers = 2; dedup = "table";
    declare = { dead_letter_queue = "q1.dlq"; bindings = ( { exchange = "x"; routing_key = "k"; } ); };
    settings = { sleep_ms = 1; }; },
  { name = "q2"; handler = "$H_PLUGINS/order_pay.so"; dedup = "none"; settings = { table = "orders"; }; },
  { name = "q3"; handler = "$counter"; order_key = "json:order.id"; order_dead_letter = "hold";
    declare = { single_active_consumer = true; }; }
);
CONF
} >good.conf
rc=0
"$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c good.conf >good.out 2>&1 || rc=$?
cat good.out
((rc == 0)) || h_fail "good.conf: --check-config exited $rc"
echo "t_bad_config: ok"
