# shellcheck shell=bash
# cluster.sh: a private 3-node RabbitMQ cluster and a 3-node MariaDB Galera cluster on loopback, with kill, restart and rejoin of single nodes.
#
# Source after tests/harness.sh. Everything lives under $CL_DIR (a new temp dir); every
# server runs in its own process group, recorded in $CL_DIR/<node>.pgid, so cl_stop (and
# the caller's EXIT trap) can stop all of them. Nodes are numbered 1..3.
#
#   cl_start                 start both clusters and wait until they are formed: 3 running
#                            RabbitMQ nodes (cluster_partition_handling = pause_minority), 3
#                            Synced Galera nodes; creates the TCP account idemd/idemd
#   cl_stop                  stop everything (TERM, then KILL), remove $CL_DIR unless H_KEEP=1
#   cl_rabbit_kill N         kill -9 RabbitMQ node N (its whole process group)
#   cl_rabbit_start N        start node N again (same name, ports and data) and wait for it
#   cl_galera_kill N         kill -9 Galera node N
#   cl_galera_start N        start node N again; it rejoins (IST, or rsync SST) and is Synced
#   cl_sql N QUERY [DB]      run QUERY as root on node N, rows tab-separated
#   cl_sql_any QUERY [DB]    the same on the first node that answers
#   cl_ctl N ARGS...         rabbitmqctl against node N
#   cl_amqp_port N / cl_mysql_port N   the node's client port
# Variables after cl_start: CL_DIR, CL_AMQP[1..3], CL_MYSQL[1..3], CL_NODE[1..3] (Erlang
# node names), CL_EPMD (ERL_EPMD_PORT, exported), HOME (the shared Erlang cookie).
#
# Galera on loopback needs, per node: its own datadir, socket, port, gmcast.listen_addr,
# ist.recv_addr and SST port, and a datadir the rsync SST daemon can write (cl_sst_writable).

CL_GALERA_LIB=${CL_GALERA_LIB:-/usr/lib/galera/libgalera_smm.so}
declare -a CL_AMQP CL_DIST CL_NODE CL_MYSQL CL_GCOMM CL_IST CL_SST

cl_log() { echo "# $(date +%H:%M:%S) cluster: $*" >&2; }

cl_amqp_port() { echo "${CL_AMQP[$1]}"; }
cl_mysql_port() { echo "${CL_MYSQL[$1]}"; }

cl_ctl() { local n=$1; shift; timeout 60 "$H_RABBIT_BIN/rabbitmqctl" -q -n "${CL_NODE[$n]}" "$@"; }

cl_sql()
{
    mariadb --no-defaults -S "$CL_DIR/g$1/sock" -uroot -N -B -e "$2" ${3:+"$3"}
}

cl_sql_any()
{
    local n
    for n in 1 2 3; do
        cl_sql "$n" "$@" 2>/dev/null && return 0
    done
    return 1
}

# cl_port VAR LO SPAN [DIST]: set VAR to a free port p in [LO, LO+SPAN) not handed out before
# (with DIST=1 also p + 10000 free: rabbitmqctl takes DIST + 10000).
cl_port()
{
    local p i
    for ((i = 0; i < 100; i++)); do
        p=$(h_free_port "$2" "$3") || return 1
        [[ " ${CL_TAKEN:-} " == *" $p "* ]] && continue
        ((${4:-0})) && h_port_used $((p + 10000)) && continue
        CL_TAKEN="${CL_TAKEN:-} $p"
        printf -v "$1" '%s' "$p"
        return 0
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
    cat >"$d/rabbitmq.conf" <<EOF
loopback_users = none
disk_free_limit.absolute = 10MB
log.console = false
log.file.level = info
cluster_partition_handling = pause_minority
EOF
    (
        export RABBITMQ_NODENAME=${CL_NODE[$n]}
        export RABBITMQ_NODE_IP_ADDRESS=127.0.0.1
        export RABBITMQ_NODE_PORT=${CL_AMQP[$n]}
        export RABBITMQ_DIST_PORT=${CL_DIST[$n]}
        export RABBITMQ_MNESIA_BASE=$d/mnesia
        export RABBITMQ_LOG_BASE=$d/log
        export RABBITMQ_ENABLED_PLUGINS_FILE=$d/enabled_plugins
        export RABBITMQ_CONFIG_FILE=$d/rabbitmq.conf
        export RABBITMQ_CONF_ENV_FILE=$d/rabbitmq-env.conf
        export RABBITMQ_ADVANCED_CONFIG_FILE=$d/advanced.config
        export RABBITMQ_PID_FILE=$d/rabbit.pid
        export RABBITMQ_PLUGINS_EXPAND_DIR=$d/plugins-expand
        setsid "$H_RABBIT_BIN/rabbitmq-server" </dev/null >>"$d/stdout.log" 2>&1 &
        echo $! >"$CL_DIR/r$n.pgid"
    )
}

