# t_idemctl_try: idemctl try runs order_pay.so on one message through the worker's transaction and rolls it back: every table unchanged (row counts and CHECKSUM TABLE of orders, its log, msg_id_record, idemd_outbox, idemd_attempt), OK with its onward message, a recorded id reported as a duplicate (run only with --force-run, its DEBUG line shown), a REJECT with its reason and exit 1, --from-dlq leaves the letter in the dead letter queue, --json parses, dedup = "none" rolled back too.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_idemctl_try
q=t_ictl_try.q
dlq=t_ictl_try.dlq
qn=t_ictl_try.none
qo=t_ictl_try.ordered
qt=t_ictl_try.trades
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
c_fresh_queues "$q" "$dlq" "$qn" "$qo" "$qt" t_ictl_try.paid
h_mq declare t_ictl_try.paid >/dev/null
h_mysql "$db" <"$H_ROOT/bench/order_pay_log.sql"
h_sql "INSERT INTO orders(id) VALUES (1), (2), (3), (4), (5)"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_PLUGINS/order_pay.so"; prefetch = 10; batch_size = 5;
    declare = { dead_letter_queue = "$dlq"; };
    settings = { table = "orders"; log_table = "order_pay_log"; paid_exchange = "";
                 paid_routing_key = "t_ictl_try.paid"; }; },
  { name = "$qn"; handler = "$H_PLUGINS/order_pay.so"; dedup = "none"; prefetch = 10;
    settings = { table = "orders"; }; },
  { name = "$qo"; handler = "$H_PLUGINS/order_pay.so"; order_key = "json:orderId"; workers = 1;
    settings = { table = "orders"; }; },
  { name = "$qt"; handler = "$H_PLUGINS/trade_sync.so"; id_header = "x-id"; }
);
CONF
} >idemd.conf
chmod go= idemd.conf
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }

