# t_sqlh_exact: the SQL handler binds JSON numbers exactly: 19-digit integers and 0.10 x 1000 are summed into DECIMAL without a cent lost, 2^53+1 and INT64_MAX reach a BIGINT as sent; strings are decoded, an optional absent field is NULL, a boolean is 1, and each accepted message sends its declared onward message through the outbox.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_sqlh_exact
q=t_sqlh_exact.in
out=t_sqlh_exact.out
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$out"
h_sql "CREATE TABLE ledger (entry_id VARCHAR(64) PRIMARY KEY, account VARCHAR(32) NOT NULL,
         amount DECIMAL(30,2) NOT NULL, big BIGINT NULL, note VARCHAR(64) NULL, flag TINYINT NULL)"
h_sql "CREATE TABLE balance (account VARCHAR(32) PRIMARY KEY, amount DECIMAL(30,2) NOT NULL)"
h_sql "INSERT INTO balance VALUES ('cents', 0), ('huge', 0), ('misc', 0), ('precise', 0), ('wide', 0)"
h_mq declare "$out" >/dev/null || h_fail "declaring $out"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "sql"; workers = 2; batch_size = 50; batch_wait_ms = 100;
    sql = ( { statement = "INSERT INTO ledger (entry_id, account, amount, big, note, flag)
                           VALUES (?, ?, ?, ?, ?, ?)";
              params = [ "msg:id", "json:account", "json:amount", "json:big?", "json:note?",
                         "json:flag?" ]; },
            { statement = "UPDATE balance SET amount = amount + ? WHERE account = ?";
              params = [ "json:amount", "json:account" ]; expect = "1"; } );
    publish = ( { exchange = ""; routing_key = "$out"; body = "json:account";
                  headers = { entry = "msg:id"; note = "json:note?"; }; } ); }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
{
    for i in $(seq 1 1000); do printf 'c%d\t{"account": "cents", "amount": 0.10}\n' "$i"; done
    for i in $(seq 1 5); do printf 'h%d\t{"account": "huge", "amount": 1234567890123456789}\n' "$i"; done
    printf 'b1\t{"account": "misc", "amount": 5, "big": 9007199254740993, "note": "caf\\u00e9 \\"q\\"", "flag": true}\n'
    printf 'b2\t{"account": "misc", "amount": 1e-2, "big": 9223372036854775807}\n'
    # 19 significant digits with a fraction, and an integer past 64 bits: a double keeps 15-17.
    printf 'b3\t{"account": "precise", "amount": 12345678901234567.89}\n'
    printf 'b4\t{"account": "wide", "amount": 123456789012345678901}\n'
} >pub.txt
h_assert_eq "$(h_mq publish -r "$q" <pub.txt)" "published 1009 confirmed 1009" "publisher"
h_wait_sql "SELECT COUNT(*) FROM ledger" 1009 90
h_wait_depth "$out" 1009 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_sql "SELECT account, amount FROM balance ORDER BY account")" \
    $'cents\t100.00\nhuge\t6172839450617283945.00\nmisc\t5.01\nprecise\t12345678901234567.89\nwide\t123456789012345678901.00' \
    "balances (0.10 x 1000, 1234567890123456789 x 5, 5 + 0.01, 19 digits with cents, 21 digits)"
h_assert_eq "$(h_sql "SELECT SUM(amount) FROM ledger WHERE account = 'huge'")" "6172839450617283945.00" "19-digit sum"
h_assert_eq "$(h_sql "SELECT big, note, flag FROM ledger WHERE entry_id = 'b1'")" \
    $'9007199254740993\tcafé "q"\t1' "2^53+1, decoded string, true"
h_assert_eq "$(h_sql "SELECT big, note IS NULL, flag IS NULL FROM ledger WHERE entry_id = 'b2'")" \
    $'9223372036854775807\t1\t1' "INT64_MAX, absent optional fields NULL"
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters"
h_mq get "$out" -n 1009 >onward.txt
h_assert_eq "$(grep -c $'^[^\t]*\tcents\t' onward.txt)" 1000 "onward messages of cents (body = the account)"
h_assert_eq "$(grep -c 'entry=h3' onward.txt)" 1 "the onward message of h3 carries its entry header"
h_assert_eq "$(grep -c 'note=' onward.txt)" 1 "only b1 has a note header"
echo "t_sqlh_exact: ok"
