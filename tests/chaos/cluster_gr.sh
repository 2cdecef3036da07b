# shellcheck shell=bash
# cluster_gr.sh: the MySQL Group Replication half of cluster.sh (CL_DB=gr): a 3-member single-primary group, member N in the Galera node's namespace and address, with kill, restart, rejoin, partitions and one-way drops.
#
# Sourced by cluster.sh; the database words of cluster.sh (cl_db_*) call these when CL_DB=gr.
#   cl_gr_check          explain and fail unless mysqld and group_replication.so are there
#   cl_gr_prepare        member 1's data directory (mysqld --initialize-insecure), copied to
#                        2 and 3 (each gets a server_uuid of its own at its first start)
#   cl_gr_launch N       start member N's mysqld in its namespace (Group Replication loaded,
#                        not started: group_replication_start_on_boot = OFF)
#   cl_gr_form           the recovery account on each member (outside the binary log), the
#                        group bootstrapped on member 1, members 2 and 3 joined (incremental
#                        recovery from the binary log), until 3 are ONLINE
#   cl_gr_state N        member N's view: "OWN_STATE ONLINE_COUNT OWN_ROLE UNREACHABLE_COUNT"
#   cl_gr_wait N [S]     wait up to S s (240; longer, up to 600, while it is RECOVERING
#                        and applies transactions) until member N is ONLINE in a group of
#                        CL_DB_SIZE (3) ONLINE members; a member OFFLINE (restarted: autorejoin
#                        is off and start_on_boot too) or in ERROR (expelled, then back) gets
#                        START GROUP_REPLICATION (after STOP), as an operator, or MySQL
#                        Shell's rejoinInstance(), would do; said in the log
#   cl_gr_primary        true when some member sees an ONLINE PRIMARY in a group with a majority
#   cl_gr_bootstrap      none does: stop Group Replication on every member that answers and
#                        bootstrap the group again on the one with the most transactions;
#                        prints its number (the others are joined by cl_gr_wait)
#   cl_gr_order          the member numbers, the ONLINE PRIMARY first (the oracle reads there)
# Each member: its own datadir and socket ($CL_DIR/gN), SQL port 3306 and XCom port 33061 on
# its own address (report_host too, so that idemd finds the primary in database.hosts),
# group_replication_ip_allowlist the run's subnet, a 32 MB buffer pool. The failure detector
# runs with MySQL's defaults (5 s of silence, then group_replication_member_expel_timeout 5 s);
# group_replication_autorejoin_tries = 0 and exit_state_action = READ_ONLY, so that the run
# rejoins an expelled member itself (and says so) instead of waiting 5 minutes between
# autorejoin attempts. CL_GR_CNF adds my.cnf lines for every member.

CL_GR_GROUP=4c1d0e7a-39b2-4f6e-9a51-1d2e3f405162
CL_GR_XCOM=33061

cl_gr_plugin_dir()
{
    mysqld --no-defaults --verbose --help 2>/dev/null | awk '$1 == "plugin-dir" { print $2 }'
}

cl_gr_check()
{
    local d
    command -v mysqld >/dev/null || {
        cl_log "needs mysqld (package mysql-server) for Group Replication"
        return 1
    }
    d=$(cl_gr_plugin_dir)
    [[ -f ${d:-/usr/lib/mysql/plugin}/group_replication.so ]] || {
        cl_log "needs group_replication.so in ${d:-?} (Oracle MySQL's mysql-server)"
        return 1
    }
}

cl_gr_cnf()
{
    local n=$1 d=$CL_DIR/g$1 ip=${CL_GIP[$1]} x=$CL_GR_XCOM
    cat >"$d/my.cnf" <<EOF
[mysqld]
datadir = $d/data
socket = $d/sock
port = ${CL_MYSQL[$n]}
bind-address = $ip
user = root
pid-file = $d/mysqld.pid
log-error = $d/err.log
tmpdir = $d/tmp
secure-file-priv = $d/tmp
skip-name-resolve
mysqlx = OFF
innodb_buffer_pool_size = 32M
innodb_redo_log_capacity = 64M
innodb_flush_log_at_trx_commit = 1
max_connections = 500
server_id = $n
log_bin = binlog
gtid_mode = ON
enforce_gtid_consistency = ON
report_host = $ip
report_port = ${CL_MYSQL[$n]}
plugin_load_add = group_replication.so
group_replication_group_name = $CL_GR_GROUP
group_replication_start_on_boot = OFF
group_replication_local_address = $ip:$x
group_replication_group_seeds = ${CL_GIP[1]}:$x,${CL_GIP[2]}:$x,${CL_GIP[3]}:$x
group_replication_ip_allowlist = $CL_NET.0/24
group_replication_autorejoin_tries = 0
group_replication_exit_state_action = READ_ONLY
group_replication_recovery_get_public_key = ON
group_replication_message_cache_size = 134217728
${CL_GR_CNF:-}
EOF
    chmod 644 "$d/my.cnf"
}