# A real run first: p-1 pays order 1 (recorded, logged); "unk" pays order 9, which does not
# exist yet: dead-lettered.
h_daemon_start idemd.conf idemd.log
out=$(printf 'p-1\t{"orderId": 1}\nunk\t{"orderId": 9}\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 2 confirmed 2" "publish"
h_wait_depth "$dlq" 1 60
h_wait_sql "SELECT COUNT(*), (SELECT COUNT(*) FROM idemd_outbox) FROM msg_id_record" $'1\t0' 30 ||
    h_fail "p-1 not committed and relayed"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_sql "INSERT INTO orders(id) VALUES (9)"
h_assert_eq "$(h_depth "$dlq")" 1 "letters before"

snap()
{
    h_sql "SELECT (SELECT COUNT(*) FROM orders), (SELECT COUNT(*) FROM orders WHERE status = 2),
                  (SELECT COUNT(*) FROM order_pay_log), (SELECT COUNT(*) FROM msg_id_record),
                  (SELECT COUNT(*) FROM idemd_outbox), (SELECT COUNT(*) FROM idemd_attempt)"
    h_sql "CHECKSUM TABLE orders, order_pay_log, msg_id_record, idemd_outbox, idemd_attempt,
                          idemd_order_block, idemd_order_waiter, trades"
}
before=$(snap)
h_assert_eq "$(head -n1 <<<"$before")" $'6\t1\t1\t1\t0\t0' "rows before"

# OK: order 2 would be paid, logged, and order.paid sent.
rc=0
out=$(ctl try "$q" --body-json '{"orderId": 2}' --id p-2) || rc=$?
h_assert_eq "$(snap)" "$before" "tables after an ok try"
h_assert_eq "$rc" 0 "exit status of an ok try"$'\n'"$out"
for want in "id: p-2 (attempt 1)" "record: not recorded yet: a worker would run it" "verdict: ok" \
    "would publish: exchange= routing_key=t_ictl_try.paid msg_id=t_ictl_try.q:p-2:0 content_type=application/json body=14 bytes"; do
    h_assert_eq "$(grep -cxF "$want" <<<"$out")" 1 "line '$want' in"$'\n'"$out"
done

# --json: one object.
out=$(ctl --json try "$q" --body-json '{"orderId": 3}' --id p-3) || h_fail "try --json: status $?"
got=$(python3 -c 'import json, sys
d = json.load(sys.stdin)
p = d["publish"]
print(d["verdict"], d["recorded"], d["ran"], d["rolled_back"], d["id"], len(p), p[0]["routing_key"], p[0]["body_bytes"], p[0]["msg_id"])' <<<"$out") ||
    h_fail "try --json does not parse: $out"
h_assert_eq "$got" "ok False True True p-3 1 t_ictl_try.paid 14 t_ictl_try.q:p-3:0" "try --json"

# A recorded id: a worker would ack it as a duplicate; not run.
rc=0
out=$(ctl try "$q" --body-json '{"orderId": 1}' --id p-1) || rc=$?
h_assert_eq "$rc" 0 "exit status of a duplicate"
h_assert_eq "$(grep -c "^record: already recorded: a worker would ack it as a duplicate" <<<"$out")" 1 \
    "duplicate reported in"$'\n'"$out"
h_assert_eq "$(grep -cxF "verdict: duplicate" <<<"$out")" 1 "duplicate verdict"
h_assert_eq "$(grep -cE "^record: looked up in msg_id_record for consumer $q, committed at 20[0-9-]{8} [0-9:]{8}\$" <<<"$out")" 1 \
    "what the record check found in"$'\n'"$out"
h_assert_eq "$(grep -c "^would publish\|^log " <<<"$out")" 0 "a duplicate runs nothing"
# ... with --force-run it runs, without the record INSERT: order 1 is paid, so ok, and the
# handler's own DEBUG line is shown although idemctl logs warnings only.
out=$(ctl --json try "$q" --body-json '{"orderId": 1}' --id p-1 --force-run) || h_fail "--force-run: status $?"
got=$(python3 -c 'import json, sys
d = json.load(sys.stdin)
print(d["verdict"], d["recorded"], d["recorded_at"] is not None, d["ran"], d["forced"], [l["level"] + ": " + l["text"] for l in d["log"]])' <<<"$out")
h_assert_eq "$got" "ok True True True True ['debug: order_pay: order 1 was already paid']" "--force-run on a recorded id"

# REJECT: its reason, exit 1.
rc=0
out=$(ctl try "$q" --body-json '{"orderId": 99}' --id p-99) || rc=$?
h_assert_eq "$rc" 1 "exit status of a reject"
h_assert_eq "$(grep -cxF 'verdict: reject' <<<"$out")" 1 "reject verdict in"$'\n'"$out"
h_assert_eq "$(grep -cxF 'reason: order 99 does not exist in `orders`' <<<"$out")" 1 "reject reason"
h_assert_eq "$(snap)" "$before" "tables after a reject"

# --from-dlq: the letter, as a replay would send it (order 9 exists now): ok, and still there.
out=$(ctl try "$q" --from-dlq "$dlq" --id unk) || h_fail "try --from-dlq: status $?"$'\n'"$out"
h_assert_eq "$(grep -cxF "verdict: ok" <<<"$out")" 1 "letter's verdict in"$'\n'"$out"
h_assert_eq "$(grep -cxF "id: unk (attempt 1)" <<<"$out")" 1 "letter's id"
h_assert_eq "$(h_depth "$dlq")" 1 "letters after try --from-dlq"
rc=0
out=$(ctl try "$q" --from-dlq "$dlq" --id nosuch 2>&1) || rc=$?
h_assert_eq "$rc" 1 "exit status for a letter not there"
h_assert_eq "$(h_depth "$dlq")" 1 "letters after a miss"

# dedup = "none": nothing to record; the rollback still undoes the handler.
out=$(ctl try "$qn" --body-json '{"orderId": 4}') || h_fail "dedup none: status $?"$'\n'"$out"
h_assert_eq "$(grep -cxF 'verdict: ok' <<<"$out")" 1 "dedup none verdict in"$'\n'"$out"
h_assert_eq "$(grep -c '^id: none' <<<"$out")" 1 "dedup none without an id"

# An ordered queue: the key's rows go through the same rollback, ok or rejected.
out=$(ctl try "$qo" --body-json '{"orderId": 5}' --id o-5) || h_fail "ordered: status $?"$'\n'"$out"
h_assert_eq "$(grep -cxF 'verdict: ok' <<<"$out")" 1 "ordered queue verdict in"$'\n'"$out"
rc=0
out=$(ctl try "$qo" --body-json '{"orderId": 77}' --id o-77) || rc=$?
h_assert_eq "$rc" 1 "ordered queue reject"$'\n'"$out"

# trade_sync.so, the body from a file, the id from the queue's id_header.
printf '{"orderId": 3}' >paid.json
out=$(ctl try "$qt" --body paid.json --header x-id=t-3) || h_fail "trade_sync: status $?"$'\n'"$out"
h_assert_eq "$(grep -cxF 'verdict: ok' <<<"$out")" 1 "trade_sync verdict in"$'\n'"$out"
h_assert_eq "$(grep -cxF 'id: t-3 (attempt 1)' <<<"$out")" 1 "id from the id_header"
rc=0
out=$(ctl try "$qt" --body-json '{"orderId": "x"}' --header x-id=t-x) || rc=$?
h_assert_eq "$rc" 1 "trade_sync reject"
h_assert_eq "$(grep -cxF 'reason: body is not {"orderId": N} with a positive integer N' <<<"$out")" 1 \
    "trade_sync reason in"$'\n'"$out"

# Usage errors: exit 2.
rc=0
ctl try "$q" >/dev/null 2>&1 || rc=$?
h_assert_eq "$rc" 2 "try without a message"
rc=0
ctl try nosuch.queue --body-json '{}' >/dev/null 2>&1 || rc=$?
h_assert_eq "$rc" 2 "try on a queue not configured"

h_assert_eq "$(snap)" "$before" "tables at the end"
h_assert_eq "$(h_depth "$dlq")" 1 "letters at the end"
h_assert_eq "$(h_depth "$q")" 0 "nothing published to the queue"
echo "t_idemctl_try: ok"
