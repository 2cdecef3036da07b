# t_idemctl_dlq: idemctl dlq list (filters, --limit, --json) leaves the dead letter queue as it was, same depth and order, classic and quorum; dlq purge needs --yes and takes only what --reason selects; a work queue given instead of its dead letter queue is refused naming the right one.
db=t_ictl_dlq
q=t_ictl_dlq.q
dlq=t_ictl_dlq.dlq
qq=t_ictl_dlq.qq # a quorum queue, with a quorum dead letter queue
IDEMCTL=$H_BUILD/idemctl
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 1; workers = 1;
    declare = { dead_letter_queue = "$dlq"; }; },
  { name = "$qq"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 1; workers = 1;
    declare = { quorum = true; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
ctl() { "$IDEMCTL" -c idemd.conf "$@"; }
# ids of a listing, in order
ids() { cut -f1 <<<"$1" | tr '\n' ' '; }

# r1, r3, r5 are plain rejects; r2, r4, r6 reject until "fixed"; the last one has no id.
out=$(printf 'r1\treject\nr2\treject-until-fixed\nr3\treject\nr4\treject-until-fixed\nr5\treject\nr6\treject-until-fixed\n-\treject\n' |
    h_mq publish -r "$q")
h_assert_eq "$out" "published 7 confirmed 7" "publish"
h_wait_depth "$dlq" 7 60

# The work queue given by mistake: nothing taken from it, and the dead letter queue named.
rc=0
out=$(ctl dlq list "$q" 2>&1) || rc=$?
h_assert_eq "$rc" 2 "dlq list on the work queue"
[[ "$out" == *"$q is a work queue in idemd.conf, not a dead letter queue: its dead letters are in $dlq (idemctl dlq list $dlq)"* ]] ||
    h_fail "dlq list on the work queue: '$out' does not name $dlq"
out=$(ctl dlq list "$qq" 2>&1) || true
[[ "$out" == *"its dead letters are in $qq.dlq"* ]] || h_fail "dlq list $qq: '$out' does not name $qq.dlq"

all=$(ctl dlq list "$dlq")
echo "$all"
h_assert_eq "$(ids "$all")" "r1 r2 r3 r4 r5 r6 - " "full listing"
t=$'\t'
# id, attempts, first, last failure, original exchange ("": the default) and routing key, queue,
# reason, signature (idemd signed it), applied (the reject was rolled back: not recorded)
grep -qE "^r2${t}1${t}20[0-9-]+T[0-9:.]+Z${t}20[0-9-]+T[0-9:.]+Z${t}${t}$q${t}$q${t}test reject-until-fixed${t}verified${t}not-applied\$" <<<"$all" ||
    h_fail "listing of r2: $(grep '^r2' <<<"$all")"

out=$(ctl dlq list "$dlq" --reason 'until-fixed')
h_assert_eq "$(ids "$out")" "r2 r4 r6 " "--reason until-fixed"
h_wait_depth "$dlq" 7 10
h_assert_eq "$(ctl dlq list "$dlq")" "$all" "listing after a filtered listing (order kept)"
out=$(ctl dlq list "$dlq" --reason 'until-fixed' --limit 2)
h_assert_eq "$(ids "$out")" "r2 r4 " "--limit 2"
h_assert_eq "$(ctl dlq list "$dlq")" "$all" "listing after --limit (order kept)"
rc=0
out=$(ctl dlq list "$dlq" --reason 'no such reason') || rc=$?
h_assert_eq "$rc:$out" "1:" "nothing matched: exit 1, no output"
out=$(ctl --json dlq list "$dlq" --reason '^test reject$')
echo "$out"
h_assert_eq "$(jq -r '[.scanned, .matched, (.letters | length)] | @tsv' <<<"$out")" $'7\t3\t3' "--json counts"
h_assert_eq "$(jq -r '.letters[] | [.id // "-", .attempts, .original_exchange, .original_routing_key, .queue, .reason] | @tsv' <<<"$out")" \
    "$(printf 'r1\t1\t\t%s\t%s\ttest reject\nr3\t1\t\t%s\t%s\ttest reject\nr5\t1\t\t%s\t%s\ttest reject' "$q" "$q" "$q" "$q" "$q" "$q")" \
    "--json letters"
rc=0
"$IDEMCTL" -c idemd.conf dlq list no.such.queue >/dev/null 2>noq.err || rc=$?
h_assert_eq "$rc" 1 "dlq list of a missing queue: exit status"

# purge without --yes: says what it would do, exits 2, takes nothing.
rc=0
out=$(ctl dlq purge "$dlq" --reason '^test reject$') || rc=$?
h_assert_eq "$rc" 2 "purge without --yes: exit status"
h_assert_eq "$out" "would purge 3 of 7 dead letters in $dlq; nothing was purged: add --yes" "purge without --yes"
h_wait_depth "$dlq" 7 10
h_assert_eq "$(ctl dlq list "$dlq")" "$all" "listing after purge without --yes"
# with --yes: the plain rejects go, the others stay in their order.
out=$(ctl dlq purge "$dlq" --reason '^test reject$' --yes)
h_assert_eq "$out" "purged 3 of 7 dead letters in $dlq (3 matched)" "purge --reason --yes"
h_wait_depth "$dlq" 4 10
h_assert_eq "$(ids "$(ctl dlq list "$dlq")")" "r2 r4 r6 - " "left after the purge"
out=$(ctl --json dlq purge "$dlq" --yes)
h_assert_eq "$(jq -r '[.matched, .purged, .complete] | @tsv' <<<"$out")" $'4\t4\ttrue' "purge --yes --json"
h_wait_depth "$dlq" 0 10
rc=0
ctl dlq list "$dlq" >/dev/null || rc=$?
h_assert_eq "$rc" 1 "list of an empty queue: exit status"

# The same on a quorum dead letter queue: 40 dead letters, every second one until-fixed.
for i in $(seq 1 40); do
    if ((i % 2)); then printf 'q%d\treject\n' "$i"; else printf 'q%d\treject-until-fixed\n' "$i"; fi
done >qpub.txt
h_assert_eq "$(h_mq publish -r "$qq" <qpub.txt)" "published 40 confirmed 40" "publish to $qq"
h_wait_depth "$qq.dlq" 40 60
grep -qE "^$qq.dlq[[:space:]]+quorum" <<<"$(h_rabbitmqctl list_queues name type)" ||
    h_fail "$qq.dlq is not a quorum queue"
qall=$(ctl dlq list "$qq.dlq")
h_assert_eq "$(ids "$qall")" "$(cut -f1 qpub.txt | tr '\n' ' ')" "quorum: full listing in publish order"
out=$(ctl dlq list "$qq.dlq" --reason until-fixed --limit 5)
h_assert_eq "$(ids "$out")" "q2 q4 q6 q8 q10 " "quorum: --reason --limit 5"
h_wait_depth "$qq.dlq" 40 10
h_assert_eq "$(ctl dlq list "$qq.dlq")" "$qall" "quorum: listing after a filtered listing (order kept)"
h_assert_eq "$(ctl dlq purge "$qq.dlq" --reason '^test reject$' --yes)" \
    "purged 20 of 40 dead letters in $qq.dlq (20 matched)" "quorum: purge"
h_wait_depth "$qq.dlq" 20 10
h_assert_eq "$(ids "$(ctl dlq list "$qq.dlq")")" "$(seq -f 'q%g' 2 2 40 | tr '\n' ' ')" "quorum: left after the purge, in order"

# Nothing was processed at all: the effects of the rejects were rolled back.
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM effects")" 0 "effects"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_idemctl_dlq: ok"
