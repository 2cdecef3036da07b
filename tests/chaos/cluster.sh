# shellcheck shell=bash
# cluster.sh: a private 3-node RabbitMQ cluster and a 3-node MariaDB Galera cluster, each node in a network namespace of its own, with kill, restart, partition and rejoin of single nodes.
#
# Needs root and iproute2 (ip netns, veth, bridge). Two halves:
#   In the root namespace (the caller that owns the run):
#   cl_vars ID               set the names below from ID (the owning process's pid)
#   cl_net_check             explain and fail unless root, ip, network namespaces with a
#                            bridge and veth pairs, galera-4 and rsync are there
#   cl_net_up                create the namespaces: a hub $CL_HUB with bridge br0 ($CL_NET.254)
#                            and one namespace per node, joined to br0 by a veth pair (vrN /
#                            vgN in the hub, eth0 in the node's namespace): RabbitMQ node N at
#                            $CL_NET.1N, Galera node N at $CL_NET.2N; /etc/netns/NS/hosts names
#                            them (idcrN, idcgN) in every namespace
#   cl_net_down              kill every process left in those namespaces, delete them and
#                            their /etc/netns directories
#   Inside the hub namespace (ip netns exec $CL_HUB ..., with CL_ID and CL_DIR exported):
#   cl_start                 start both clusters and wait until they are formed: 3 running
#                            RabbitMQ nodes (cluster_partition_handling = pause_minority,
#                            net_ticktime 10 s), 3 Synced Galera nodes; creates the TCP account
#                            idemd/idemd for the hub's addresses
#   cl_stop                  stop everything (TERM, then KILL), remove $CL_DIR unless H_KEEP=1
#   cl_rabbit_kill N         kill -9 RabbitMQ node N (its whole process group)
#   cl_rabbit_start N        start node N again (same name, address and data) and wait for it
#   cl_galera_kill N         kill -9 Galera node N
#   cl_galera_start N        start node N again; it rejoins (IST, or rsync SST) and is Synced
#   cl_rabbit_wait N         wait until node N answers (AMQP port, await_startup)
#   cl_rabbit_wait3 N S      wait up to S s until node N sees CL_RABBIT_SIZE (3) running
#   cl_galera_wait N [S]     wait up to S s (180) until node N is Synced in a cluster of
#                            CL_GALERA_SIZE (3)
#   cl_rabbit_part N [S]     cut node N's link for at least S s (CLC_PART_HOLD, 25) and until
#                            both sides saw the partition, heal it, wait until N runs in the
#                            cluster of 3 again
#   cl_galera_part N [S]     the same for Galera node N (non-Primary alone, then Synced again)
#   cl_galera_primary        true when some Galera node is in a Primary component
#   cl_galera_bootstrap      none is: make the most advanced answering node Primary
#                            (pc.bootstrap=YES); prints its number
#   cl_sql N QUERY [DB]      run QUERY as root on node N (unix socket), rows tab-separated
#   cl_sql_any QUERY [DB]    the same on the first node that answers
#   cl_ctl N ARGS...         rabbitmqctl against node N, from the hub (Erlang distribution)
#   cl_mq N ARGS...          mqtool against node N
# Variables (cl_vars): CL_HUB, CL_NET, CL_RNS/CL_GNS[1..3] (namespaces), CL_RIP/CL_GIP[1..3]
# (addresses), CL_NODE[1..3] (Erlang node names rabbit@idcrN), CL_AMQP/CL_MYSQL[1..3] (ports,
# 5672 and 3306 on every node); after cl_start: CL_DIR, HOME (the shared Erlang cookie).
#
# Galera per node: its own datadir and socket; gmcast.listen_addr, ist.recv_addr and the SST
# address on the node's own address; a datadir the rsync SST daemon can write (cl_sst_writable).
# CL_GALERA_OPTS adds wsrep_provider_options, CL_GALERA_CNF more lines of my.cnf (experiments:
# e.g. "wsrep_log_conflicts = ON" logs every applier abort of a local transaction).

CL_GALERA_LIB=${CL_GALERA_LIB:-/usr/lib/galera/libgalera_smm.so}
# The database group: galera (MariaDB Galera) or gr (MySQL Group Replication, cluster_gr.sh).
CL_DB=${CL_DB:-galera}
# shellcheck source=tests/chaos/cluster_gr.sh
source "$(dirname "${BASH_SOURCE[0]}")/cluster_gr.sh"
declare -a CL_AMQP CL_NODE CL_MYSQL CL_RNS CL_GNS CL_RIP CL_GIP

cl_log() { echo "# $(date +%H:%M:%S) cluster: $*" >&2; }

cl_amqp_port() { echo "${CL_AMQP[$1]}"; }
cl_mysql_port() { echo "${CL_MYSQL[$1]}"; }

# ---------- namespaces ----------

# Set the namespace names and addresses from id $1 (unique on this machine: a pid).
cl_vars()
{
    local id=$1 n
    CL_ID=$id
    CL_HUB=idc${id}h
    # Each run has a bridge of its own, so the subnet only has to be private.
    CL_NET=10.213.$((id % 250 + 1))
    CL_HUB_IP=$CL_NET.254
    for n in 1 2 3; do
        CL_RNS[n]=idc${id}r$n
        CL_GNS[n]=idc${id}g$n
        CL_RIP[n]=$CL_NET.1$n
        CL_GIP[n]=$CL_NET.2$n
        CL_NODE[n]=rabbit@idcr$n
        CL_AMQP[n]=5672
        CL_MYSQL[n]=3306
    done
}