cl_gr_prepare()
{
    local n
    for n in 1 2 3; do
        mkdir -p "$CL_DIR/g$n/tmp"
        cl_gr_cnf "$n"
    done
    if ! mysqld --no-defaults --initialize-insecure --datadir="$CL_DIR/g1/data" --user=root \
        --log-error="$CL_DIR/g1/install.log" >>"$CL_DIR/g1/install.log" 2>&1; then
        tail -n 20 "$CL_DIR/g1/install.log" >&2
        return 1
    fi
    # One --initialize (tens of seconds on a busy machine) instead of three; auto.cnf holds the
    # server_uuid, which each member must have of its own.
    for n in 2 3; do
        cp -a "$CL_DIR/g1/data" "$CL_DIR/g$n/data"
        rm -f "$CL_DIR/g$n/data/auto.cnf"
    done
    rm -f "$CL_DIR"/g[123]/data/binlog.*
}

cl_gr_launch()
{
    local n=$1 d=$CL_DIR/g$1
    ip netns exec "${CL_GNS[$n]}" setsid mysqld --defaults-file="$d/my.cnf" \
        </dev/null >>"$d/stdout.log" 2>&1 &
    echo $! >"$CL_DIR/g$n.pgid"
    disown $! # stopped through its pgid file; no job report when a fault kills it
}

# Wait up to $2 s until member $1 answers SQL (its own process still there).
cl_gr_wait_sql()
{
    local n=$1 deadline=$((SECONDS + $2))
    until cl_sql "$n" "SELECT 1" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)) || ! cl_db_alive "$n"; then
            tail -n 20 "$CL_DIR/g$n/err.log" >&2
            cl_log "Group Replication member $n does not answer"
            return 1
        fi
        sleep 0.5
    done
}

cl_gr_state()
{
    cl_sql "$1" "SELECT IFNULL(MAX(IF(MEMBER_ID = @@server_uuid, MEMBER_STATE, NULL)), 'NONE'),
                        SUM(MEMBER_STATE = 'ONLINE'),
                        IFNULL(MAX(IF(MEMBER_ID = @@server_uuid, MEMBER_ROLE, NULL)), 'NONE'),
                        SUM(MEMBER_STATE = 'UNREACHABLE')
                 FROM performance_schema.replication_group_members" 2>/dev/null | tr '\t' ' '
}

cl_gr_join_sql="START GROUP_REPLICATION USER = 'rpl', PASSWORD = 'rpl'"

