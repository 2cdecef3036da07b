# t_idemctl_dlq_signature: dlq list says per letter what its idemd-sig says, in text (column 9) and --json (.signature): verified (a real dead letter), unsigned (no idemd-sig, no idemd headers), forged (idemd headers without idemd-sig, or an idemd-sig that does not verify); unchecked when the keys cannot be read; --verified-only selects exactly the verified ones for list, purge and replay.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_ictl_sig
q=t_ictl_sig.q
dlq=$q.dlq
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
c_fresh_queues $q $dlq
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }
bp() { "$C_BADPUB" -P "$AMQP_PORT" "$@" >/dev/null || h_fail "badpub $* failed"; }
# id and signature (columns 1 and 9) of each letter of a listing
sigs() { cut -f1,9 <<<"$1" | tr '\t\n' ': '; }

# r1: a real dead letter (idemd signs it). u1: published into the dead letter queue with
# nothing of idemd's. f1: idemd's headers without a signature. f2: with a signature that
# does not verify.
out=$(printf 'r1\treject-until-fixed\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publish r1"
h_wait_depth "$dlq" 1 30 || h_fail "r1 was not dead-lettered"
bp -r "$dlq" --id u1 --body plain --header app-header=str:x
claims=(--header "idemd-queue=str:$q" --header idemd-attempts=i64:9
    --header idemd-first-failure=str:2026-01-01T00:00:00.000Z --header idemd-original-exchange=str:
    --header "idemd-original-routing-key=str:$q" --header idemd-error=str:forged)
bp -r "$dlq" --id f1 --body forged "${claims[@]}"
bp -r "$dlq" --id f2 --body forged "${claims[@]}" --header "idemd-sig=str:$(printf 'a%.0s' {1..64})"
h_wait_depth "$dlq" 4 10

all=$(ctl dlq list "$dlq")
echo "$all"
h_assert_eq "$(sigs "$all")" "r1:verified u1:unsigned f1:forged f2:forged " "text: signatures"
h_assert_eq "$(awk -F'\t' '{ print NF }' <<<"$all" | sort -u)" 10 "text: 10 columns a line"
out=$(ctl --json dlq list "$dlq")
h_assert_eq "$(jq -r '[.letters[] | "\(.id):\(.signature)"] | join(" ")' <<<"$out")" \
    "r1:verified u1:unsigned f1:forged f2:forged" "json: signatures"

# --verified-only: exactly r1, in text and JSON; the queue keeps all four in order.
out=$(ctl dlq list "$dlq" --verified-only)
h_assert_eq "$(sigs "$out")" "r1:verified " "text: --verified-only"
out=$(ctl --json dlq list "$dlq" --verified-only)
h_assert_eq "$(jq -r '[.scanned, .matched, ([.letters[].id] | join(" "))] | @tsv' <<<"$out")" $'4\t1\tr1' \
    "json: --verified-only"
h_wait_depth "$dlq" 4 10
h_assert_eq "$(ctl dlq list "$dlq")" "$all" "listing after the selections"
# ... for purge (counted without --yes) and replay too: the unverified ones are not selected,
# so not refused either.
rc=0
out=$(ctl dlq purge "$dlq" --verified-only) || rc=$?
h_assert_eq "$rc:$out" "2:would purge 1 of 4 dead letters in $dlq; nothing was purged: add --yes" \
    "purge --verified-only"
h_sql "INSERT INTO counter_flags VALUES ('fixed')"
rc=0
out=$(ctl dlq replay "$dlq" --all --verified-only 2>replay.err) || rc=$?
cat replay.err >&2
h_assert_eq "$rc:$out" "0:replayed 1 of 4 dead letters in $dlq (1 matched)" "replay --all --verified-only"
h_assert_eq "$(h_count_log replay.err "NOT REPLAYED")" 0 "nothing refused: the rest was not selected"
h_wait_sql "SELECT n FROM effects WHERE queue = '$q' AND msg_id = 'r1'" 1 30 || h_fail "r1 was not applied"
h_wait_depth "$dlq" 3 10
h_assert_eq "$(sigs "$(ctl dlq list "$dlq")")" "u1:unsigned f1:forged f2:forged " "left after the replay"

# A real dead letter again; then without the keys its signature cannot be checked: unchecked,
# while unsigned and forged-without-a-signature need no key to tell.
out=$(printf 'r2\treject\n' | h_mq publish -r "$q")
h_wait_depth "$dlq" 4 30 || h_fail "r2 was not dead-lettered"
h_sql "RENAME TABLE idemd_key TO idemd_key_away"
out=$(ctl dlq list "$dlq" 2>nokey.err)
h_assert_eq "$(sigs "$out")" "u1:unsigned f1:forged f2:unchecked r2:unchecked " "without the keys"
rc=0
ctl dlq list "$dlq" --verified-only >/dev/null 2>nokey2.err || rc=$?
h_assert_eq "$rc" 3 "--verified-only without the keys: exit status"
h_assert_eq "$(h_count_log nokey2.err "verified-only: cannot read the relay keys")" 1 "--verified-only without the keys: why"
h_sql "RENAME TABLE idemd_key_away TO idemd_key"
h_assert_eq "$(sigs "$(ctl dlq list "$dlq")")" "u1:unsigned f1:forged f2:forged r2:verified " "with the keys back"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects WHERE msg_id IN ('u1', 'f1', 'f2')")" 0 "no unverified letter applied"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_idemctl_dlq_signature: ok"