cl_all_ns() { echo "$CL_HUB ${CL_RNS[*]} ${CL_GNS[*]}"; }

cl_net_check()
{
    if [[ $(id -u) != 0 ]]; then
        cl_log "needs root: every node runs in a network namespace of its own (ip netns)"
        return 1
    fi
    if ! command -v ip >/dev/null; then
        cl_log "needs ip (package iproute2) for network namespaces"
        return 1
    fi
    if [[ $CL_DB == gr ]]; then
        cl_gr_check || return 1
    elif [[ ! -f $CL_GALERA_LIB ]] || ! command -v rsync >/dev/null; then
        cl_log "needs $CL_GALERA_LIB (package galera-4) and rsync (package rsync)"
        return 1
    fi
    local probe=idc$$probe ok=1
    if ! ip netns add "$probe" 2>/dev/null; then
        cl_log "cannot create a network namespace (ip netns add) on this machine"
        return 1
    fi
    # The bridge and the veth pairs too: a container may allow one and not the others.
    if ! ip -n "$probe" link add br0 type bridge 2>/dev/null ||
        ! ip -n "$probe" link add v0 type veth peer name v1 2>/dev/null; then
        cl_log "cannot create a bridge and a veth pair in a network namespace on this machine"
        ok=0
    fi
    ip netns del "$probe"
    ((ok))
}

# The hosts file of every namespace: the machine's own, plus the nodes' names, and the
# machine's hostname on the hub's address: rabbitmqctl, run in the hub, is an Erlang node
# named after it, and the nodes must reach it there (list_queues streams from every node).
cl_hosts()
{
    local n host
    host=$(hostname)
    awk -v h="$host" '/^[ \t]*#/ { print; next }
        { out = $1; for (i = 2; i <= NF; i++) if ($i != h) out = out " " $i; if (out != $1) print out }' /etc/hosts
    echo "# tests/chaos/cluster run $CL_ID"
    echo "$CL_HUB_IP $host"
    for n in 1 2 3; do echo "${CL_RIP[$n]} idcr$n"; done
    for n in 1 2 3; do echo "${CL_GIP[$n]} idcg$n"; done
    echo "$CL_HUB_IP idchub"
}

# Join namespace $1 to the hub's bridge: veth $2 in the hub, eth0 with address $3 in $1.
cl_net_link()
{
    ip -n "$CL_HUB" link add "$2" type veth peer name eth0 netns "$1" &&
        ip -n "$CL_HUB" link set "$2" master br0 up &&
        ip -n "$1" addr add "$3/24" dev eth0 &&
        ip -n "$1" link set eth0 up
}

cl_net_up()
{
    local ns n
    for ns in $(cl_all_ns); do
        if ! ip netns add "$ns"; then
            cl_log "cannot create network namespace $ns"
            return 1
        fi
        mkdir -p "/etc/netns/$ns"
        cl_hosts >"/etc/netns/$ns/hosts"
        ip -n "$ns" link set lo up || return 1
    done
    ip -n "$CL_HUB" link add br0 type bridge &&
        ip -n "$CL_HUB" addr add "$CL_HUB_IP/24" dev br0 &&
        ip -n "$CL_HUB" link set br0 up || return 1
    for n in 1 2 3; do
        cl_net_link "${CL_RNS[$n]}" "vr$n" "${CL_RIP[$n]}" || return 1
        cl_net_link "${CL_GNS[$n]}" "vg$n" "${CL_GIP[$n]}" || return 1
    done
    cl_log "namespaces $(cl_all_ns); hub $CL_HUB_IP, RabbitMQ ${CL_RIP[*]}, $(cl_db_title) ${CL_GIP[*]}"
}

cl_net_down()
{
    local ns pids i
    local -
    set +e +o pipefail
    for ns in $(cl_all_ns); do
        if [[ -e /run/netns/$ns ]]; then
            for ((i = 0; i < 100; i++)); do
                pids=$(ip netns pids "$ns" 2>/dev/null)
                [[ -z $pids ]] && break
                # shellcheck disable=SC2086 # pids
                kill -KILL $pids 2>/dev/null
                sleep 0.1
            done
            [[ -z $pids ]] || cl_log "processes left in $ns: $pids"
            ip netns del "$ns" || cl_log "cannot delete network namespace $ns"
        fi
        rm -rf "/etc/netns/$ns"
    done
}

# ---------- clients ----------

cl_ctl() { local n=$1; shift; timeout 60 "$H_RABBIT_BIN/rabbitmqctl" -q -n "${CL_NODE[$n]}" "$@"; }

cl_mq() { local n=$1; shift; "$MQTOOL" -H "${CL_RIP[$n]}" -P "${CL_AMQP[$n]}" "$@"; }

cl_sql()
{
    local client=mariadb
    [[ $CL_DB == gr ]] && client=mysql
    "$client" --no-defaults -S "$CL_DIR/g$1/sock" -uroot -N -B -e "$2" ${3:+"$3"}
}