cl_rabbit_wait()
{
    local n=$1
    if ! h_wait_port "${CL_AMQP[$n]}" 120 ""; then
        tail -n 20 "$CL_DIR/r$n/stdout.log" >&2
        cl_log "RabbitMQ node $n did not open port ${CL_AMQP[$n]}"
        return 1
    fi
    cl_ctl "$n" await_startup >/dev/null || {
        cl_log "RabbitMQ node $n: await_startup failed"
        return 1
    }
}

cl_rabbit_kill()
{
    cl_log "kill -9 RabbitMQ node $1 (port ${CL_AMQP[$1]})"
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
    local n=$1 d=$CL_DIR/g$1 peers
    peers="127.0.0.1:${CL_GCOMM[1]},127.0.0.1:${CL_GCOMM[2]},127.0.0.1:${CL_GCOMM[3]}"
    cat >"$d/my.cnf" <<EOF
[mariadbd]
datadir = $d/data
socket = $d/sock
port = ${CL_MYSQL[$n]}
bind-address = 127.0.0.1
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
wsrep_cluster_address = gcomm://$peers
wsrep_node_address = 127.0.0.1
wsrep_node_name = g$n
wsrep_provider_options = "gmcast.listen_addr=tcp://127.0.0.1:${CL_GCOMM[$n]};ist.recv_addr=127.0.0.1:${CL_IST[$n]};gcache.size=256M"
wsrep_sst_receive_address = 127.0.0.1:${CL_SST[$n]}
wsrep_sst_method = rsync
EOF
    chmod 644 "$d/my.cnf"
}

# Start Galera node $1 ($2 = new: bootstrap a new cluster).
cl_galera_launch()
{
    local n=$1 d=$CL_DIR/g$1 boot=()
    [[ ${2:-} == new ]] && boot=(--wsrep-new-cluster)
    setsid mariadbd --defaults-file="$d/my.cnf" "${boot[@]}" </dev/null >>"$d/stdout.log" 2>&1 &
    echo $! >"$CL_DIR/g$n.pgid"
    disown $! # stopped through its pgid file; no job report when a fault kills it
}

