# t_sqlh_check_config: --check-config prepares the SQL handler's statements on the configured database: a misspelt column and a wrong placeholder count fail naming the file, the statement's line and index and the server's message, an unknown source and a JSONPath spelling (json:$.x) fail at load; --check-config --offline checks the rest without a database and says the statements were not prepared; idemd does not start with a broken statement; a reload with a broken statement keeps the old one running.
db=t_sqlh_check
q=t_sqlh_check.in
h_new_db "$db"
h_sql "CREATE TABLE ledger (entry_id VARCHAR(64) PRIMARY KEY, account VARCHAR(32) NOT NULL, amount DECIMAL(12,2) NOT NULL)"
h_sql "CREATE TABLE ledger2 LIKE ledger"
# conf STATEMENT2 PARAMS2: the queue's second statement (the first is always good), one group a line.
conf()
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "sql"; workers = 1;
    sql = (
      { statement = "INSERT INTO ledger (entry_id, account, amount) VALUES (?, ?, ?)"; params = [ "msg:id", "json:account", "json:amount" ]; },
      { statement = "$1"; params = $2; } # second
    ); }
);
CONF
}
line=$(conf x '[ ]' | grep -n '# second' | cut -d: -f1)
check()
{
    local rc=0
    "$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c idemd.conf >check.out 2>&1 || rc=$?
    echo "$rc"
}
good="INSERT INTO ledger2 (entry_id, account, amount) VALUES (?, ?, ?)"
good_params='[ "msg:id", "json:account", "json:amount" ]'

conf "$good" "$good_params" >idemd.conf
chmod go= idemd.conf
h_assert_eq "$(check)" 0 "--check-config on good statements ($(cat check.out))"
grep -c "configuration OK" check.out >/dev/null || h_fail "no 'configuration OK': $(cat check.out)"

conf "INSERT INTO ledger2 (entry_id, account, amout) VALUES (?, ?, ?)" "$good_params" >idemd.conf
h_assert_eq "$(check)" 1 "--check-config on a misspelt column"
out=$(cat check.out)
want="idemd.conf:$line: queues.[0].sql.[1].statement: statement 2: the server refused it: mysql error 1054: Unknown column 'amout'"
[[ "$out" == *"$want"* ]] || h_fail "misspelt column: got '$out', expected it to hold '$want'"

conf "INSERT INTO ledger_typo (entry_id) VALUES (?)" '[ "msg:id" ]' >idemd.conf
h_assert_eq "$(check)" 1 "--check-config on a misspelt table"
out=$(cat check.out)
want="idemd.conf:$line: queues.[0].sql.[1].statement: statement 2: the server refused it: mysql error 1146:"
[[ "$out" == *"$want"* && "$out" == *ledger_typo* ]] || h_fail "misspelt table: got '$out', expected '$want'"

conf "INSERT INTO ledger2 (entry_id, account) VALUES (?, ?)" "$good_params" >idemd.conf
h_assert_eq "$(check)" 1 "--check-config on a wrong placeholder count"
out=$(cat check.out)
want="idemd.conf:$line: queues.[0].sql.[1].statement: statement 2 has 2 placeholders (?) but params lists 3 sources"
[[ "$out" == *"$want"* ]] || h_fail "placeholder count: got '$out', expected '$want'"

conf "$good" '[ "msg:id", "jsn:account", "json:amount" ]' >idemd.conf
h_assert_eq "$(check)" 1 "--check-config on an unknown source"
out=$(cat check.out)
want="idemd.conf:$line: queues.[0].sql.[1].params.[1]: unknown source \"jsn:account\""
[[ "$out" == *"$want"* ]] || h_fail "unknown source: got '$out', expected '$want'"

# A JSONPath spelling is refused at load, with idemd's spelling.
conf "$good" '[ "msg:id", "json:$.account", "json:amount" ]' >idemd.conf
h_assert_eq "$(check)" 1 "--check-config on json:\$.account"
out=$(cat check.out)
want="idemd.conf:$line: queues.[0].sql.[1].params.[1]: json:\$.account: a JSONPath; idemd's paths start at the body's top level without \$: write json:account"
[[ "$out" == *"$want"* ]] || h_fail "JSONPath source: got '$out', expected '$want'"