# The same on the first node that answers (Group Replication: the primary first, which
# has every committed transaction; a secondary may not have applied them yet).
cl_sql_any()
{
    local n order=(1 2 3)
    # shellcheck disable=SC2207 # numbers
    [[ $CL_DB == gr ]] && order=($(cl_gr_order))
    for n in "${order[@]}"; do
        cl_sql "$n" "$@" 2>/dev/null && return 0
    done
    return 1
}

# Wait up to $3 s for a TCP listener on $1:$2.
cl_wait_tcp()
{
    local deadline=$((SECONDS + $3))
    while ((SECONDS < deadline)); do
        timeout 5 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null && return 0
        sleep 0.3
    done
    return 1
}

# Stop the process group recorded in $1 with signal $2 and wait (KILL after $3 s).
cl_stop_group()
{
    local f=$1 sig=$2 limit=$3 pgid
    [[ -f "$f" ]] || return 0
    pgid=$(cat "$f")
    rm -f "$f"
    kill -"$sig" -- -"$pgid" 2>/dev/null || return 0
    local deadline=$((SECONDS + limit))
    while pgrep -g "$pgid" >/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
    kill -KILL -- -"$pgid" 2>/dev/null || true
    return 0
}

# ---------- RabbitMQ ----------

cl_rabbit_launch()
{
    local n=$1 d=$CL_DIR/r$1
    mkdir -p "$d/mnesia" "$d/log"
    echo '[].' >"$d/enabled_plugins"
    : >"$d/rabbitmq-env.conf"
    # net_ticktime 10: a cut-off peer is seen down after 7.5-12.5 s (default 60).
    cat >"$d/rabbitmq.conf" <<EOF
loopback_users = none
disk_free_limit.absolute = 10MB
log.console = false
log.file.level = info
cluster_partition_handling = pause_minority
net_ticktime = 10
EOF
    # At-least-once dead-lettering (idemd's quorum delay tiers) retries a hop it could not make
    # after dead_letter_worker_publisher_confirm_timeout: 180 s by default. At a restart the
    # delay queue can come up before the default exchange does, and its expired copies then
    # wait that long (docs/rabbitmq.md, "After a broker restart"). 10 s, as docs/deploying.md
    # recommends; the key gained _ms in RabbitMQ 4.x, so both are set.
    cat >"$d/advanced.config" <<EOF
[{rabbit, [{dead_letter_worker_publisher_confirm_timeout, 10000},
           {dead_letter_worker_publisher_confirm_timeout_ms, 10000}]}].
EOF
    (
        export RABBITMQ_NODENAME=${CL_NODE[$n]}
        export RABBITMQ_NODE_IP_ADDRESS=${CL_RIP[$n]}
        export RABBITMQ_NODE_PORT=${CL_AMQP[$n]}
        export RABBITMQ_DIST_PORT=25672
        export RABBITMQ_MNESIA_BASE=$d/mnesia
        export RABBITMQ_LOG_BASE=$d/log
        export RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins
        export RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf
        export RABBITMQ_CONF_ENV_FILE=$d/rabbitmq-env.conf
        export RABBITMQ_ADVANCED_CONFIG_FILE=$d/advanced.config
        export RABBITMQ_PID_FILE=$d/rabbit.pid
        export RABBITMQ_PLUGINS_EXPAND_DIR=$d/plugins-expand
        # rabbitmq-server 3.10 passes "-kernel prevent_overlapping_partitions false" to erl;
        # with it a node paused as the minority hung in 'global' at its restart after the
        # heal (seen here once in three, for minutes). The later true wins.
        ip netns exec "${CL_RNS[$n]}" setsid "$H_RABBIT_BIN/rabbitmq-server" \
            -kernel prevent_overlapping_partitions true </dev/null >>"$d/stdout.log" 2>&1 &
        echo $! >"$CL_DIR/r$n.pgid"
    )
}

cl_rabbit_wait()
{
    local n=$1
    if ! cl_wait_tcp "${CL_RIP[$n]}" "${CL_AMQP[$n]}" 120; then
        tail -n 20 "$CL_DIR/r$n/stdout.log" >&2
        cl_log "RabbitMQ node $n did not open ${CL_RIP[$n]}:${CL_AMQP[$n]}"
        return 1
    fi
    cl_ctl "$n" await_startup >/dev/null || {
        cl_log "RabbitMQ node $n: await_startup failed"
        return 1
    }
}

# Number of running cluster nodes node $1 sees (? when it does not answer).
cl_rabbit_running()
{
    local r
    r=$(cl_ctl "$1" eval 'length(rabbit_nodes:all_running()).' 2>/dev/null) || r='?'
    echo "$r"
}

# Number of RabbitMQ nodes node $1 is connected to, itself included (? when it does not
# answer). RabbitMQ 4.x keeps its metadata in Khepri, where all_running() still counts a node
# cut off by a partition; the Erlang distribution drops it after net_ticktime.
cl_rabbit_connected()
{
    local r
    r=$(cl_ctl "$1" eval 'length([N || N <- [node() | nodes()], lists:prefix("rabbit@", atom_to_list(N))]).' \
        2>/dev/null) || r='?'
    echo "$r"
}