# Whether a member other than $1, ONLINE itself, still lists member $1 in its view.
cl_gr_listed()
{
    local n=$1 k c
    for k in 1 2 3; do
        ((k == n)) && continue
        c=$(cl_sql "$k" "SELECT COUNT(*) FROM performance_schema.replication_group_members
                         WHERE MEMBER_HOST = '${CL_GIP[$n]}'
                           AND (SELECT MEMBER_STATE FROM performance_schema.replication_group_members
                                WHERE MEMBER_ID = @@server_uuid) = 'ONLINE'" 2>/dev/null) || continue
        [[ $c =~ ^[1-9] ]] && return 0
    done
    return 1
}

# START GROUP_REPLICATION on member $1 (after STOP when $2 is "stop"); said in the log. A member
# the others still list (its old incarnation, killed or expelled from its own point of view)
# cannot join ("Old incarnation found ... Please stop the old node or wait for it to leave the
# group"), and each attempt makes that old incarnation reachable again in their eyes, so it is
# never expelled: on 2026-12-07 a member restarted after a one-way drop tried for 5 minutes
# while the primary kept it ONLINE. So it first waits, out of the group, up to 60 s for the
# others to let it go.
cl_gr_rejoin()
{
    local n=$1 t0=$SECONDS sql=$cl_gr_join_sql
    if [[ ${2:-} == stop ]]; then
        timeout 180 mysql --no-defaults -S "$CL_DIR/g$n/sock" -uroot -N -B -e "STOP GROUP_REPLICATION" 2>&1 |
            sed 's/^/#     /' >&2 || true
    fi
    if cl_gr_listed "$n"; then
        cl_log "Group Replication member $n: still in another member's view: waiting for it to be let go"
        while cl_gr_listed "$n" && ((SECONDS - t0 < 60)); do sleep 1; done
        cl_log "Group Replication member $n: $(cl_gr_listed "$n" && echo "still listed" || echo "let go") after $((SECONDS - t0)) s"
    fi
    cl_log "Group Replication member $n: ${2:+STOP and }START GROUP_REPLICATION (rejoin)"
    echo "$(date +%H:%M:%S) member $n ${2:-start}" >>"$CL_DIR/gr_rejoins"
    # START returns once the member is in the group (recovery goes on after it) or failed.
    timeout 180 mysql --no-defaults -S "$CL_DIR/g$n/sock" -uroot -N -B -e "$sql" 2>&1 |
        sed 's/^/#     /' >&2 || true
    cl_log "Group Replication member $n: START returned after $((SECONDS - t0)) s"
}

# True when member $1's view ("$2") and that of every other member ONLINE agree: $3 members
# ONLINE, none UNREACHABLE. (Right after a heal an expelled member still shows its old view of
# 3 ONLINE until it learns it was expelled; the others show 2.)
cl_gr_agreed()
{
    local n=$1 st=$2 size=$3 k sk
    [[ $st == "ONLINE $size "*" 0" ]] || return 1
    for k in 1 2 3; do
        ((k == n)) && continue
        sk=$(cl_gr_state "$k") || continue
        [[ $sk == ONLINE* && $sk != "ONLINE $size "*" 0" ]] && return 1
    done
    return 0
}

# True when member $1's view ("$2") counts more members ONLINE than every other member that is
# ONLINE itself sees (and there is one): it has not learnt that it was expelled.
cl_gr_stale()
{
    local n=$1 mine k sk others=0 most=0 c
    read -r _ mine _ <<<"$2"
    for k in 1 2 3; do
        ((k == n)) && continue
        sk=$(cl_gr_state "$k") || continue
        [[ $sk == ONLINE* ]] || continue
        read -r _ c _ <<<"$sk"
        others=1
        ((c > most)) && most=$c
    done
    ((others && ${mine:-0} > most))
}

cl_gr_wait()
{
    local n=$1 deadline=$((SECONDS + ${2:-240})) st size=${CL_DB_SIZE:-3} own last_try=-100
    local stuck=$SECONDS cap=$((SECONDS + 600)) trx last_trx=-1 last_look=0
    while ((SECONDS < deadline)); do
        st=$(cl_gr_state "$n") || st=
        read -r own _ <<<"$st"
        cl_gr_agreed "$n" "$st" "$size" && return 0
        cl_db_alive "$n" || break
        [[ $own == RECOVERING ]] && stuck=$SECONDS
        # A member RECOVERING that applies transactions (its backlog after a partition under
        # load: 237 s once with 80,000 messages) is not stuck: while it gains, every 10 s,
        # the deadline is at least 60 s away (at most 600 s in all).
        if [[ $own == RECOVERING ]] && ((SECONDS - last_look >= 10)); then
            last_look=$SECONDS
            trx=$(cl_gr_trx "$n")
            if ((last_trx >= 0 && trx > last_trx && deadline < SECONDS + 60)); then
                deadline=$((SECONDS + 60 < cap ? SECONDS + 60 : cap))
            fi
            last_trx=$trx
        fi
        [[ $own == ONLINE ]] && ! cl_gr_stale "$n" "$st" && stuck=$SECONDS
        # OFFLINE or NONE (restarted), ERROR (expelled and back): join; a view with more
        # members ONLINE than any other ONLINE member sees, for over 60 s (an expel not
        # learnt): STOP and START too. A member that waits for another to come back is left be.
        if [[ -n $st ]] && ((SECONDS - last_try >= 30)); then
            if [[ $own == OFFLINE || $own == NONE ]]; then
                cl_gr_rejoin "$n"
                last_try=$SECONDS stuck=$SECONDS
            elif [[ $own == ERROR ]] || ((SECONDS - stuck >= 60)); then
                cl_gr_rejoin "$n" stop
                last_try=$SECONDS stuck=$SECONDS
            fi
        fi
        sleep 1
    done
    tail -n 20 "$CL_DIR/g$n/err.log" >&2
    cl_log "Group Replication member $n is not ONLINE in a group of $size (last: '${st:-no answer}')"
    cl_gr_report
    return 1
}

# The members member $1 sees UNREACHABLE (their numbers), if it is ONLINE itself.
cl_gr_unreachable_of()
{
    local host
    cl_sql "$1" "SELECT MEMBER_HOST FROM performance_schema.replication_group_members
                 WHERE MEMBER_STATE = 'UNREACHABLE'
                   AND (SELECT MEMBER_STATE FROM performance_schema.replication_group_members
                        WHERE MEMBER_ID = @@server_uuid) = 'ONLINE'" 2>/dev/null |
        while read -r host; do cl_gr_number "$host"; done
    return 0
}

# The number of the member whose address is $1 (nothing for another address).
cl_gr_number()
{
    local n
    for n in 1 2 3; do [[ $1 == "${CL_GIP[$n]}" ]] && echo "$n"; done
    return 0
}

cl_gr_report()
{
    local n
    for n in 1 2 3; do
        cl_log "Group Replication member $n (own state, ONLINE, role, UNREACHABLE):" \
            "$(cl_gr_state "$n" || true); $(grep -c 'expelled' "$CL_DIR/g$n/err.log" || true) log lines on expels"
    done
}

cl_gr_form()
{
    local n t0=$SECONDS
    for n in 1 2 3; do
        cl_gr_wait_sql "$n" 180 || return 1
        cl_sql "$n" "SET SQL_LOG_BIN = 0;
                CREATE USER 'rpl'@'$CL_NET.%' IDENTIFIED BY 'rpl';
                GRANT REPLICATION SLAVE, CONNECTION_ADMIN, BACKUP_ADMIN, GROUP_REPLICATION_STREAM
                    ON *.* TO 'rpl'@'$CL_NET.%';
                SET SQL_LOG_BIN = 1" || return 1
    done
    cl_sql 1 "SET GLOBAL group_replication_bootstrap_group = ON; $cl_gr_join_sql;
              SET GLOBAL group_replication_bootstrap_group = OFF" || {
        tail -n 20 "$CL_DIR/g1/err.log" >&2
        return 1
    }
    CL_DB_SIZE=1 cl_gr_wait 1 120 || return 1
    for n in 2 3; do
        cl_sql "$n" "$cl_gr_join_sql" || cl_log "Group Replication member $n: START failed (retried)"
        CL_DB_SIZE=$n cl_gr_wait "$n" 240 || return 1
    done
    cl_log "Group Replication: 3 members ONLINE after $((SECONDS - t0)) s, primary member" \
        "$(cl_gr_order | cut -d' ' -f1)"
}

