# t_reject_and_missing_id: REJECT, a missing id and a 256-byte id go to the dead-letter queue untouched.
db=t_reject
q=t_reject.q
dlq=t_reject.dlq
h_new_db "$db"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; prefetch = 10;
             declare = { dead_letter_queue = "$dlq"; }; } );
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

id255=$(printf 'a%.0s' {1..255})
id256=$(printf 'b%.0s' {1..256})
printf 'x1\treject\n-\tno-id\n%s\tlong-id\n%s\tmax-id\ng1\tgood\n' "$id256" "$id255" >msgs.txt
out=$(h_mq publish -r "$q" <msgs.txt)
h_assert_eq "$out" "published 5 confirmed 5" "publisher"

h_wait_depth "$dlq" 3 60
h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'" 2 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_assert_eq "$(h_sql "SELECT msg_id, n FROM effects WHERE queue = '$q' ORDER BY msg_id")" \
    "$(printf '%s\t1\ng1\t1' "$id255")" "effects (only g1 and the 255-byte id)"
h_assert_eq "$(h_sql "SELECT msg_id FROM msg_id_record WHERE consumer = '$q' ORDER BY msg_id")" \
    "$(printf '%s\ng1' "$id255")" "record rows"
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"
h_mq get "$dlq" >dlq.txt
h_assert_eq "$(cut -f1,2 dlq.txt | sort)" "$(printf -- '-\tno-id\n%s\tlong-id\nx1\treject' "$id256" | sort)" \
    "dead-lettered messages"
h_assert_eq "$(h_count_log idemd.log "outcome=reject queue=$q ")" 3 "reject outcomes"
h_assert_eq "$(h_depth "$dlq")" 0 "depth of $dlq after get"
echo "t_reject_and_missing_id: ok"
