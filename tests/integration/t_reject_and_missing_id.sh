# t_reject_and_missing_id: REJECT, a missing id and a 256-byte id go to the dead-letter queue untouched.
db=t_reject
q=t_reject.q   # id in the message_id property (a shortstr: 255 bytes at most)
qh=t_reject.h  # id in the x-id header, where longer ids can arrive
dlq=t_reject.dlq
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 10;
    declare = { dead_letter_queue = "$dlq"; }; },
  { name = "$qh"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 10; id_header = "x-id";
    declare = { dead_letter_queue = "$dlq"; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

id255=$(printf 'a%.0s' {1..255})
id256=$(printf 'b%.0s' {1..256})
out=$(printf 'x1\treject\n-\tno-id\ng1\tgood\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 3 confirmed 3" "publish to $q"
out=$(printf '%s\tlong-id\n%s\tmax-id\n-\tno-id-header\n' "$id256" "$id255" |
    h_mq publish -r "$qh" --id-header x-id)
h_assert_eq "$out" "published 3 confirmed 3" "publish to $qh"

h_wait_depth "$dlq" 4 60
h_wait_sql "SELECT COUNT(*) FROM msg_id_record" 2 30
h_wait_log idemd.log "outcome=(ok|reject) queue=" 6 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT queue, msg_id, n FROM effects ORDER BY queue")" \
    "$(printf '%s\t%s\t1\n%s\tg1\t1' "$qh" "$id255" "$q")" "effects (only g1 and the 255-byte id)"
h_assert_eq "$(h_sql "SELECT consumer, msg_id FROM msg_id_record ORDER BY consumer")" \
    "$(printf '%s\t%s\n%s\tg1' "$qh" "$id255" "$q")" "record rows"
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"
h_assert_eq "$(h_depth "$qh")" 0 "depth of $qh"
h_mq get "$dlq" >dlq.txt
cat dlq.txt
# Dead letters keep the message_id property (x1) and the id header (the 256-byte id), so
# they can be replayed into the queue and still be deduplicated.
h_assert_eq "$(cut -f1,2 dlq.txt | sort)" $'-\tlong-id\n-\tno-id\n-\tno-id-header\nx1\treject' \
    "dead-lettered (message_id, body)"
grep -E "^-	long-id	(.*;)?x-id=$id256(;|\$)" dlq.txt >/dev/null ||
    h_fail "the 256-byte id header did not reach the dead-letter queue intact"
h_assert_eq "$(h_count_log idemd.log "outcome=reject queue=$q ")" 2 "reject outcomes on $q"
h_assert_eq "$(h_count_log idemd.log "outcome=reject queue=$qh ")" 2 "reject outcomes on $qh"
h_assert_eq "$(h_depth "$dlq")" 0 "depth of $dlq after get"
echo "t_reject_and_missing_id: ok"
