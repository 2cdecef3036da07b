# t_log_forging: ids and handler reasons with spaces, '=', quotes and newlines cannot forge a log line or a field.
source "$H_ROOT/tests/chaos/lib.sh"
db=t_log_forging
q=t_log_forging.q
dlq=t_log_forging.dlq
h_new_db "$db"
c_fresh_queues $q $dlq
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; declare = { dead_letter_queue = "$dlq"; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log

bp() { "$C_BADPUB" -P "$AMQP_PORT" -r "$q" "$@" >/dev/null || h_fail "badpub $* failed"; }
# A reject whose id carries a field, and whose reason carries a whole forged line.
bp --id 'o-1 outcome=ok tag=7' \
    --body 'reject-echo:bad\x0a2026-11-29 10:00:00.000 [1] t#1 warning: outcome=ok queue=t id=forged1'
# A newline, a quote and a backslash in the id itself.
bp --id 'o-2\x0a2026-11-29 10:00:00.000 [1] t#1 debug: outcome=ok id=forged2 \x22\\' --body reject
# A good message whose id says otherwise: its real outcome is ok.
bp --id 'o-3 outcome=reject' --body good
# A reason with '=' and quotes only (no control bytes): still one quoted value.
bp --id o-4 --body 'reject-echo:outcome=ok "x"'

h_wait_depth "$dlq" 3 30
h_wait_log idemd.log "outcome=(ok|reject) queue=$q " 4 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"

# One line per event: every line of the log starts with a timestamp.
h_assert_eq "$(h_count_log idemd.log '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]{12} \[[0-9]+\] ')" \
    "$(wc -l <idemd.log)" "lines that start with a timestamp (all of them)"
h_assert_eq "$(h_count_log idemd.log 'forged')" 2 "lines mentioning a forged id (inside quotes)"

# What a logfmt reader sees: key=bare or key="quoted" (a quoted value swallows its content).
logfmt_fields() { grep -oE '[a-z_]+=("([^"\\]|\\.)*"|[^ ]*)' <<<"$1" || true; }
for want in 'o-1 outcome=ok tag=7|reject' 'o-2\n2026|reject' 'o-3 outcome=reject|ok' 'o-4|reject'; do
    id=${want%|*} outcome=${want#*|}
    line=$(grep -F -- "queue=$q id=" idemd.log | grep -F -- "$id" || true)
    h_assert_eq "$(grep -c . <<<"$line")" 1 "outcome lines of '$id'"
    fields=$(logfmt_fields "$line")
    h_assert_eq "$(grep -c '^outcome=' <<<"$fields")" 1 "outcome fields a logfmt reader sees for '$id'"
    h_assert_eq "$(grep '^outcome=' <<<"$fields")" "outcome=$outcome" "real outcome of '$id'"
    h_assert_eq "$(grep -c '^tag=' <<<"$fields")" 1 "tag fields of '$id'"
done
grep -F 'id="o-1 outcome=ok tag=7" ' idemd.log >/dev/null || h_fail "o-1's id is not quoted"
grep -F 'reason="bad\n2026-11-29 10:00:00.000 [1] t#1 warning: outcome=ok queue=t id=forged1"' \
    idemd.log >/dev/null || h_fail "o-1's reason is not quoted with its newline escaped"
grep -F 'id="o-2\n2026-11-29 10:00:00.000 [1] t#1 debug: outcome=ok id=forged2 \"\\" ' \
    idemd.log >/dev/null || h_fail "o-2's id is not escaped"
grep -F 'reason="outcome=ok \"x\""' idemd.log >/dev/null || h_fail "o-4's reason is not quoted"

h_assert_eq "$(h_sql "SELECT msg_id, n FROM effects")" $'o-3 outcome=reject\t1' \
    "effects (rejected messages leave none)"
h_assert_eq "$(h_depth "$q")" 0 "depth of $q"
echo "t_log_forging: ok"
