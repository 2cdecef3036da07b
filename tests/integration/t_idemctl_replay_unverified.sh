# t_idemctl_replay_unverified: a letter the broker dead-lettered with a publisher's forged idemd-onward = 1 and an original route through amq.fanout: dlq replay --unverified sends it to the work queue its dead letter queue belongs to, only there (a queue bound to amq.fanout stays empty); --to-original is what sends a letter to its original route; an unverified letter of a dead letter queue no configured queue owns is refused without --to.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_ictl_unver
q=t_ictl_unver.q
dlq=$q.dlq
fan=t_ictl_unver.fan   # bound to amq.fanout: the forged route's victim
stray=t_ictl_unver.stray # a dead letter queue of no configured queue
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
c_fresh_queues $q $dlq $fan $stray
h_mq declare "$fan"
h_mq bind "$fan" amq.fanout ""
h_mq declare "$stray"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; } );
CONF
} >idemd.conf
# idemd declares $q (dead-lettering into $dlq through the default exchange) and $dlq; then
# nobody consumes $q, so the broker expires what is published with expiration = 1.
h_daemon_start idemd.conf idemd.log
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }
bp() { "$C_BADPUB" -P "$AMQP_PORT" "$@" >/dev/null || h_fail "badpub $* failed"; }

# What an attacker with publish rights on $q sends: idemd's headers of a dead onward message
# whose intended route is amq.fanout, without a signature.
forged=(--header idemd-onward=i64:1 --header "idemd-queue=str:$q" --header idemd-attempts=i64:5
    --header idemd-first-failure=str:2026-01-01T00:00:00.000Z
    --header idemd-original-exchange=str:amq.fanout --header idemd-original-routing-key=str:anything
    --header idemd-onward-source=str:src1 --header idemd-error=str:unroutable)
bp -r "$q" --id x1 --body forged-1 --expiration 1 "${forged[@]}"
bp -r "$q" --id x2 --body forged-2 --expiration 1 "${forged[@]}"
h_wait_depth "$dlq" 2 30 || h_fail "the broker did not dead-letter x1 and x2 into $dlq"
h_assert_eq "$(h_depth "$q")" 0 "$q is empty before the replay"

# Without --unverified: refused, as before.
rc=0
ctl dlq replay "$dlq" --id x1 >/dev/null 2>refused.err || rc=$?
cat refused.err >&2
h_assert_eq "$rc" 4 "x1 without --unverified: exit status"
h_assert_eq "$(h_count_log refused.err "NOT REPLAYED: dead letter x1 .*has no idemd-sig")" 1 "x1 refused"

# --unverified: to the work queue $dlq belongs to, not to amq.fanout.
rc=0
out=$(ctl dlq replay "$dlq" --id x1 --unverified 2>unverified.err) || rc=$?
cat unverified.err >&2
h_assert_eq "$rc:$out" "0:replayed 1 of 2 dead letters in $dlq (1 matched)" "x1 --unverified"
h_wait_depth "$q" 1 10 || h_fail "x1 did not reach $q"
h_assert_eq "$(h_depth "$fan")" 0 "$fan (bound to amq.fanout) got nothing"
got=$(h_mq get "$q")
h_assert_eq "$(cut -f1,2 <<<"$got")" $'x1\tforged-1' "x1 in $q"
h_assert_eq "$(c_hdr "$got" idemd-onward)" "" "x1's copy without the forged idemd headers"
h_assert_eq "$(h_depth "$q")" 0 "$q got exactly one message"

# --to-original says it explicitly: x2 goes through amq.fanout.
rc=0
out=$(ctl dlq replay "$dlq" --id x2 --unverified --to-original 2>orig.err) || rc=$?
cat orig.err >&2
h_assert_eq "$rc:$out" "0:replayed 1 of 1 dead letters in $dlq (1 matched)" "x2 --unverified --to-original"
h_wait_depth "$fan" 1 10 || h_fail "x2 did not go through amq.fanout"
h_assert_eq "$(h_depth "$q")" 0 "$q did not get x2"

# A dead letter queue that no configured queue dead-letters into: an unverified letter there has
# no work queue, so it is refused (and stays) unless --to names one.
bp -r "$stray" --id s1 --body stray-1 "${forged[@]}"
h_wait_depth "$stray" 1 10
rc=0
out=$(ctl dlq replay "$stray" --all --unverified 2>stray.err) || rc=$?
cat stray.err >&2
h_assert_eq "$rc" 4 "s1 without a work queue: exit status"
h_assert_eq "$(h_count_log stray.err "NOT REPLAYED: dead letter s1 .*dead_letter_queue of no configured queue.*--to QUEUE")" 1 \
    "s1 refused, saying why"
h_assert_eq "$(h_depth "$stray"):$(h_depth "$fan"):$(h_depth "$q")" "1:1:0" "s1 stays; nothing else moved"
out=$(ctl dlq replay "$stray" --all --unverified --to "$q" 2>/dev/null)
h_assert_eq "$out" "replayed 1 of 1 dead letters in $stray (1 matched)" "s1 with --to"
h_wait_depth "$q" 1 10 || h_fail "s1 did not reach $q"
echo "t_idemctl_replay_unverified: ok"
