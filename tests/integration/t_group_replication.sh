# t_group_replication: a 3-member single-primary MySQL Group Replication group on loopback: idemd, given all three members, writes only on the primary, follows a switchover and a kill -9 of the primary under load, and every message has one effect and one record.
h_db_is_mysql || h_skip "MySQL Group Replication: Oracle MySQL only"
plugin_dir=$(mysqld --no-defaults --verbose --help 2>/dev/null | awk '$1 == "plugin-dir" { print $2 }')
[[ -f ${plugin_dir:-/usr/lib/mysql/plugin}/group_replication.so ]] ||
    h_skip "mysqld has no group_replication.so (in ${plugin_dir:-?})"
db=t_group_replication
q=t_group_replication.q
n_msgs=3000

# Three members, each with its own data directory, SQL port and XCom port.
sql_port=() gcs_port=() dir=() sock=()
for i in 1 2 3; do
    sql_port[i]=$(h_free_port $((46000 + i * 1000)) 1000) || h_fail "no free port"
    gcs_port[i]=$(h_free_port $((52000 + i * 1000)) 1000) || h_fail "no free port"
    dir[i]=$PWD/m$i
    sock[i]=${dir[i]}/sock
done
seeds="127.0.0.1:${gcs_port[1]},127.0.0.1:${gcs_port[2]},127.0.0.1:${gcs_port[3]}"