# Wait up to $2 s until node $1 sees CL_RABBIT_SIZE (3) running nodes.
cl_rabbit_wait3()
{
    local deadline=$((SECONDS + $2)) r size=${CL_RABBIT_SIZE:-3}
    while ((SECONDS < deadline)); do
        r=$(cl_rabbit_running "$1")
        [[ $r == "$size" ]] && return 0
        sleep 1
    done
    cl_log "RabbitMQ node $1 sees $r running nodes, not $size"
    return 1
}

cl_rabbit_kill()
{
    cl_log "kill -9 RabbitMQ node $1 (${CL_RIP[$1]})"
    cl_stop_group "$CL_DIR/r$1.pgid" KILL 10
}

cl_rabbit_start()
{
    local t0=$SECONDS
    cl_rabbit_launch "$1"
    cl_rabbit_wait "$1" || return 1
    cl_log "RabbitMQ node $1 back after $((SECONDS - t0)) s"
}

# ---------- Galera ----------

cl_galera_cnf()
{
    local n=$1 d=$CL_DIR/g$1 ip=${CL_GIP[$1]}
    cat >"$d/my.cnf" <<EOF
[mariadbd]
datadir = $d/data
socket = $d/sock
port = ${CL_MYSQL[$n]}
bind-address = $ip
user = root
pid-file = $d/mariadbd.pid
log-error = $d/err.log
tmpdir = $d/tmp
skip-name-resolve
innodb_flush_log_at_trx_commit = 1
max_connections = 500
binlog_format = ROW
default_storage_engine = InnoDB
innodb_autoinc_lock_mode = 2
wsrep_on = ON
wsrep_provider = $CL_GALERA_LIB
wsrep_cluster_name = idemd_cl
wsrep_cluster_address = gcomm://${CL_GIP[1]},${CL_GIP[2]},${CL_GIP[3]}
wsrep_node_address = $ip
wsrep_node_name = g$n
wsrep_provider_options = "gmcast.listen_addr=tcp://$ip:4567;ist.recv_addr=$ip:4568;gcache.size=256M${CL_GALERA_OPTS:+;$CL_GALERA_OPTS}"
${CL_GALERA_CNF:-}
wsrep_sst_receive_address = $ip:4444
wsrep_sst_method = rsync
EOF
    chmod 644 "$d/my.cnf"
}

# Start Galera node $1 ($2 = new: bootstrap a new cluster).
cl_galera_launch()
{
    local n=$1 d=$CL_DIR/g$1 boot=()
    [[ ${2:-} == new ]] && boot=(--wsrep-new-cluster)
    ip netns exec "${CL_GNS[$n]}" setsid mariadbd --defaults-file="$d/my.cnf" "${boot[@]}" \
        </dev/null >>"$d/stdout.log" 2>&1 &
    echo $! >"$CL_DIR/g$n.pgid"
    disown $! # stopped through its pgid file; no job report when a fault kills it
}

# Node $1's status variables named in $2 (a quoted, comma-separated SQL list), their values
# space-separated in name order.
cl_galera_status()
{
    cl_sql "$1" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE
              VARIABLE_NAME IN ($2) ORDER BY VARIABLE_NAME" 2>/dev/null | paste -sd' '
}

# Wait up to $2 s (180) until node $1 answers and reports itself Synced in a cluster of
# CL_GALERA_SIZE (3) nodes.
cl_galera_wait()
{
    local n=$1 deadline=$((SECONDS + ${2:-180})) st size=${CL_GALERA_SIZE:-3}
    while ((SECONDS < deadline)); do
        st=$(cl_galera_status "$n" "'wsrep_local_state_comment', 'wsrep_cluster_size'") || st=
        [[ $st == "$size Synced" ]] && return 0
        [[ -f "$CL_DIR/g$n.pgid" ]] || break
        pgrep -g "$(cat "$CL_DIR/g$n.pgid")" >/dev/null || break
        sleep 0.5
    done
    tail -n 30 "$CL_DIR/g$n/err.log" >&2
    cl_log "Galera node $n is not Synced in a cluster of $size (last: '${st:-no answer}')"
    cl_galera_report
    return 1
}

# Log each Galera node's state, and whether it was voted out as inconsistent.
cl_galera_report()
{
    local n
    for n in 1 2 3; do
        cl_log "Galera node $n: $(cl_galera_status "$n" "'wsrep_local_state_comment',
            'wsrep_cluster_size', 'wsrep_cluster_status'" || true);" \
            "$(grep -c 'Inconsistent by consensus' "$CL_DIR/g$n/err.log" || true) inconsistency votes lost"
    done
}

# The rsync SST daemon (run as root) drops to user nobody and also sets the permissions of
# the datadir itself: the joiner's datadir must belong to nobody, not only be mode 777.
# True when some Galera node is in a Primary component.
cl_galera_primary()
{
    local n
    for n in 1 2 3; do
        [[ $(cl_galera_status "$n" "'wsrep_cluster_status'") == Primary ]] && return 0
    done
    return 1
}

