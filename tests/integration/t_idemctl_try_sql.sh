# t_idemctl_try_sql: idemctl try on a SQL handler queue (handler = "sql"): each statement's affected rows and the declared onward message are shown, every table unchanged after (row counts and CHECKSUM TABLE of ledger, balance, msg_id_record, idemd_outbox), a recorded id reported as a duplicate, an expect mismatch rejected with its reason (exit 1), a missing required field named in the reason; on a fresh install (no relay key yet) try prints no error or warning line; -v shows each bound value with its source and type.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_idemctl_try_sql
q=t_ictl_trysql.in
out=t_ictl_trysql.out
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$out"
h_mq declare "$out" >/dev/null || h_fail "declaring $out"
h_sql "CREATE TABLE ledger (entry_id VARCHAR(64) PRIMARY KEY, account VARCHAR(32) NOT NULL,
         amount DECIMAL(30,2) NOT NULL)"
h_sql "CREATE TABLE balance (account VARCHAR(32) PRIMARY KEY, amount DECIMAL(30,2) NOT NULL)"
h_sql "INSERT INTO balance VALUES ('a', 0), ('b', 0)"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "sql"; declare = { dead_letter_queue = "$q.dlq"; };
    sql = ( { statement = "INSERT INTO ledger (entry_id, account, amount) VALUES (?, ?, ?)";
              params = [ "msg:id", "json:account", "json:amount" ]; },
            { statement = "UPDATE balance SET amount = amount + ? WHERE account = ?";
              params = [ "json:amount", "json:account" ]; expect = "1"; } );
    publish = ( { exchange = ""; routing_key = "$out"; body = "body";
                  headers = { entry = "msg:id"; }; } ); }
);
CONF
} >idemd.conf
chmod go= idemd.conf
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }

# A fresh install (no worker has connected: no relay key yet): try works and says nothing at
# error or warning level about a state idemd makes itself.
rc=0
res=$(ctl try "$q" --body-json '{"account": "a", "amount": 0.5}' --id f-1 2>&1) || rc=$?
h_assert_eq "$rc" 0 "try on a fresh install"
[[ "$res" != *"error:"* && "$res" != *"warning:"* && "$res" != *"idemd_key"* ]] ||
    h_fail "try on a fresh install printed an error or warning line: $res"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM msg_id_record")" 0 "records after the fresh try"

# A real run first: e-1 posts 1.10 to account a (recorded, relayed).
h_daemon_start idemd.conf idemd.log
h_assert_eq "$(printf 'e-1\t{"account": "a", "amount": 1.10}\n' | h_mq publish -r "$q")" \
    "published 1 confirmed 1" "publish"
h_wait_sql "SELECT COUNT(*), (SELECT COUNT(*) FROM idemd_outbox) FROM msg_id_record" $'1\t0' 30 ||
    h_fail "e-1 not committed and relayed"
h_wait_depth "$out" 1 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

snap()
{
    h_sql "SELECT (SELECT COUNT(*) FROM ledger), (SELECT SUM(amount) FROM balance),
                  (SELECT COUNT(*) FROM msg_id_record), (SELECT COUNT(*) FROM idemd_outbox)"
    h_sql "CHECKSUM TABLE ledger, balance, msg_id_record, idemd_outbox, idemd_attempt"
}
before=$(snap)
h_assert_eq "$(head -n1 <<<"$before")" $'1\t1.10\t1\t0' "rows before"

# OK: both statements' affected rows, and the onward message it would send.
rc=0
res=$(ctl try "$q" --body-json '{"account": "b", "amount": 0.10}' --id e-2) || rc=$?
h_assert_eq "$(snap)" "$before" "tables after an ok try"
h_assert_eq "$rc" 0 "exit status of an ok try"$'\n'"$res"
for want in "verdict: ok" "log debug: statement 1 affected 1 row(s)" "log debug: statement 2 affected 1 row(s)" \
    "record: not recorded yet: a worker would run it"; do
    h_assert_eq "$(grep -cxF "$want" <<<"$res")" 1 "line '$want' in"$'\n'"$res"
done
h_assert_eq "$(grep -c "^would publish: exchange= routing_key=$out " <<<"$res")" 1 "onward message in"$'\n'"$res"
h_assert_eq "$(grep -cxF "  header entry=e-2" <<<"$res")" 1 "onward header in"$'\n'"$res"

# -v: each bound value, its source and how it is bound.
res=$(ctl try -v "$q" --body-json '{"account": "b", "amount": 0.10}' --id e-2 2>&1) || h_fail "try -v: status $?"
for want in "log debug: statement 1: params.[0] (msg:id) = 'e-2' (text)" \
    "log debug: statement 1: params.[1] (json:account) = 'b' (text)" \
    "log debug: statement 1: params.[2] (json:amount) = 0.10 (exact decimal)" \
    "log debug: statement 2: params.[0] (json:amount) = 0.10 (exact decimal)"; do
    h_assert_eq "$(grep -cxF "$want" <<<"$res")" 1 "line '$want' in"$'\n'"$res"
done
h_assert_eq "$(snap)" "$before" "tables after a -v try"

# --json: the statements' lines and the onward message.
res=$(ctl --json try "$q" --body-json '{"account": "a", "amount": 2}' --id e-3) || h_fail "try --json: status $?"
got=$(python3 -c 'import json, sys
d = json.load(sys.stdin)
print(d["verdict"], d["rolled_back"], [l["text"] for l in d["log"]], len(d["publish"]))' <<<"$res") ||
    h_fail "try --json does not parse: $res"
h_assert_eq "$got" "ok True ['statement 1 affected 1 row(s)', 'statement 2 affected 1 row(s)'] 1" "try --json"
h_assert_eq "$(snap)" "$before" "tables after a --json try"

# A recorded id: a worker would ack it as a duplicate; nothing runs.
rc=0
res=$(ctl try "$q" --body-json '{"account": "a", "amount": 1.10}' --id e-1) || rc=$?
h_assert_eq "$rc" 0 "exit status of a duplicate"
h_assert_eq "$(grep -cxF "verdict: duplicate" <<<"$res")" 1 "duplicate verdict in"$'\n'"$res"
h_assert_eq "$(grep -c "^log debug: statement" <<<"$res")" 0 "a duplicate runs no statement"

# expect = "1" on an account that does not exist: statement 2 affects 0 rows: reject, exit 1.
rc=0
res=$(ctl try "$q" --body-json '{"account": "zz", "amount": 1}' --id e-4) || rc=$?
h_assert_eq "$rc" 1 "exit status of a reject"$'\n'"$res"
h_assert_eq "$(grep -cxF 'verdict: reject' <<<"$res")" 1 "reject verdict in"$'\n'"$res"
h_assert_eq "$(grep -c '^reason: .*statement 2 affected 0 rows, expected 1' <<<"$res")" 1 "reject reason in"$'\n'"$res"

# A required field missing: rejected, the reason names the path.
rc=0
res=$(ctl try "$q" --body-json '{"account": "a"}' --id e-5) || rc=$?
h_assert_eq "$rc" 1 "exit status of a missing field"
h_assert_eq "$(grep -c '^reason: .*amount' <<<"$res")" 1 "missing field named in"$'\n'"$res"

h_assert_eq "$(snap)" "$before" "tables after every try"
h_assert_eq "$(h_depth "$q")" 0 "nothing published to the queue"
h_assert_eq "$(h_depth "$out")" 1 "only the real run's onward message"
echo "t_idemctl_try_sql: ok"
