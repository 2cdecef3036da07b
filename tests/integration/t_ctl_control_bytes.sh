# t_ctl_control_bytes: control bytes, escape sequences, DEL, C1 controls and invalid UTF-8 in every idemd-* header idemctl reads, the message id, the reason, the queue name, outbox and order rows and the command line never reach the operator's terminal: every idemctl command in text mode prints them escaped, on stdout and stderr; every --json output is one RFC 8259 document in valid UTF-8 with C0, DEL, C1 and bidi controls as \u escapes and invalid UTF-8 as U+FFFD; and a forged "replayed 1 of 1" cannot pass for the real summary.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_ctl_cb
q=t_ctl_cb.q
dlq=$q.dlq
side=t_ctl_cb.side
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
c_fresh_queues $q $dlq $side
h_mq declare "$side"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; max_attempts = 2; retry_delays_ms = [ 100 ]; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
bp() { "$C_BADPUB" -P "$AMQP_PORT" "$@" >/dev/null || h_fail "badpub $* failed"; }

# Hostile text in badpub's \xNN notation: OSC title, clear screen, CR, BEL, DEL, a C1 CSI
# (U+009B as UTF-8), a bidi override, invalid UTF-8, a newline and a tab.
E='\x1b]0;pwned\x07\x1b[2J\x0d\x07\x7f\xc2\x9b31m\xe2\x80\xae\xff\xfe\x0a\x09x'
# The queue name of the issue: rewrites the line it is printed on into a forged summary.
forged_q='sec.q\x0d\x1b[2Kidemctl: replayed 1 of 1 dead letters in sec.q.dlq (1 matched)\x1b[8m'
common=(--header "idemd-error=str:why$E"
    --header "idemd-attempts=str:3$E" --header "idemd-first-failure=str:first$E"
    --header "idemd-last-failure=str:last$E" --header "idemd-original-exchange=str:ex$E"
    --header "idemd-original-routing-key=str:rk$E" --header "idemd-sig=str:sig$E"
    --header "idemd-onward-source=str:src$E" --header "idemd-body-dropped=str:$E")
hostile=(--header "idemd-queue=str:$forged_q" "${common[@]}")
named=(--header "idemd-queue=str:$q" "${common[@]}")

# 1. A letter idemd dead-letters itself: a hostile id and reason (counter.so's reject-echo),
#    and the publisher's hostile idemd-* headers, which idemd replaces or drops.
bp -r "$q" --id "idemd-own$E" --body "reject-echo:reason$E" "${hostile[@]}"
h_wait_depth "$dlq" 1 30 || h_fail "idemd did not dead-letter the hostile message"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# 2. Letters the broker dead-letters: published with expiration = 1 while nobody consumes, they
#    reach $dlq with the publisher's headers unchanged (the work queue's x-dead-letter-*).
bp -r "$q" --id "broker$E" --expiration 1 --body b "${hostile[@]}"
bp -r "$q" --id "onward$E" --expiration 1 --body b "${hostile[@]}" --header idemd-onward=i64:1
# 3. One published straight into the dead letter queue, and one naming the configured queue.
bp -r "$dlq" --id "direct$E" --body d "${hostile[@]}"
bp -r "$dlq" --id "named$E" --body d "${named[@]}"
h_wait_depth "$dlq" 5 30 || h_fail "$dlq does not hold the 5 hostile letters"

# Outbox and order rows with hostile bytes (as a handler's onward message or a key could carry).
x=$(printf '\033]0;t\007\r\177\377')
h_sql "INSERT INTO idemd_outbox (consumer, source_id, msg_id, exchange, routing_key, body, attempts, last_error)
       VALUES ('$q', 's1', CONCAT('ob', X'1b5b324a0d7fff'), CONCAT('x', X'1b5d303b7407'), CONCAT('r', X'0d0a'), 'b', 3,
               CONCAT('err', X'1b5b324a07c29b'))"
h_sql "INSERT INTO idemd_order_block (consumer, okey, head_id) VALUES ('$q', CONCAT('k', X'1b5b324a0d'), CONCAT('h', X'07ff'))"
h_sql "INSERT INTO idemd_order_waiter (consumer, okey, msg_id) VALUES ('$q', CONCAT('k', X'1b5b324a0d'), 'w1')"

# Every command in text mode; stdout and stderr kept apart. A non-zero status is fine here
# (refusals, nothing matched): what is printed is checked.
n=0
run() # run NAME ARGS...: idemctl ARGS into NAME.out / NAME.err
{
    local name=$1 rc=0
    shift
    "$IDEMCTL" -c idemd.conf "$@" >"$name.out" 2>"$name.err" || rc=$?
    echo "# idemctl ${*@Q} -> $rc" >&2
    n=$((n + 1))
}
run list dlq list "$dlq"
run list_reason dlq list "$dlq" --reason 'why'
run list_limit dlq list "$dlq" --limit 2
run count dlq purge "$dlq"
run count_reason dlq purge "$dlq" --reason "$x"
run no_queue dlq list "nosuch$x"
if grep -q -- '--dry-run' <<<"$("$IDEMCTL" --help)"; then
    run dry dlq replay "$dlq" --all --dry-run