# No node Primary (the last Primary component lost a member before the one cut off was
# back: a kill right after a heal): make the answering node with the highest
# wsrep_last_committed Primary (pc.bootstrap), what an operator does. Prints its number.
cl_galera_bootstrap()
{
    local n seq best=-2 bn=0
    for n in 1 2 3; do
        seq=$(cl_galera_status "$n" "'wsrep_last_committed'")
        [[ $seq =~ ^-?[0-9]+$ ]] && ((seq > best)) && best=$seq bn=$n
    done
    ((bn)) || return 1
    cl_sql "$bn" "SET GLOBAL wsrep_provider_options = 'pc.bootstrap=YES'" || return 1
    echo "$bn"
}

cl_sst_writable()
{
    chown -R nobody:nogroup "$CL_DIR/g$1/data" 2>/dev/null || true
    chmod 777 "$CL_DIR/g$1/data"
}

cl_galera_kill()
{
    cl_log "kill -9 Galera node $1 (${CL_GIP[$1]})"
    cl_stop_group "$CL_DIR/g$1.pgid" KILL 10
}

cl_galera_start()
{
    local t0=$SECONDS
    cl_sst_writable "$1"
    cl_galera_launch "$1"
    cl_galera_wait "$1" || return 1
    cl_log "Galera node $1 Synced again after $((SECONDS - t0)) s"
}

# ---------- partitions ----------

# Print (to stderr) the lines of file $1 from line $2 on that match regex $3, at most $4.
cl_log_since()
{
    local out
    out=$(tail -n +"$2" "$1" 2>/dev/null | grep -E "$3" | head -n "$4" | cut -c1-200) || true
    [[ -z $out ]] || sed 's/^/#     /' <<<"$out" >&2
}

# True once both sides of a partition of node $2 (KIND $1: r or g) noticed it: the cut-off
# node (RabbitMQ: paused as a minority, or, on 4.x, whose metadata store is Khepri and which
# does not pause, its peers down by net_tick_timeout; Galera: non-Primary; Group Replication:
# the others UNREACHABLE) and the next node (RabbitMQ: connected to 1 other node; Galera:
# Primary with 2; Group Replication: ONLINE in a group of 2).
cl_part_seen()
{
    local kind=$1 n=$2 m=$(($2 % 3 + 1)) st
    if [[ $kind == r ]]; then
        [[ $(cl_rabbit_connected "$m") == 2 ]] || return 1
        grep -qiE 'minority|down: net_tick_timeout' "$CL_DIR/r$n/log/${CL_NODE[$n]}.log" 2>/dev/null
    elif [[ $CL_DB == gr ]]; then
        cl_gr_part_seen "$n"
    else
        st=$(cl_galera_status "$n" "'wsrep_cluster_status'")
        [[ $st == non-Primary ]] || return 1
        st=$(cl_galera_status "$m" "'wsrep_cluster_size', 'wsrep_cluster_status'")
        [[ $st == "2 Primary" ]]
    fi
}

# cl_part KIND N HOLD: take node N's veth (KIND r or g) down in the hub, so that it reaches
# neither its peers nor the hub's clients; keep it down for HOLD s and until cl_part_seen
# (at most 90 s), then bring it up again.
cl_part()
{
    local kind=$1 n=$2 hold=$3 t0=$SECONDS seen=0 what
    [[ $kind == r ]] && what="RabbitMQ node $n" || what=$(cl_db_name "$n")
    cl_log "partition: $what cut off (link v$kind$n down in $CL_HUB)"
    ip -n "$CL_HUB" link set "v$kind$n" down || return 1
    while :; do
        if ((!seen)) && cl_part_seen "$kind" "$n"; then
            seen=1
            cl_log "$what: both sides saw the partition after $((SECONDS - t0)) s"
        fi
        ((seen && SECONDS - t0 >= hold)) && break
        if ((SECONDS - t0 >= 90)); then
            ip -n "$CL_HUB" link set "v$kind$n" up
            cl_log "$what: the partition was not seen by both sides within 90 s"
            if [[ $kind == g ]]; then
                cl_db_report
            else
                cl_log "RabbitMQ node $((n % 3 + 1)) sees $(cl_rabbit_running $((n % 3 + 1))) running nodes," \
                    "is connected to $(cl_rabbit_connected $((n % 3 + 1)))"
            fi
            return 1
        fi
        sleep 1
    done
    ip -n "$CL_HUB" link set "v$kind$n" up || return 1
    cl_log "healed $what after $((SECONDS - t0)) s"
}

# Partition RabbitMQ node $1 for at least $2 s (CLC_PART_HOLD, 25), heal, and wait until it
# runs in the cluster of 3 again; print what the logs of both sides said.
cl_rabbit_part()
{
    local n=$1 hold=${2:-${CLC_PART_HOLD:-25}} m=$(($1 % 3 + 1)) t0 f fm lines linesm
    f=$CL_DIR/r$n/log/${CL_NODE[$n]}.log
    fm=$CL_DIR/r$m/log/${CL_NODE[$m]}.log
    lines=$(($(wc -l <"$f") + 1))
    linesm=$(($(wc -l <"$fm") + 1))
    cl_part r "$n" "$hold" || return 1
    t0=$SECONDS
    cl_rabbit_wait "$n" || return 1
    cl_rabbit_wait3 "$m" 180 || return 1
    cl_log "RabbitMQ node $n runs in the cluster of 3 again, $((SECONDS - t0)) s after the heal;" \
        "its log:"
    cl_log_since "$f" "$lines" 'minority|partition|recover|down' 6
    cl_log "node $m's log:"
    cl_log_since "$fm" "$linesm" 'minority|partition|down' 4
}

