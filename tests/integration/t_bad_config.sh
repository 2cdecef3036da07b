# t_bad_config: --check-config reports FILE:LINE and the setting for bad files, exits 0 for a good one.
counter=$H_TEST_PLUGINS/counter.so

# check FILE LINE WORD: --check-config must fail and print FILE:LINE and WORD.
check_bad()
{
    local f=$1 line=$2 word=$3 rc=0
    "$IDEMD" --check-config -c "$f" >"$f.out" 2>&1 || rc=$?
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

# A good file (the servers need not be reachable: --check-config connects nowhere).
{
    h_conf_common t_bad_config
    cat <<CONF
queues = (
  { name = "q1"; handler = "$counter"; prefetch = 50; workers = 2; dedup = "table";
    declare = { dead_letter_queue = "q1.dlq"; bindings = ( { exchange = "x"; routing_key = "k"; } ); };
    settings = { sleep_ms = 1; }; },
  { name = "q2"; handler = "$H_PLUGINS/order_pay.so"; dedup = "none"; settings = { table = "orders"; }; }
);
CONF
} >good.conf
rc=0
"$IDEMD" --check-config -c good.conf >good.out 2>&1 || rc=$?
cat good.out
((rc == 0)) || h_fail "good.conf: --check-config exited $rc"
echo "t_bad_config: ok"
