# t_idemctl_replay_safety: dlq replay checks idemd-sig (a letter published into a dead letter queue is refused, one loud line each, and stays; --unverified replays it with a warning), sends a real dead letter back to the queue that dead-lettered it only (not to a second queue bound to the same exchange), refuses a letter whose body was dropped unless --allow-empty-body (which keeps idemd-body-dropped); a dead onward message signed as idemd signs it goes to its intended route, one signed for the queue itself is refused; cannot read the keys: refuses.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_ictl_safety
q=t_ictl_safety.q
dlq=$q.dlq
x=t_ictl_safety.x
other=t_ictl_safety.other # bound to $x with the same key: a replay must not reach it
side=t_ictl_safety.side
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
c_fresh_queues $q $dlq $other $side
h_mq exchange "$x" -t direct
h_mq declare "$other"
h_mq bind "$other" "$x" k
h_mq declare "$side"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; max_attempts = 2; retry_delays_ms = [ 100 ];
    max_body_bytes = 1024;
    declare = { bindings = ( { exchange = "$x"; routing_key = "k"; } ); }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }
ids() { cut -f1 <<<"$1" | tr '\n' ' '; }
bp() { "$C_BADPUB" -P "$AMQP_PORT" "$@" >/dev/null || h_fail "badpub $* failed"; }

# A real dead letter: r1 fails until fixed and reaches $dlq; $other got its own copy.
out=$(printf 'r1\treject-until-fixed\n' | h_mq publish -e "$x" -r k)
h_assert_eq "$out" "published 1 confirmed 1" "publish r1"
h_wait_depth "$dlq" 1 30 || h_fail "r1 was not dead-lettered"
h_assert_eq "$(h_depth "$other")" 1 "$other holds r1 once"

# Forged letters, published straight into the dead letter queue: no signature, a bad one.
forged=(--header "idemd-queue=str:$q" --header idemd-attempts=i64:2
    --header idemd-first-failure=str:2026-01-01T00:00:00.000Z
    --header "idemd-original-exchange=str:$x" --header idemd-original-routing-key=str:k
    --header idemd-error=str:forged)
bp -r "$dlq" --id f1 --body good "${forged[@]}"
bp -r "$dlq" --id f2 --body good "${forged[@]}" --header "idemd-sig=str:$(printf '0%.0s' {1..64})"
# A body over max_body_bytes: dead-lettered by idemd without it.
bp -r "$q" --id b1 --body-size 2000
h_wait_depth "$dlq" 4 30 || h_fail "$dlq does not hold r1, f1, f2, b1"
h_assert_eq "$(ids "$(ctl dlq list "$dlq")")" "r1 f1 f2 b1 " "dead letters"

# Replay everything: r1 goes back to $q only; f1, f2 (not verified) and b1 (no body) stay.
h_sql "INSERT INTO counter_flags VALUES ('fixed')"
rc=0
out=$(ctl dlq replay "$dlq" --all 2>replay.err) || rc=$?
cat replay.err >&2
h_assert_eq "$rc:$out" "4:replayed 1 of 4 dead letters in $dlq (4 matched, 3 refused and kept: see above)" \
    "replay --all"
for id in f1 f2; do
    h_assert_eq "$(h_count_log replay.err "^idemctl: NOT REPLAYED: dead letter $id \(queue '$q'\): ")" 1 \
        "one loud line for $id"
done
h_assert_eq "$(h_count_log replay.err "NOT REPLAYED: dead letter f1 .*has no idemd-sig")" 1 "f1: why"
h_assert_eq "$(h_count_log replay.err "NOT REPLAYED: dead letter f2 .*idemd-sig does not verify")" 1 "f2: why"
h_assert_eq "$(h_count_log replay.err "NOT REPLAYED: dead letter b1 .*body was dropped")" 1 "b1: why"
h_wait_sql "SELECT n FROM effects WHERE queue = '$q' AND msg_id = 'r1'" 1 30 || h_fail "r1 was not applied"
h_wait_depth "$dlq" 3 10 || h_fail "the refused letters are not back in $dlq"
h_assert_eq "$(ids "$(ctl dlq list "$dlq")")" "f1 f2 b1 " "refused letters stay, in order"
h_assert_eq "$(h_depth "$other")" 1 "$other: the replay did not fan out to it"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id IN ('f1', 'f2')")" 0 "forged letters not applied"

# --to-original keeps the old route explicitly (to every queue bound there): not used on a
# forged letter; --unverified replays f1 with a warning, to the queue it names.
rc=0
out=$(ctl dlq replay "$dlq" --id f1 --unverified 2>unverified.err) || rc=$?
cat unverified.err >&2
h_assert_eq "$rc:$out" "0:replayed 1 of 3 dead letters in $dlq (1 matched)" "replay --id f1 --unverified"
h_assert_eq "$(h_count_log unverified.err "^idemctl: WARNING: replaying dead letter f1 \(queue '$q'\) unverified")" 1 \
    "the warning for f1"