# --offline: a build host without a database checks all the rest and says the statements were
# not prepared; what the load refuses (a source, a statement that would end the transaction)
# is still refused. The database here is unreachable: a socket that does not exist.
offline()
{
    local rc=0
    sed "s|socket = \"[^\"]*\";|socket = \"$PWD/no-such.sock\";|" idemd.conf >offline.conf
    chmod go= offline.conf
    "$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config --offline -c offline.conf >check.out 2>&1 || rc=$?
    echo "$rc"
}
conf "INSERT INTO ledger2 (entry_id, account, amout) VALUES (?, ?, ?)" "$good_params" >idemd.conf
h_assert_eq "$(offline)" 0 "--check-config --offline without a database ($(cat check.out))"
out=$(cat check.out)
want="offline.conf: configuration OK (1 queue); offline: the SQL handlers' statements were NOT prepared on a database"
[[ "$out" == *"$want"* ]] || h_fail "--offline: got '$out', expected '$want'"
conf "COMMIT" '[ ]' >idemd.conf
h_assert_eq "$(offline)" 1 "--check-config --offline on COMMIT"
out=$(cat check.out)
want="queues.[0].sql.[1].statement: statement 2 (COMMIT) would end idemd's transaction"
[[ "$out" == *"$want"* ]] || h_fail "--offline on COMMIT: got '$out', expected '$want'"
rc=0
"$IDEMD" "${H_ALLOW_ROOT[@]}" --offline -c offline.conf >check.out 2>&1 || rc=$?
h_assert_eq "$rc" 2 "--offline without --check-config"

# idemd does not start with a broken statement.
conf "INSERT INTO ledger2 (entry_id, account, amout) VALUES (?, ?, ?)" "$good_params" >idemd.conf
h_daemon_bg idemd.conf start.log
deadline=$((SECONDS + 30))
while h_daemon_alive && ((SECONDS < deadline)); do sleep 0.1; done
h_daemon_alive && h_fail "idemd kept running with a broken statement"
rc=0
wait "$H_DAEMON_PID" || rc=$?
H_DAEMON_PID=
((rc != 0)) || h_fail "idemd exited 0 with a broken statement"
h_assert_eq "$(h_count_log start.log "queues.\[0\].sql.\[1\].statement: statement 2: the server refused it: mysql error 1054")" 1 "the start refusal in the log"
h_assert_eq "$(h_count_log start.log "ready:")" 0 "ready lines of the refused start"

# A reload with a broken statement keeps the old one.
conf "$good" "$good_params" >idemd.conf
h_daemon_start idemd.conf idemd.log
printf 'm1\t{"account": "a", "amount": 1}\n' | h_mq publish -r "$q" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM ledger2" 1 30
conf "INSERT INTO ledger2 (entry_id, account, amout) VALUES (?, ?, ?)" "$good_params" >idemd.conf
kill -HUP "$H_DAEMON_PID"
h_wait_log idemd.log "reload failed, keeping the running configuration" 1 30
h_assert_eq "$(h_count_log idemd.log "queues.\[0\].sql.\[1\].statement: statement 2: the server refused it: mysql error 1054")" 1 "the reload's reason in the log"
h_assert_eq "$(h_count_log idemd.log "draining queue")" 0 "queues drained by the refused reload"
printf 'm2\t{"account": "a", "amount": 2}\n' | h_mq publish -r "$q" >/dev/null
h_wait_sql "SELECT COUNT(*) FROM ledger2" 2 30
h_assert_eq "$(h_sql "SELECT GROUP_CONCAT(entry_id ORDER BY entry_id) FROM ledger")" "m1,m2" "the first statement ran for both"
h_daemon_alive || h_fail "idemd died"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_sqlh_check_config: ok"