# The same for Galera node $1: non-Primary alone, Synced in the cluster of 3 again.
cl_galera_part()
{
    local n=$1 hold=${2:-${CLC_PART_HOLD:-25}} t0 f lines
    f=$CL_DIR/g$n/err.log
    lines=$(($(wc -l <"$f") + 1))
    cl_part g "$n" "$hold" || return 1
    t0=$SECONDS
    cl_galera_wait "$n" || return 1
    cl_log "Galera node $n Synced in the cluster of 3 again, $((SECONDS - t0)) s after the heal;" \
        "its log:"
    cl_log_since "$f" "$lines" 'NON_PRIM|non-Primary|suspect|inactive|IST|Synced' 8
}

# The same for Group Replication member $1: cut off (it sees the others UNREACHABLE), expelled
# by the two others after about 10 s (5 s of silence, then the expel timeout, 5 s), healed; it
# learns it was expelled (ERROR), is rejoined (cl_gr_wait) and is ONLINE in the group of 3.
cl_gr_part()
{
    local n=$1 hold=${2:-${CLC_PART_HOLD:-25}} t0 f lines
    f=$CL_DIR/g$n/err.log
    lines=$(($(wc -l <"$f") + 1))
    cl_part g "$n" "$hold" || return 1
    t0=$SECONDS
    cl_gr_wait "$n" || return 1
    cl_log "Group Replication member $n ONLINE in the group of 3 again, $((SECONDS - t0)) s" \
        "after the heal; its log:"
    cl_log_since "$f" "$lines" 'UNREACHABLE|unreachable|expelled|ERROR|view|recovery' 8
}

# ---------- the database group, whichever runs (CL_DB) ----------

cl_db_name() { [[ $CL_DB == gr ]] && echo "Group Replication member $1" || echo "Galera node $1"; }
cl_db_title() { [[ $CL_DB == gr ]] && echo "MySQL Group Replication" || echo "MariaDB Galera"; }
cl_db_alive() { [[ -f "$CL_DIR/g$1.pgid" ]] && pgrep -g "$(cat "$CL_DIR/g$1.pgid")" >/dev/null; }

cl_db_launch()
{
    if [[ $CL_DB == gr ]]; then
        cl_gr_launch "$1"
    else
        cl_sst_writable "$1"
        cl_galera_launch "$1"
    fi
}

# Wait up to $2 s until node $1 is back in its group of CL_DB_SIZE (3).
cl_db_wait() { if [[ $CL_DB == gr ]]; then cl_gr_wait "$@"; else cl_galera_wait "$@"; fi; }
cl_db_part() { if [[ $CL_DB == gr ]]; then cl_gr_part "$@"; else cl_galera_part "$@"; fi; }
cl_db_report() { if [[ $CL_DB == gr ]]; then cl_gr_report; else cl_galera_report; fi; }
# True when the group can take writes (a Primary component; an ONLINE PRIMARY with a majority).
cl_db_primary() { if [[ $CL_DB == gr ]]; then cl_gr_primary; else cl_galera_primary; fi; }
cl_db_bootstrap() { if [[ $CL_DB == gr ]]; then cl_gr_bootstrap; else cl_galera_bootstrap; fi; }

# Node $1 is in its group of $2 now: one look, no wait.
cl_db_ok()
{
    if [[ $CL_DB == gr ]]; then
        cl_gr_agreed "$1" "$(cl_gr_state "$1")" "$2"
    else
        [[ $(cl_galera_status "$1" "'wsrep_local_state_comment', 'wsrep_cluster_size'") == "$2 Synced" ]]
    fi
}

# ---------- one-way drops (asymmetric partitions) ----------

cl_asym_tool() { command -v nft >/dev/null; }