fi
run lookup lookup "idemd-own$x" "plain"
run lookup_consumer lookup --consumer "c$x" "id$x"
run outbox outbox list
run outbox_q outbox list "$q"
run outbox_bad outbox list "nosuch$x"
run order order list
run order_bad order list "nosuch$x"
run release order release "$q" "k$x"
run status status
run key key status
run records records purge --older-than 30d --consumer "c$x"
run replay_to dlq replay "$dlq" --all --unverified --allow-empty-body --to "$side"
h_wait_depth "$side" 5 30 || h_fail "the --unverified replay did not move the 5 letters to $side"
# Back into $dlq for the replays that refuse or fail: refused (not verified) and unroutable.
h_mq get "$side" >/dev/null
for id in broker onward direct named; do
    bp -r "$dlq" --id "$id$E" --body d "${hostile[@]}"
done
bp -r "$dlq" --id "named$E" --body d "${named[@]}"
h_wait_depth "$dlq" 5 30 || h_fail "$dlq does not hold the 5 letters again"
run replay dlq replay "$dlq" --all
# Unverified: to the work queue the dead letter queue belongs to (whatever queue the letter
# names), and to a --to queue that does not exist (the broker returns it).
run replay_id dlq replay "$dlq" --id "$(printf 'broker%b' "$E")" --unverified --allow-empty-body
h_assert_eq "$(grep -cE "^replayed 1 of [0-9]+ dead letters in $dlq \(1 matched\)" replay_id.out)" 1 \
    "replay --id --unverified of a letter naming a queue that does not exist: to the work queue"
run replay_bad dlq replay "$dlq" --reason why --unverified --allow-empty-body --to "$(printf 'nosuch\033[2J\r')"

# --json of every command that has it: the same letters and rows.
run j_list --json dlq list "$dlq"
run j_lookup --json lookup "idemd-own$x" "plain"
run j_outbox --json outbox list
run j_order --json order list
run j_status --json status
run j_key --json key status
printf 'b\033]0;pwned\007\x7f\xc2\x9b\xe2\x80\xae\xff\xfe' >try-body
run j_try --json try "$q" --body try-body --id "$(printf 't\033[2J\xff')"

# No byte below 0x20 but newline and tab, no DEL, no C1 control, valid UTF-8 everywhere.
bad=0
for f in *.out *.err; do
    ctl=$(tr -d '\n\t' <"$f" | LC_ALL=C tr -d '\040-\176\200-\377' | wc -c)
    c1=$(LC_ALL=C grep -c $'\xc2[\x80-\x9f]' "$f" || true)
    utf8=ok
    iconv -f UTF-8 -t UTF-8 "$f" >/dev/null 2>&1 || utf8=bad
    if ((ctl != 0 || c1 != 0)) || [[ $utf8 != ok ]]; then
        echo "$f: $ctl control bytes, $c1 lines with C1 controls, UTF-8 $utf8:" >&2
        od -c "$f" | sed -n 1,20p >&2
        bad=$((bad + 1))
    fi
done
((n >= 20)) || h_fail "only $n commands ran"
((bad == 0)) || h_fail "$bad outputs carry terminal control bytes"

# Each --json output is one RFC 8259 document in valid UTF-8, with no raw bidi control either
# (the loop above saw no C0, DEL or C1 in it); the hostile text is all there, escaped.
for f in j_*.out; do
    python3 - "$f" <<'PY' || h_fail "$f is not a JSON document in valid UTF-8 without raw controls: $(head -c 600 "$f")"
import json, sys
raw = open(sys.argv[1], "rb").read()
text = raw.decode("utf-8")  # strict: invalid UTF-8 fails
bad = [c for c in text if c in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u2028\u2029"]
assert not bad, "raw bidi or separator characters: %r" % bad
json.loads(text)
PY
done
python3 - j_list.out <<'PY' || h_fail "dlq list --json lost or mangled the hostile reason: $(head -c 600 j_list.out)"
import json, sys
d = json.load(open(sys.argv[1], encoding="utf-8"))
r = [l["reason"] for l in d["letters"] if l["reason"].startswith("why")]
assert r and "\x1b]0;pwned\x07" in r[0] and "\x7f\x9b31m\u202e\ufffd\ufffd" in r[0], r
PY
grep -qF '\u001b]0;pwned\u0007\u001b[2J\u000d\u0007\u007f\u009b31m\u202e\ufffd\ufffd' j_list.out || h_fail "dlq list --json: controls not escaped as \\u00XX: $(head -c 400 j_list.out)"

# What was shown is the escaped text, and the letters are all there.
h_assert_eq "$(grep -c . list.out)" 5 "dlq list: one line per letter"
h_assert_eq "$(grep -cF 'first\x1b]0;pwned\x07\x1b[2J\r\x07\x7f\u009b31m\u202e\xff\xfe\n\tx' list.out)" 4 \
    "dlq list: the publisher's first failure, escaped, on the letters idemd did not make"
h_assert_eq "$(grep -cF 'reason\x1b]0;pwned' list.out)" 1 "dlq list: the handler's reason, escaped"
# The real summary is a line of its own; the forged one stays inside its refusal line.
h_assert_eq "$(grep -c "^replayed [0-9]* of 5 dead letters in $dlq " replay.out)" 1 "the real summary"
h_assert_eq "$(grep -c '^idemctl: replayed' replay.err)" 0 "a forged summary at the start of a line"
(($(grep -cF "sec.q\\r\\x1b[2Kidemctl: replayed 1 of 1" replay.err) >= 1)) ||
    h_fail "the forged queue name is not shown escaped in the refusals"
echo "t_ctl_control_bytes: ok"
