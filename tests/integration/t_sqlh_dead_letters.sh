# t_sqlh_dead_letters: the SQL handler dead-letters, with the reason in idemd-error, a message missing a required field (naming its path), a wrong type and a check-constraint failure (the server's message), a body that is not JSON, an expect mismatch (led by the statement's business reason) and a duplicate key; on_duplicate = "ok" takes the duplicate as 0 rows; nothing of a failed message stays, the good ones commit.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_sqlh_dl
q=t_sqlh_dl.in
qd=t_sqlh_dl.dupok
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$q.retry.100" "$qd" "$qd.dlq" "$qd.retry.100"
h_sql "CREATE TABLE ledger (entry_id VARCHAR(64) PRIMARY KEY, account VARCHAR(32) NOT NULL,
         amount DECIMAL(12,2) NOT NULL, CONSTRAINT positive CHECK (amount > 0))"
h_sql "CREATE TABLE balance (account VARCHAR(32) PRIMARY KEY, amount DECIMAL(12,2) NOT NULL)"
h_sql "INSERT INTO balance VALUES ('a', 0)"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "sql"; workers = 1; max_attempts = 3; retry_delays_ms = [ 100 ];
    sql = ( { statement = "INSERT INTO ledger (entry_id, account, amount) VALUES (?, ?, ?)";
              params = [ "json:entry", "json:account", "json:amount" ]; },
            { statement = "UPDATE balance SET amount = amount + ? WHERE account = ?";
              params = [ "json:amount", "json:account" ]; expect = "1"; reason = "unknown account"; } ); },
  { name = "$qd"; handler = "sql"; workers = 1; max_attempts = 3; retry_delays_ms = [ 100 ];
    sql = ( { statement = "INSERT INTO ledger (entry_id, account, amount) VALUES (?, ?, ?)";
              params = [ "json:entry", "json:account", "json:amount" ]; on_duplicate = "ok"; },
            { statement = "UPDATE balance SET amount = amount + 1000 WHERE account = ?";
              params = [ "json:account" ]; expect = "1"; } ); }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
cat >pub.txt <<'PUB'
good1	{"entry": "e1", "account": "a", "amount": 1.25}
missing	{"entry": "e2", "amount": 1}
wrongtype	{"entry": "e3", "account": "a", "amount": "abc"}
check	{"entry": "e4", "account": "a", "amount": -5}
notjson	{"entry": "e5", "account": "a", "amount": 1
nobalance	{"entry": "e6", "account": "zz", "amount": 1}
dup	{"entry": "e1", "account": "a", "amount": 7}
good2	{"entry": "e7", "account": "a", "amount": 2.50}
PUB
h_assert_eq "$(h_mq publish -r "$q" <pub.txt)" "published 8 confirmed 8" "publisher"
h_wait_depth "$q.dlq" 6 60
h_wait_sql "SELECT amount FROM balance WHERE account = 'a'" 3.75 30
printf 'dupok\t{"entry": "e7", "account": "a", "amount": 9}\n' | h_mq publish -r "$qd" >/dev/null
h_wait_sql "SELECT amount FROM balance WHERE account = 'a'" 1003.75 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_mq get "$q.dlq" -n 6 >dlq.txt
reason()
{
    awk -F'\t' -v id="$1" '$1 == id { n = split($3, kv, ";"); for (i = 1; i <= n; i++)
        if (kv[i] ~ /^idemd-error=/) { sub(/^idemd-error=/, "", kv[i]); print kv[i] } }' dlq.txt
}
expect_reason()
{
    local got
    got=$(reason "$1")
    [[ "$got" == *"$2"* ]] || h_fail "dead letter $1: reason '$got' lacks '$3' ('$2')"
    h_log "dead letter $1: $got"
}
expect_reason missing "statement 1: required parameter json:account missing" "the path"
expect_reason wrongtype "statement 1: data error, not retried: mysql error 1366" "the server's error"
if h_db_is_mysql; then ck=3819; else ck=4025; fi
expect_reason check "statement 1: data error, not retried: mysql error $ck" "the check constraint"
expect_reason check "positive" "the constraint's name"
expect_reason notjson "body is not JSON" "not JSON"
expect_reason nobalance "unknown account: statement 2 affected 0 rows, expected 1" "the expect rule and its business reason"
expect_reason dup "statement 1: duplicate key, not retried: mysql error 1062" "the duplicate"
h_assert_eq "$(h_sql "SELECT GROUP_CONCAT(entry_id ORDER BY entry_id) FROM ledger")" "e1,e7" \
    "ledger rows: only the good messages' (nothing of a failed one stays)"
h_assert_eq "$(h_sql "SELECT amount FROM ledger WHERE entry_id = 'e7'")" "2.50" "e7 was not overwritten by dupok"
h_assert_eq "$(h_depth "$qd.dlq")" 0 "dead letters of the on_duplicate = ok queue"
h_assert_eq "$(h_count_log idemd.log 'outcome=retry')" 0 "retries (every failure here is the data's)"
echo "t_sqlh_dead_letters: ok"