# cl_db_asym N [S]: MySQL bug #118704 ("iptables -A OUTPUT -d mysql3 -j DROP" on mysql1): what
# node N sends to node M (the next one) is dropped, in N's namespace (nft, output hook); N and
# the third node, and M and the third node, still talk; every client still reaches N. Held S s
# (CLC_ASYM_HOLD, 40), the members' views logged as they change; then the rule goes and the
# run waits until all three are back in the group of 3 (an expelled member rejoined). Says
# which outcome it saw: N expelled, M expelled, or neither (N and M UNREACHABLE to each other
# and nobody expelled, the bug's first outcome). 0, or 1 (no nft: said, nothing done).
cl_db_asym()
{
    local n=$1 hold=${2:-${CLC_ASYM_HOLD:-40}} m=$(($1 % 3 + 1)) t0=$SECONDS v last="" k seen=""
    if ! cl_asym_tool; then
        cl_log "one-way drops need nft (package nftables), not installed here: asymmetric partition skipped"
        return 1
    fi
    cl_log "asymmetric partition: $(cl_db_name "$n") drops what it sends to ${CL_GIP[$m]} ($(cl_db_name "$m"))"
    printf 'table inet idcasym {\n  chain out { type filter hook output priority 0; ip daddr %s drop; }\n}\n' \
        "${CL_GIP[$m]}" | ip netns exec "${CL_GNS[$n]}" nft -f - || return 1
    while ((SECONDS - t0 < hold)); do
        if [[ $CL_DB == gr ]]; then v=$(cl_gr_views); else v=$(cl_galera_views); fi
        [[ $v != "$last" ]] && cl_log "after $((SECONDS - t0)) s: $v"
        last=$v
        sleep 2
    done
    seen=$(cl_asym_outcome "$n" "$m" "$last")
    cl_log "after $hold s: $seen"
    ip netns exec "${CL_GNS[$n]}" nft delete table inet idcasym || return 1
    cl_log "one-way drop removed"
    t0=$SECONDS
    local healed=1 wait=${CLC_ASYM_WAIT:-90}
    cl_asym_wait3 "$n" "$m" "$wait" || healed=0
    # The bug's lasting outcome (seen on a loaded machine): with the drop gone, a view keeps a
    # member UNREACHABLE and nobody is expelled; the group waits for a member that does not
    # come back by itself. What an operator does: restart that member (kill -9, start, START
    # GROUP_REPLICATION), one at a time (two restarted at once would leave the third without
    # a majority); said, and counted in asym_restarts. At most two such restarts.
    local tries=0 victim
    while ((!healed && tries < 2)); do
        tries=$((tries + 1))
        victim=$(cl_asym_stuck "$n" "$m")
        [[ -n $victim ]] || break
        cl_log "one-way drop removed $((SECONDS - t0)) s ago and the group not whole:" \
            "$(cl_db_name "$victim") restarted (kill -9, start, rejoin), as an operator would"
        echo "$(date +%H:%M:%S) member $victim" >>"$CL_DIR/asym_restarts"
        cl_stop_group "$CL_DIR/g$victim.pgid" KILL 10
        cl_db_launch "$victim"
        healed=1
        cl_asym_wait3 "$n" "$m" "$wait" || healed=0
    done
    ((healed)) || cl_asym_wait3 "$n" "$m" || return 1
    cl_log "all three back in the group of 3, $((SECONDS - t0)) s after the drop was removed ($seen)"
}

# Wait for all three (up to $3 s each, cl_db_wait's default without): a member not ONLINE
# (expelled: ERROR) first, as waiting for it rejoins it, and the others wait for it.
cl_asym_wait3()
{
    local n=$1 m=$2 k first=() then=()
    for k in "$n" "$m" $((6 - n - m)); do
        if [[ $CL_DB == gr && $(cl_gr_state "$k") != ONLINE* ]]; then first+=("$k"); else then+=("$k"); fi
    done
    for k in "${first[@]}" "${then[@]}"; do cl_db_wait "$k" ${3:+"$3"} || return 1; done
}

# After a one-way drop from member $1 to $2 was removed and the group did not heal: the member
# to restart. On Group Replication the one the most ONLINE members see UNREACHABLE ($1 first,
# then $2, then the third, on a tie), or none (a member expelled, in ERROR, is rejoined by
# cl_gr_wait; restarting another would cost the group its majority); on Galera the first node
# not in its cluster of 3.
cl_asym_stuck()
{
    local n=$1 m=$2 k u best="" most=0 c
    declare -A seen=()
    if [[ $CL_DB == gr ]]; then
        for k in 1 2 3; do
            for u in $(cl_gr_unreachable_of "$k"); do seen[$u]=$((${seen[$u]:-0} + 1)); done
        done
        for k in "$n" "$m" $((6 - n - m)); do
            c=${seen[$k]:-0}
            ((c > most)) && most=$c best=$k
        done
    else
        for k in "$n" "$m" $((6 - n - m)); do cl_db_ok "$k" 3 || { best=$k; break; }; done
    fi
    echo "$best"
}

# What the views $3 of an asymmetric partition of N ($1) towards M ($2) say.
cl_asym_outcome()
{
    local n=$1 m=$2 v=$3 k
    if [[ $CL_DB != gr ]]; then
        echo "views: $v"
        return 0
    fi
    # A member alone, or in ERROR, was expelled: the other two see 2 ONLINE, 0 UNREACHABLE.
    for k in "$n" "$m"; do
        if grep -qE "$k: ERROR" <<<"$v" || grep -qE "$((6 - n - m)): ONLINE 2 [A-Z]+ 0" <<<"$v" &&
            ! grep -qE "$k: ONLINE 2 [A-Z]+ 0" <<<"$v"; then
            echo "member $k expelled (views: $v)"
            return 0
        fi
    done
    if grep -qE '[0-9]: ONLINE 3 [A-Z]+ [1-9]' <<<"$v"; then
        echo "nobody expelled: members $n and $m see each other UNREACHABLE in a group of 3 (MySQL bug #118704; views: $v)"
    else
        echo "views: $v"
    fi
}

cl_galera_views()
{
    local n out=()
    for n in 1 2 3; do
        out+=("$n: $(cl_galera_status "$n" "'wsrep_local_state_comment', 'wsrep_cluster_size'" || true)")
    done
    local IFS='|'
    echo "${out[*]}"
}

# ---------- both ----------

