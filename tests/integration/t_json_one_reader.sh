# t_json_one_reader: one reader of message bodies (src/json_body.c): on a SQL-handler queue (json:a.b parameter) and on an order_key queue (json:a.b key), bodies that are not I-JSON (a member name with U+0000, a duplicate parent, names equal once unescaped, invalid UTF-8, a lone surrogate) and a key value holding U+0000 are dead-lettered with the reason and apply nothing, never retried; a clean body is applied once.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_json_one
qs=t_json_one.sql # handler = "sql", binds json:a.b
qo=t_json_one.ord # ordered.so, order_key = json:a.b
h_new_db "$db"
c_fresh_queues $qs $qs.dlq $qs.retry.200 $qo $qo.dlq $qo.retry.200
h_sql "CREATE TABLE kv (msg_id VARCHAR(64) PRIMARY KEY, v VARCHAR(64) NOT NULL)"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$qs"; handler = "sql"; workers = 1; retry_delays_ms = [ 200 ];
    sql = ( { statement = "INSERT INTO kv (msg_id, v) VALUES (?, ?)"; params = [ "msg:id", "json:a.b" ]; } ); },
  { name = "$qo"; handler = "$H_TEST_PLUGINS/ordered.so"; order_key = "json:a.b"; retry_delays_ms = [ 200 ]; }
);
CONF
} >idemd.conf
# The bodies as written (\u escapes stay text); badutf8 is the overlong C0 AF, raw.
{
    cat <<'PUB'
nulname	{"a":{"b":"good","b\u0000x":"evil"}}
dupparent	{"a":{"b":"old"},"a":{"b":"new"}}
escdup	{"a":{"b":"x","\u0062":"y"}}
lonesur	{"a":{"b":"\ud800"}}
nulval	{"a":{"b":"k\u0000"}}
clean	{"a":{"b":"k1"}}
clean	{"a":{"b":"k1"}}
PUB
    printf 'badutf8\t{"a":{"b":"\xc0\xaf"}}\n'
} >pub.txt
h_daemon_start idemd.conf idemd.log
for q in $qs $qo; do
    h_assert_eq "$(h_mq publish -r "$q" <pub.txt)" "published 8 confirmed 8" "publisher ($q)"
done
h_wait_depth "$qs.dlq" 6 30
h_wait_depth "$qo.dlq" 6 30
h_wait_log idemd.log "outcome=(ok|duplicate) queue=$qs id=clean " 2 30
h_wait_log idemd.log "outcome=(ok|duplicate) queue=$qo id=clean " 2 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# Applied once, the clean body's value only.
h_assert_eq "$(h_sql "SELECT CONCAT(msg_id, '=', v) FROM kv ORDER BY msg_id")" "clean=k1" "kv rows ($qs)"
h_assert_eq "$(h_sql "SELECT CONCAT(msg_id, '=', okey) FROM order_effects WHERE queue = '$qo' ORDER BY id")" "clean=" "effects ($qo)"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM idemd_order_block")" 0 "blocked keys"
h_assert_eq "$(h_count_log idemd.log 'outcome=retry')" 0 "retries (a refused body is never retried)"

for q in $qs $qo; do
    h_assert_eq "$(h_depth "$q")" 0 "left in $q"
    h_assert_eq "$(h_depth "$q.retry.200")" 0 "in $q's retry queue"
    h_mq get "$q.dlq" -n 6 >"letters-$q.txt"
    expect() { c_expect_reason "letters-$q.txt" "$@"; }
    expect nulname 'body is not I-JSON: a member name holds U+0000 (\\u0000) at $.a.b\\x00x'
    expect dupparent 'body is not I-JSON: duplicate member "a" at $'
    expect escdup 'body is not I-JSON: duplicate member "b" at $.a'
    expect badutf8 'body is not I-JSON: invalid UTF-8 at byte'
    expect lonesur 'body is not I-JSON: a high surrogate \\uD800 without its low surrogate'
    expect nulval 'the string holds U+0000 (\\u0000)'
done
echo "t_json_one_reader: ok"