# Wait until node $1 answers and reports itself Synced in a cluster of 3.
cl_galera_wait()
{
    local n=$1 deadline=$((SECONDS + ${2:-180})) st
    while ((SECONDS < deadline)); do
        st=$(cl_sql "$n" "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE
              VARIABLE_NAME IN ('wsrep_local_state_comment', 'wsrep_cluster_size')
              ORDER BY VARIABLE_NAME" 2>/dev/null | paste -sd' ') || st=
        [[ $st == "3 Synced" ]] && return 0
        [[ -f "$CL_DIR/g$n.pgid" ]] || break
        pgrep -g "$(cat "$CL_DIR/g$n.pgid")" >/dev/null || break
        sleep 0.5
    done
    tail -n 30 "$CL_DIR/g$n/err.log" >&2
    cl_log "Galera node $n is not Synced in a cluster of 3 (last: '${st:-no answer}')"
    return 1
}

# The rsync SST daemon (run as root) drops to user nobody and also sets the permissions of
# the datadir itself: the joiner's datadir must belong to nobody, not only be mode 777.
cl_sst_writable()
{
    chown -R nobody:nogroup "$CL_DIR/g$1/data" 2>/dev/null || true
    chmod 777 "$CL_DIR/g$1/data"
}

cl_galera_kill()
{
    cl_log "kill -9 Galera node $1 (port ${CL_MYSQL[$1]})"
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

# ---------- both ----------

cl_start()
{
    local t0=$SECONDS n user=()
    CL_DIR=$(mktemp -d /tmp/idemd-cl.XXXXXX) || return 1
    chmod 755 "$CL_DIR"
    export CL_DIR HOME=$CL_DIR/home
    mkdir -p "$HOME"
    # One Erlang cookie for the three nodes and rabbitmqctl, written before any starts.
    od -An -N16 -tx1 /dev/urandom | tr -d ' \n' >"$HOME/.erlang.cookie"
    chmod 400 "$HOME/.erlang.cookie"
    cl_port CL_EPMD 50000 4000 || return 1
    export ERL_EPMD_PORT=$CL_EPMD
    for n in 1 2 3; do
        cl_port "CL_AMQP[$n]" 20000 9000 || return 1
        cl_port "CL_DIST[$n]" 30000 9000 1 || return 1
        CL_NODE[n]="cl$$n$n@localhost"
        cl_port "CL_MYSQL[$n]" 54000 4000 || return 1
        cl_port "CL_GCOMM[$n]" 45000 3000 || return 1
        cl_port "CL_IST[$n]" 45000 3000 || return 1
        cl_port "CL_SST[$n]" 45000 3000 || return 1
    done
    cl_log "dir $CL_DIR; amqp ${CL_AMQP[*]}; mysql ${CL_MYSQL[*]}; gcomm ${CL_GCOMM[*]}; epmd $CL_EPMD"
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
    for n in 1 2 3; do cl_rabbit_launch "$n"; done
    cl_galera_launch 1 new
    local deadline=$((SECONDS + 60))
    until cl_sql 1 "SELECT 1" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || { tail -n 20 "$CL_DIR/g1/err.log" >&2; return 1; }
        sleep 0.3
    done
    cl_galera_launch 2
    cl_galera_launch 3
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
    running=$(cl_ctl 1 eval 'length(rabbit_nodes:all_running()).' 2>/dev/null) || running='?'
    [[ $running == 3 ]] || {
        cl_log "RabbitMQ cluster has $running running nodes, not 3"
        return 1
    }
    for n in 1 2 3; do cl_galera_wait "$n" || return 1; done
    cl_sql 1 "CREATE USER IF NOT EXISTS 'idemd'@'127.0.0.1' IDENTIFIED BY 'idemd';
              GRANT ALL ON *.* TO 'idemd'@'127.0.0.1'" || return 1
    cl_log "up in $((SECONDS - t0)) s: RabbitMQ 3 nodes running, Galera 3 nodes Synced"
}

cl_stop()
{
    local n pid pids=()
    local -
    set +e +o pipefail
    [[ -n "${CL_DIR:-}" && -d "$CL_DIR" ]] || return 0
    for n in 1 2 3; do
        cl_stop_group "$CL_DIR/r$n.pgid" TERM 20 &
        pids+=($!)
        cl_stop_group "$CL_DIR/g$n.pgid" TERM 30 &
        pids+=($!)
    done
    wait "${pids[@]}"
    if [[ -n "${CL_EPMD:-}" ]]; then
        for pid in $(pgrep -x epmd); do
            if { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -x "ERL_EPMD_PORT=$CL_EPMD" >/dev/null; then
                kill -KILL "$pid" 2>/dev/null
            fi
        done
    fi
    if [[ "${H_KEEP:-0}" == 1 ]]; then
        cl_log "kept $CL_DIR"
    else
        rm -rf "$CL_DIR"
    fi
}
