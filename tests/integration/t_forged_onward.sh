# t_forged_onward: a publisher's idemd-* headers, known to idemd or not, in any case, never ride on what idemd publishes: the retry copy and the dead letter of a message with a forged idemd-onward = 1, idemd-onward-source, idemd-original-exchange and unknown idemd-* headers carry idemd's own values only, so dlq replay --unverified puts it back on the work queue alone instead of fanning it out through amq.fanout.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_forged_onward
q=t_forged_onward.q
dlq=$q.dlq
fan=t_forged_onward.fan # also bound to amq.fanout: a replay must not reach it
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
c_fresh_queues $q $dlq $q.retry.100 $fan
h_mq declare "$fan"
h_mq bind "$fan" amq.fanout ""
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; max_attempts = 2; retry_delays_ms = [ 100 ];
    declare = { bindings = ( { exchange = "amq.fanout"; routing_key = ""; } ); }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
bp() { "$C_BADPUB" -P "$AMQP_PORT" "$@" >/dev/null || h_fail "badpub $* failed"; }

# Through amq.fanout, as an attacker with publish rights there would: "retry" fails every
# attempt, so each message goes through a retry copy (idemd's own, signed) to the DLQ.
forged=(--header idemd-onward=i64:1 --header idemd-onward-source=str:evil-source
    --header idemd-original-exchange=str:evil.x --header idemd-original-routing-key=str:evil-rk
    --header idemd-whatever=str:evil --header IDEMD-Shouting=str:evil
    --header idemd-headers-dropped=bool:true --header idemd-publish-seq=i64:424242
    --header idemd-attempts=i64:0 --header idemd-queue=str:evil.q --header keep-me=str:kept)
for id in f1 f2; do
    bp -e amq.fanout -r "" --id "$id" --body retry "${forged[@]}"
done
h_wait_depth "$dlq" 2 30 || h_fail "idemd did not dead-letter f1 and f2"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_depth "$fan")" 2 "$fan got the two original publishes"
h_mq get "$fan" -n 2 >/dev/null

# The dead letter of f1, header by header.
line=$(h_mq get "$dlq" -n 1)
echo "$line"
h_assert_eq "$(cut -f1,2 <<<"$line")" $'f1\tretry' "f1's dead letter"
for h in idemd-onward idemd-onward-source idemd-whatever IDEMD-Shouting idemd-headers-dropped; do
    if c_has_hdr "$line" "$h"; then h_fail "the dead letter carries the publisher's $h"; fi
done
h_assert_eq "$(c_hdr "$line" idemd-original-exchange)" amq.fanout "its real original exchange"
h_assert_eq "$(c_hdr "$line" idemd-original-routing-key)" "" "its real original routing key"
h_assert_eq "$(c_hdr "$line" idemd-queue)" "$q" "idemd-queue"
h_assert_eq "$(c_hdr "$line" idemd-attempts)" 2 "idemd-attempts: counted by idemd, through its copy"
h_assert_eq "$(c_hdr "$line" idemd-publish-seq | grep -c '^424242$' || true)" 0 "idemd-publish-seq"
h_assert_eq "$(c_hdr "$line" keep-me)" kept "another header of the publisher is kept"
h_assert_eq "$(grep -o 'idemd-[a-z-]*=' <<<"$(cut -f3 <<<"$line" | tr ';' '\n')" | sort | tr -d '\n')" \
    "idemd-attempts=idemd-error=idemd-first-failure=idemd-last-failure=idemd-original-exchange=idemd-original-routing-key=idemd-publish-seq=idemd-queue=idemd-sig=" \
    "the idemd-* headers of the dead letter: idemd's own, once each"

# f2 replayed by id, --unverified (as letters the broker dead-letters need): back to $q only.
rc=0
out=$("$IDEMCTL" -c idemd.conf dlq replay "$dlq" --id f2 --unverified 2>replay.err) || rc=$?
cat replay.err >&2
h_assert_eq "$rc:$out" "0:replayed 1 of 1 dead letters in $dlq (1 matched)" "replay --id f2 --unverified"
h_wait_depth "$q" 1 10 || h_fail "f2 is not back on $q"
h_assert_eq "$(h_depth "$fan")" 0 "$fan: the replay did not fan out through amq.fanout"
h_assert_eq "$(h_depth "$dlq")" 0 "$dlq after the replay"
h_assert_eq "$(cut -f1 <<<"$(h_mq get "$q" -n 1)")" f2 "f2 on $q"
echo "t_forged_onward: ok"
