# t_sqlh_ledger_chaos: the issue's ledger example (an INSERT of the entry and an UPDATE of the balance with expect = "1", both from the JSON body; a third statement paces it) under kill -9 of the workers twice and a RabbitMQ restart, with every 7th message published twice: every balance exact to the cent and each entry once.
source "$H_ROOT/tests/chaos/lib.sh"
trap c_servers_ensure EXIT # never leave the shared RabbitMQ down for the next cases
db=t_sqlh_ledger
q=t_sqlh_ledger.post
n=4000
h_new_db "$db"
c_fresh_queues "$q" "$q.dlq" "$q.retry.300"
h_sql "CREATE TABLE ledger (entry_id VARCHAR(64) PRIMARY KEY, account VARCHAR(32) NOT NULL,
         amount DECIMAL(14,2) NOT NULL)"
h_sql "CREATE TABLE balance (account VARCHAR(32) PRIMARY KEY, amount DECIMAL(14,2) NOT NULL)"
h_sql "INSERT INTO balance SELECT CONCAT('acct', seq - 1), 0 FROM $(h_seq 20)"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "ledger.post"; handler = "sql"; workers = 2; prefetch = 100; batch_size = 50;
    retry_delays_ms = [ 300 ];
    sql = ( { statement = "INSERT INTO ledger (entry_id, account, amount) VALUES (?, ?, ?)";
              params = [ "msg:id", "json:account", "json:amount" ]; },
            { statement = "UPDATE balance SET amount = amount + ? WHERE account = ?";
              params = [ "json:amount", "json:account" ]; expect = "1"; },
            { statement = "DO SLEEP(0.004)"; } ); }
);
CONF
} | sed "s/\"ledger.post\"/\"$q\"/" >idemd.conf
h_daemon_start idemd.conf idemd.log
# Amounts from 1.00 to 99.99 (cents that a double would not hold; never 0, which changes no row), every 7th message twice.
awk -v n=$n 'BEGIN { for (i = 1; i <= n; i++) {
        l = sprintf("e%d\t{\"account\": \"acct%d\", \"amount\": %d.%02d}", i, i % 20, (i * 37) % 99 + 1, (i * 53) % 100)
        print l; if (i % 7 == 0) print l } }' >pub.txt
want=$(awk -F'\t' '!seen[$1]++ { split($2, f, "\""); a = f[4]; v = $2; sub(/.*"amount": /, "", v); sub(/}.*/, "", v)
        split(v, p, "."); cents[a] += p[1] * 100 + p[2] }
    END { for (a in cents) printf "%s\t%d.%02d\n", a, int(cents[a] / 100), cents[a] % 100 }' pub.txt | sort)
half=$(awk -F'\t' '$1 == "e2000" { print NR; exit }' pub.txt)
head -n "$half" pub.txt >pub1.txt
tail -n +"$((half + 1))" pub.txt >pub2.txt
h_mq publish -r "$q" --rate 800 <pub1.txt >pub.out 2>pub.err &
pub=$!
for at in 600 1400; do
    h_wait_sql "SELECT COUNT(*) >= $at FROM ledger" 1 90
    workers=$(pgrep -P "$H_DAEMON_PID" | tr '\n' ' ')
    [[ -n "$workers" ]] || h_fail "no workers to kill"
    # shellcheck disable=SC2086 # one word per pid
    kill -KILL $workers
    h_log "killed -9 workers $workers at $(h_sql "SELECT COUNT(*) FROM ledger") entries"
done
wait "$pub" || h_fail "publisher failed: $(cat pub.err)"
total=$(wc -l <pub1.txt)
h_assert_eq "$(cat pub.out)" "published $total confirmed $total" "first publisher"
# The rest as a backlog, and RabbitMQ restarted while idemd works through it.
total=$(wc -l <pub2.txt)
h_assert_eq "$(h_mq publish -r "$q" <pub2.txt)" "published $total confirmed $total" "second publisher"
h_wait_sql "SELECT COUNT(*) >= 2300 FROM ledger" 1 60
at=$(h_sql "SELECT COUNT(*) FROM ledger")
((at < n - 300)) || h_fail "only $((n - at)) entries left at the broker restart: nothing to test"
c_rabbit_restart TERM
h_daemon_alive || h_fail "idemd died while RabbitMQ was down"
h_log "RabbitMQ restarted at $at entries"
h_wait_sql "SELECT COUNT(*) FROM ledger" "$n" 120
h_wait_depth "$q" 0 60
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_sql "SELECT account, amount FROM balance ORDER BY account")" "$want" "every balance, to the cent"
h_assert_eq "$(h_sql "SELECT COUNT(*), COUNT(DISTINCT entry_id) FROM ledger")" "$n"$'\t'"$n" "each entry once"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM ledger l JOIN balance b USING (account)")" "$n" "entries of known accounts"
h_assert_eq "$(h_depth "$q.dlq")" 0 "dead letters"
h_assert_eq "$(h_count_log idemd.log "outcome=reject ")" 0 "reject outcomes"
echo "t_sqlh_ledger_chaos: ok ($(h_count_log idemd.log "outcome=duplicate ") duplicates absorbed)"