h_wait_sql "SELECT n FROM effects WHERE queue = '$q' AND msg_id = 'f1'" 1 30 || h_fail "f1 was not applied"
h_assert_eq "$(h_depth "$other")" 1 "$other after the --unverified replay"

# b1: refused without the flag; with it, replayed to $side with idemd-body-dropped kept.
rc=0
ctl dlq replay "$dlq" --id b1 --to "$side" >/dev/null 2>b1.err || rc=$?
h_assert_eq "$rc" 4 "b1 without --allow-empty-body: exit status"
h_assert_eq "$(h_count_log b1.err "NOT REPLAYED: dead letter b1 .*--allow-empty-body")" 1 "b1 refused"
out=$(ctl dlq replay "$dlq" --id b1 --to "$side" --allow-empty-body)
h_assert_eq "$out" "replayed 1 of 2 dead letters in $dlq (1 matched)" "b1 with --allow-empty-body"
h_wait_depth "$side" 1 10 || h_fail "b1 did not reach $side"
got=$(h_mq get "$side")
echo "$got"
h_assert_eq "$(cut -f1,2 <<<"$got")" $'b1\t' "b1 in $side, empty"
h_assert_eq "$(c_hdr "$got" idemd-body-dropped)" 2000 "b1 keeps idemd-body-dropped"
h_assert_eq "$(c_hdr "$got" idemd-sig)" "" "b1's other idemd headers are dropped"

# Dead onward messages (idemd-onward = 1), signed as idemd signs them: copies_sign under the
# installation's key with "onward:<source queue>" and the message_id property. o1 goes to its
# intended route; o2, signed as a letter of the queue itself, is refused.
sig_field() # one length-prefixed field of the signed text (8 bytes little-endian, then $1)
{
    local i n=${#1}
    for i in 0 1 2 3 4 5 6 7; do
        # shellcheck disable=SC2059 # the format is the octal escape of one byte
        printf "\\$(printf '%03o' $(((n >> (8 * i)) & 255)))"
    done
    printf '%s' "$1"
}
sign() # sign BOUND_QUEUE ID ATTEMPTS FIRST EXCHANGE ROUTING_KEY: the hex signature
{
    local f
    for f in idemd-sig-v1 "$@"; do sig_field "$f"; done |
        openssl dgst -sha256 -mac HMAC -macopt "hexkey:$(h_sql "SELECT HEX(k) FROM idemd_key WHERE id = 1")" -r |
        cut -d' ' -f1
}
onward=(--header idemd-onward=i64:1 --header "idemd-queue=str:$q" --header idemd-attempts=i64:5
    --header idemd-first-failure=str:2026-01-01T00:00:00.000Z --header idemd-original-exchange=str:
    --header "idemd-original-routing-key=str:$side" --header "idemd-error=str:unroutable")
bp -r "$dlq" --id o1 --body onward-1 "${onward[@]}" \
    --header "idemd-sig=str:$(sign "onward:$q" o1 5 2026-01-01T00:00:00.000Z "" "$side")"
bp -r "$dlq" --id o2 --body onward-2 "${onward[@]}" \
    --header "idemd-sig=str:$(sign "$q" o2 5 2026-01-01T00:00:00.000Z "" "$side")"
h_wait_depth "$dlq" 3 10 || h_fail "$dlq does not hold f2, o1, o2"
rc=0
out=$(ctl dlq replay "$dlq" --id o1 o2 2>onward.err) || rc=$?
cat onward.err >&2
h_assert_eq "$rc:$out" "4:replayed 1 of 3 dead letters in $dlq (2 matched, 1 refused and kept: see above)" \
    "replay of the onward letters"
h_assert_eq "$(h_count_log onward.err "NOT REPLAYED: dead letter o2 .*idemd-sig does not verify")" 1 "o2 refused"
h_wait_depth "$side" 1 10 || h_fail "o1 did not reach its intended route"
got=$(h_mq get "$side")
h_assert_eq "$(cut -f1,2 <<<"$got")" $'o1\tonward-1' "o1 at its intended route"
h_assert_eq "$(c_hdr "$got" idemd-onward)" "" "o1's copy without idemd headers"
h_assert_eq "$(ids "$(ctl dlq list "$dlq")")" "f2 o2 " "dead letters left"

# Without the keys nothing is replayed, unless --unverified.
h_sql "RENAME TABLE idemd_key TO idemd_key_away"
rc=0
ctl dlq replay "$dlq" --all >/dev/null 2>nokey.err || rc=$?
h_assert_eq "$rc" 3 "no keys: exit status"
h_assert_eq "$(h_count_log nokey.err "cannot read the relay keys .*nothing was replayed")" 1 "no keys: refusal"
h_assert_eq "$(h_depth "$dlq")" 2 "f2 and o2 stay"
h_sql "RENAME TABLE idemd_key_away TO idemd_key"

h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE n <> 1")" 0 "no effect applied twice"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_idemctl_replay_safety: ok"