# Galera: node 1's datadir, node 1 bootstraps a new cluster, 2 and 3 started (they join by SST).
cl_galera_boot()
{
    local n user=() deadline
    for n in 1 2 3; do
        mkdir -p "$CL_DIR/g$n/data" "$CL_DIR/g$n/tmp"
        cl_galera_cnf "$n"
    done
    [[ $(id -u) == 0 ]] && user=(--user=root)
    if ! mariadb-install-db --no-defaults --datadir="$CL_DIR/g1/data" \
        --auth-root-authentication-method=normal --skip-test-db "${user[@]}" \
        >"$CL_DIR/g1/install.log" 2>&1; then
        tail -n 20 "$CL_DIR/g1/install.log" >&2
        return 1
    fi
    cl_sst_writable 2
    cl_sst_writable 3
    cl_galera_launch 1 new
    deadline=$((SECONDS + 60))
    until cl_sql 1 "SELECT 1" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || { tail -n 20 "$CL_DIR/g1/err.log" >&2; return 1; }
        sleep 0.3
    done
    cl_galera_launch 2
    cl_galera_launch 3
}

cl_start()
{
    local t0=$SECONDS n
    [[ -n ${CL_HUB:-} ]] || cl_vars "$CL_ID"
    [[ -n ${CL_DIR:-} ]] || CL_DIR=$(mktemp -d /tmp/idemd-cl.XXXXXX) || return 1
    chmod 755 "$CL_DIR"
    export CL_DIR HOME=$CL_DIR/home
    mkdir -p "$HOME"
    # One Erlang cookie for the three nodes and rabbitmqctl, written before any starts.
    od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$HOME/.erlang.cookie"
    chmod 400 "$HOME/.erlang.cookie"
    # Every namespace has an epmd of its own on the standard port.
    export ERL_EPMD_PORT=4369
    # rabbitmqctl ticks like the nodes (net_ticktime 10).
    export RABBITMQ_CTL_ERL_ARGS="-kernel net_ticktime 10"
    cl_log "dir $CL_DIR; hub $CL_HUB ($CL_HUB_IP); RabbitMQ ${CL_RIP[*]}; $(cl_db_title) ${CL_GIP[*]}"
    if [[ $CL_DB == gr ]]; then
        cl_gr_prepare || return 1
    fi
    for n in 1 2 3; do cl_rabbit_launch "$n"; done
    if [[ $CL_DB == gr ]]; then
        for n in 1 2 3; do cl_gr_launch "$n"; done
    else
        cl_galera_boot || return 1
    fi
    for n in 1 2 3; do cl_rabbit_wait "$n" || return 1; done
    for n in 2 3; do
        # (start_app logs harmless "tracked connection table" errors while the nodes meet)
        if ! { cl_ctl "$n" stop_app && cl_ctl "$n" join_cluster "${CL_NODE[1]}" &&
            cl_ctl "$n" start_app; } >>"$CL_DIR/join.log" 2>&1; then
            cat "$CL_DIR/join.log" >&2
            cl_log "RabbitMQ node $n did not join ${CL_NODE[1]}"
            return 1
        fi
    done
    local running
    running=$(cl_rabbit_running 1)
    [[ $running == 3 ]] || {
        cl_log "RabbitMQ cluster has $running running nodes, not 3"
        return 1
    }
    if [[ $CL_DB == gr ]]; then
        cl_gr_form || return 1
    else
        for n in 1 2 3; do cl_galera_wait "$n" || return 1; done
    fi
    # The clients (idemd, the publishers) connect from the hub's address (on Group
    # Replication, through member 1, the primary: it bootstrapped the group).
    cl_sql 1 "CREATE USER IF NOT EXISTS 'idemd'@'$CL_NET.%' IDENTIFIED BY 'idemd';
              GRANT ALL ON *.* TO 'idemd'@'$CL_NET.%'" || return 1
    if [[ $CL_DB == gr ]]; then
        cl_log "up in $((SECONDS - t0)) s: RabbitMQ 3 nodes running, Group Replication 3 members ONLINE"
    else
        cl_log "up in $((SECONDS - t0)) s: RabbitMQ 3 nodes running, Galera 3 nodes Synced"
    fi
}

cl_stop()
{
    local n pids=()
    local -
    set +e +o pipefail
    [[ -n "${CL_DIR:-}" && -d "$CL_DIR" ]] || return 0
    for n in 1 2 3; do
        # A node still cut off gets its link back, to stop like the others.
        ip -n "$CL_HUB" link set "vr$n" up 2>/dev/null
        ip -n "$CL_HUB" link set "vg$n" up 2>/dev/null
        cl_stop_group "$CL_DIR/r$n.pgid" TERM 20 &
        pids+=($!)
        cl_stop_group "$CL_DIR/g$n.pgid" TERM 30 &
        pids+=($!)
    done
    wait "${pids[@]}"
    # epmd (it leaves the servers' process groups) and whatever else is left in the nodes'
    # namespaces; the hub's processes are the caller's.
    for n in "${CL_RNS[@]}" "${CL_GNS[@]}"; do
        # shellcheck disable=SC2046 # pids
        kill -KILL $(ip netns pids "$n" 2>/dev/null) 2>/dev/null
    done
    if [[ "${H_KEEP:-0}" == 1 ]]; then
        cl_log "kept $CL_DIR"
    else
        rm -rf "$CL_DIR"
    fi
}