# m_start I: member I's server with Group Replication loaded, not started (the binary log the
# harness turns off is on again: the group needs it), on a data directory made before; fast
# failure detection (expel at once). Records it for the runner; its pid in m_pids[I].
m_pids=()
m_start()
{
    local i=$1
    h_db_server "${dir[i]}" "${sock[i]}" "${sql_port[i]}" --log-bin=binlog --server-id="$i" \
        --gtid-mode=ON --enforce-gtid-consistency=ON --innodb-buffer-pool-size=32M \
        --innodb-flush-log-at-trx-commit=1 --max-connections=200 \
        --report-host=127.0.0.1 --report-port="${sql_port[i]}" \
        --plugin-load-add=group_replication.so \
        --group-replication-group-name=6e0c0fa1-1bac-4321-8765-0123456789ab \
        --group-replication-start-on-boot=OFF \
        --group-replication-local-address="127.0.0.1:${gcs_port[i]}" \
        --group-replication-group-seeds="$seeds" \
        --group-replication-ip-allowlist=127.0.0.1 \
        --group-replication-member-expel-timeout=0 --group-replication-autorejoin-tries=0 \
        --group-replication-recovery-get-public-key=ON \
        --group-replication-message-cache-size=134217728
    m_pids[i]=$!
    mkdir -p "$H_DIR/daemons"
    : >"$H_DIR/daemons/${m_pids[i]}"
}
# m_sql I SQL: run SQL on member I (root over its socket), tab-separated, no header.
m_sql() { "$H_DB_CLIENT" --no-defaults -S "${sock[$1]}" -uroot -N -B -e "$2"; }
# primary_of I: the member number that member I sees as the ONLINE primary ("" if none).
primary_of()
{
    local port
    port=$(m_sql "$1" "SELECT MEMBER_PORT FROM performance_schema.replication_group_members
                       WHERE MEMBER_ROLE = 'PRIMARY' AND MEMBER_STATE = 'ONLINE'" 2>/dev/null) || true
    for j in 1 2 3; do [[ $port == "${sql_port[j]}" ]] && echo "$j"; done
    return 0
}
# wait_online I N: until member I sees N members ONLINE (timeout 60 s).
wait_online()
{
    local deadline=$((SECONDS + 60)) got
    while :; do
        got=$(m_sql "$1" "SELECT COUNT(*) FROM performance_schema.replication_group_members
                          WHERE MEMBER_STATE = 'ONLINE'" 2>/dev/null) || true
        [[ $got == "$2" ]] && return 0
        ((SECONDS < deadline)) || h_fail "member $1 sees '$got' members ONLINE, not $2"
        sleep 0.2
    done
}
# records I: msg_id_record rows as member I has them.
records() { m_sql "$1" "SELECT COUNT(*) FROM \`$db\`.msg_id_record" 2>/dev/null || echo -1; }
# wait_records I N: until member I has at least N records; prints the seconds it took.
wait_records()
{
    local t0=$EPOCHREALTIME deadline=$((SECONDS + $3)) got
    while :; do
        got=$(records "$1")
        ((got >= $2)) && break
        ((SECONDS < deadline)) || h_fail "member $1 has $got records after $3 s, expected $2"
        sleep 0.1
    done
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f\n", b - a }'
}

t0=$SECONDS
# Three data directories at once (each --initialize takes seconds), then three servers.
init_pids=()
for i in 1 2 3; do
    h_db_init "${dir[i]}" &
    init_pids[i]=$!
done
for i in 1 2 3; do wait "${init_pids[i]}" || h_fail "initialising member $i"; done
for i in 1 2 3; do m_start "$i"; done
for i in 1 2 3; do
    MYSQL_SOCK=${sock[i]} h_db_wait "${m_pids[i]}" "${dir[i]}" || h_fail "member $i did not start"
done
h_log "3 servers up in $((SECONDS - t0)) s"
# The recovery account, on each member outside the binary log (as the manual's local deployment).
for i in 1 2 3; do
    m_sql "$i" "SET SQL_LOG_BIN = 0;
                CREATE USER 'rpl'@'127.0.0.1' IDENTIFIED BY 'rpl';
                GRANT REPLICATION SLAVE, CONNECTION_ADMIN, BACKUP_ADMIN, GROUP_REPLICATION_STREAM
                    ON *.* TO 'rpl'@'127.0.0.1';
                SET SQL_LOG_BIN = 1" || h_fail "recovery account on member $i"
done
m_sql 1 "SET GLOBAL group_replication_bootstrap_group = ON;
         START GROUP_REPLICATION USER = 'rpl', PASSWORD = 'rpl';
         SET GLOBAL group_replication_bootstrap_group = OFF" || h_fail "bootstrapping the group"
wait_online 1 1
for i in 2 3; do
    m_sql "$i" "START GROUP_REPLICATION USER = 'rpl', PASSWORD = 'rpl'" || h_fail "member $i joining"
    wait_online 1 "$i"
done
h_log "group of 3 ONLINE in $((SECONDS - t0)) s; primary: member $(primary_of 1)"
[[ $(primary_of 1) == 1 ]] || h_fail "member 1 bootstrapped the group but is not its primary"
# The group as before 8.4: EVENTUAL, so that idemd must raise its own sessions' level.
h_log "the group's group_replication_consistency: $(m_sql 1 "SELECT @@GLOBAL.group_replication_consistency"); EVENTUAL from now"
for i in 1 2 3; do
    m_sql "$i" "SET GLOBAL group_replication_consistency = 'EVENTUAL'" || h_fail "EVENTUAL on $i"
done

# The schema and idemd's account, on the primary (replicated to the others).
MYSQL_SOCK=${sock[1]} h_new_db "$db"
m_sql 1 "CREATE USER 'gr'@'127.0.0.1' IDENTIFIED BY 'gr';
         GRANT ALL ON \`$db\`.* TO 'gr'@'127.0.0.1';
         GRANT SELECT ON performance_schema.* TO 'gr'@'127.0.0.1'" || h_fail "idemd's account"

# Member 3 first in the list: a worker that starts there must move on to the primary.
cat >idemd.conf <<CONF
daemon = { log_level = "debug"; shutdown_timeout = 30; };
broker = { host = "127.0.0.1"; port = $AMQP_PORT; user = "guest"; password = "guest"; };
database = { hosts = [ "127.0.0.1:${sql_port[3]}", "127.0.0.1:${sql_port[1]}", "127.0.0.1:${sql_port[2]}" ];
             user = "gr"; password = "gr"; database = "$db"; connect_timeout = 2;
             read_timeout = 20; get_server_public_key = true; };
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 2; prefetch = 50;
             batch_size = 10; settings = { sleep_ms = 2; }; } );
CONF
h_daemon_start idemd.conf idemd.log
h_assert_eq "$(h_count_log idemd.log "$q#[01] info: database 127.0.0.1:${sql_port[3]}: a Group Replication SECONDARY member \(ONLINE\), not the primary; the primary is 127.0.0.1:${sql_port[1]}")" \
    "$(h_count_log idemd.log "$q#[01] info: database: trying the primary of 3 hosts")" \
    "a worker that reached a secondary went to the primary it named"
h_assert_eq "$(h_count_log idemd.log "info: database 127.0.0.1:${sql_port[1]}: the Group Replication primary \(3 of 3 members ONLINE\), consistency BEFORE_ON_PRIMARY_FAILOVER")" 2 \
    "both workers connected to the primary"
h_assert_eq "$(h_count_log idemd.log "info: database 127.0.0.1:${sql_port[1]}: group_replication_consistency EVENTUAL raised to BEFORE_ON_PRIMARY_FAILOVER")" 2 \
    "both workers raised their session's consistency"
h_assert_eq "$(m_sql 1 "SELECT GROUP_CONCAT(DISTINCT v.VARIABLE_VALUE), COUNT(*)
                        FROM performance_schema.variables_by_thread v
                        JOIN performance_schema.threads t USING (THREAD_ID)
                        WHERE t.PROCESSLIST_USER = 'gr'
                          AND v.VARIABLE_NAME = 'group_replication_consistency'")" \
    $'BEFORE_ON_PRIMARY_FAILOVER\t2' "the primary holds idemd's two sessions at BEFORE_ON_PRIMARY_FAILOVER"

# Every message once, and 5% of them twice (duplicates the records absorb).
h_gen g 1 "$n_msgs" | awk -F'\t' '{ print; if (substr($1, 2) % 20 == 0) print }' >pub.txt
total=$(wc -l <pub.txt)

# 1. A switchover under load: member 2 becomes the primary while batches commit on member 1.
out=$(h_mq publish -r "$q" < <(head -n $((total / 2)) pub.txt))
h_assert_eq "$out" "published $((total / 2)) confirmed $((total / 2))" "publish, first half"
wait_records 1 300 60 >/dev/null
at=$(records 1)
uuid2=$(m_sql 2 "SELECT @@server_uuid")
t_switch=$EPOCHREALTIME
m_sql 1 "SELECT group_replication_set_as_primary('$uuid2')" >/dev/null || h_fail "switchover"
call_s=$(awk -v a="$t_switch" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
[[ $(primary_of 1) == 2 ]] || h_fail "member 2 is not the primary after the switchover"
switch_s=$(wait_records 2 $((at + 50)) 60)
h_log "switchover at $at records took $call_s s; 50 more committed on member 2 within $switch_s s"
((at < n_msgs / 2)) || h_fail "the switchover came after the first half was done ($at records)"

# 2. kill -9 of the primary (member 2) under load; members 1 and 3 elect a new one.
out=$(h_mq publish -r "$q" < <(tail -n +$((total / 2 + 1)) pub.txt))
h_assert_eq "$out" "published $((total - total / 2)) confirmed $((total - total / 2))" \
    "publish, second half"
wait_records 2 $((at + 400)) 60 >/dev/null
at=$(records 2)
((at < n_msgs)) || h_fail "the kill would come after the load ($at records)"
t_kill=$EPOCHREALTIME
{
    kill -KILL "${m_pids[2]}"
    wait "${m_pids[2]}" || true # 137: it was us
} 2>/dev/null
deadline=$((SECONDS + 60))
until p=$(primary_of 1) && [[ $p == 1 || $p == 3 ]]; do
    ((SECONDS < deadline)) || h_fail "no new primary 60 s after the kill"
    sleep 0.2
done
elect_s=$(awk -v a="$t_kill" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
fail_s=$(wait_records "$p" $((at + 50)) 90)
h_log "kill -9 of member 2 at $at records: member $p primary after $elect_s s; 50 more committed" \
    "within $fail_s s of the election ($(awk -v a="$elect_s" -v b="$fail_s" 'BEGIN { print a + b }') s after the kill)"

# Everything arrives, once: the records and the effects on the new primary, and on the other
# survivor once it applied them.
survivor=$((p == 1 ? 3 : 1))
wait_records "$p" "$n_msgs" 120 >/dev/null
h_wait_depth "$q" 0 60 || h_fail "messages left in $q"
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
for m in "$p" "$survivor"; do
    MYSQL_SOCK=${sock[m]} h_wait_sql "SELECT COUNT(*) FROM msg_id_record" "$n_msgs" 60 ||
        h_fail "member $m: records"
    h_assert_eq "$(m_sql "$m" "SELECT COUNT(*), SUM(n), MAX(n) FROM \`$db\`.effects WHERE queue = '$q'")" \
        "$n_msgs"$'\t'"$n_msgs"$'\t'1 "member $m: effects (count, sum, max): each message once"
    h_assert_eq "$(m_sql "$m" "SELECT COUNT(*) FROM \`$db\`.msg_id_record")" "$n_msgs" \
        "member $m: one record per message"
done
h_assert_eq "$(h_depth "$q")" 0 "queue depth after stop"
h_assert_eq "$(h_depth "$q.dlq")" 0 "nothing dead-lettered"
h_assert_eq "$(h_count_log idemd.log "outcome=retry queue=$q ")" 0 \
    "no message retried: a primary change counts no attempt"
h_log "switchover: the call took $call_s s, progress on the new primary within $switch_s s;" \
    "failover: new primary $elect_s s after kill -9, progress $fail_s s later"
# The members' data (about 600 MB) goes, unless the run keeps it (H_KEEP=1); their logs stay.
{
    for i in 1 3; do kill -KILL "${m_pids[i]}" && wait "${m_pids[i]}"; done
} 2>/dev/null || true
[[ ${H_KEEP:-0} == 1 ]] || rm -rf "${dir[1]}/data" "${dir[2]}/data" "${dir[3]}/data"
echo "t_group_replication: ok"
