# t_forged_headers: idemd-attempts, idemd-first-failure and idemd-original-* set by a publisher are not believed (only idemd's signed copies are): a retrying message goes through every attempt, with or without delay tiers, and is dead-lettered with honest headers; handlers see user_id and app_id.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_forged_headers
q=t_forged.q # delay tiers
qs=t_forged.s # retry_delays_ms = [ ]: copies go straight back to the queue
h_new_db "$db"
c_fresh_queues $q $q.dlq $q.retry.100 $q.retry.200 $qs $qs.dlq
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; max_attempts = 3; retry_delays_ms = [ 100, 200 ]; },
  { name = "$qs"; handler = "$H_TEST_PLUGINS/counter.so"; max_attempts = 3; retry_delays_ms = [ ]; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
bp() { "$C_BADPUB" -P "$AMQP_PORT" "$@" >/dev/null || h_fail "badpub $* failed"; }
forged=(--header idemd-attempts=u32:4294967295 --header idemd-first-failure=str:1999-01-01T00:00:00.000Z
    --header idemd-original-exchange=str:forged.x --header idemd-original-routing-key=str:forged.rk
    --header "idemd-sig=str:$(printf '0%.0s' {1..64})")

bp -r "$q" --id f1 --body retry "${forged[@]}"
bp -r "$qs" --id f2 --body retry "${forged[@]}"
bp -r "$q" --id who --body whoami --user-id guest --app-id billing-app
h_wait_depth "$q.dlq" 2 30 || h_fail "$q.dlq does not hold f1 and who"
h_wait_depth "$qs.dlq" 1 30 || h_fail "$qs.dlq does not hold f2"
h_wait_log idemd.log "outcome=retry queue=$qs id=f2 .*then=\"dead-lettered" 1 10

for x in "$q f1" "$qs f2"; do
    read -r qq id <<<"$x"
    for a in 1 2; do
        h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$qq id=$id .*attempt=$a/3 .*then=\"retry scheduled")" 1 \
            "$id: attempt $a scheduled for retry"
    done
    h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$qq id=$id .*attempt=3/3 .*then=\"dead-lettered")" 1 \
        "$id: attempt 3 dead-lettered"
    h_assert_eq "$(h_count_log idemd.log "outcome=[a-z]+ queue=$qq id=$id ")" 3 "outcome lines of $id"
done
h_assert_eq "$(h_count_log idemd.log "outcome=reject queue=$q id=who .*reason=\"whoami user_id=guest app_id=billing-app")" 1 \
    "the handler saw user_id and app_id"
h_assert_eq "$(h_sql "SELECT COUNT(*), MIN(LENGTH(k)) FROM idemd_key")" $'1\t32' "one 32-byte key"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

h_mq get "$q.dlq" >dlq.txt
h_mq get "$qs.dlq" >>dlq.txt
for x in "$q f1" "$qs f2"; do
    read -r qq id <<<"$x"
    line=$(awk -F'\t' -v id="$id" '$1 == id' dlq.txt)
    [[ -n "$line" ]] || h_fail "$id is not dead-lettered"
    h_assert_eq "$(c_hdr "$line" idemd-attempts)" 3 "$id: idemd-attempts"
    first=$(c_hdr "$line" idemd-first-failure)
    [[ "$first" == "$(date -u +%Y)-"* ]] || h_fail "$id: idemd-first-failure '$first' is not this run's"
    h_assert_eq "$(c_hdr "$line" idemd-original-exchange)" "" "$id: idemd-original-exchange"
    h_assert_eq "$(c_hdr "$line" idemd-original-routing-key)" "$qq" "$id: idemd-original-routing-key"
    [[ $(c_hdr "$line" idemd-sig) =~ ^[0-9a-f]{64}$ ]] || h_fail "$id: no signature on the dead letter"
    [[ $(c_hdr "$line" idemd-sig) != "$(printf '0%.0s' {1..64})" ]] || h_fail "$id: the forged signature was kept"
done
echo "t_forged_headers: ok"