# The number of the member that member $1 sees as the ONLINE PRIMARY ("" if none).
cl_gr_primary_of()
{
    local host
    host=$(cl_sql "$1" "SELECT MEMBER_HOST FROM performance_schema.replication_group_members
                        WHERE MEMBER_ROLE = 'PRIMARY' AND MEMBER_STATE = 'ONLINE'
                          AND (SELECT SUM(MEMBER_STATE = 'ONLINE') > SUM(MEMBER_STATE = 'UNREACHABLE')
                               FROM performance_schema.replication_group_members)" 2>/dev/null) || true
    cl_gr_number "$host"
}

cl_gr_primary()
{
    local n
    for n in 1 2 3; do [[ -n $(cl_gr_primary_of "$n") ]] && return 0; done
    return 1
}

cl_gr_order()
{
    local n p=
    for n in 1 2 3; do
        p=$(cl_gr_primary_of "$n")
        [[ -n $p ]] && break
    done
    for n in 1 2 3; do [[ $n == "$p" ]] || p+=" $n"; done
    echo "$p"
}

# Member $1's transactions of the group (the upper end of its GTID intervals), or -1.
cl_gr_trx()
{
    local g
    g=$(cl_sql "$1" "SELECT @@GLOBAL.gtid_executed" 2>/dev/null | tr -d '\n') || { echo -1; return 0; }
    grep -oE "$CL_GR_GROUP(:[0-9-]+)+" <<<"$g" | grep -oE '[0-9]+$' | sort -n | tail -n 1 || echo 0
}

cl_gr_bootstrap()
{
    local n t best=-2 bn=0
    for n in 1 2 3; do
        t=$(cl_gr_trx "$n")
        [[ $t =~ ^[0-9]+$ ]] || continue
        ((t > best)) && best=$t bn=$n
    done
    ((bn)) || return 1
    for n in 1 2 3; do
        timeout 120 mysql --no-defaults -S "$CL_DIR/g$n/sock" -uroot -e "STOP GROUP_REPLICATION" \
            >/dev/null 2>&1 || true
    done
    cl_sql "$bn" "SET GLOBAL group_replication_bootstrap_group = ON; $cl_gr_join_sql;
                  SET GLOBAL group_replication_bootstrap_group = OFF" >&2 || return 1
    echo "$bn"
}

# True once both sides of a partition of member $1 saw it: member $1 sees another member
# UNREACHABLE (or is in ERROR), and the next member is ONLINE in a group of 2 ONLINE members
# without UNREACHABLE ones (member $1 expelled).
cl_gr_part_seen()
{
    local n=$1 m=$(($1 % 3 + 1)) st own
    st=$(cl_gr_state "$n")
    read -r own _ _ un <<<"$st"
    [[ $own == ERROR || ${un:-0} -ge 1 ]] || return 1
    [[ $(cl_gr_state "$m") == "ONLINE 2 "*" 0" ]]
}

# The three members' views on one line: "1: ONLINE 3 PRIMARY 0 | 2: ..."; "-" for no answer.
cl_gr_views()
{
    local n out=()
    for n in 1 2 3; do out+=("$n: $(cl_gr_state "$n" || true)"); done
    local IFS='|'
    echo "${out[*]}"
}
