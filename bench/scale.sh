# scale.sh: `BENCH_ONLY=scale make bench`: the dedup table at scale, msg_id_record pre-filled with tens of millions of rows against an empty one, with retention deleting (sourced by bench/run).
#
# The table is filled once for two consumers, half the rows each: bench.scale.v4 with random
# UUIDv4 ids, bench.scale.v7 with time-ordered UUIDv7 ids. Their create_time spreads over the
# last 40 days, so with record_retention_days = 30 about a quarter of the rows are old enough
# for retention, which deletes them while the runs go on. Each run is the two-statement
# per-message handler (bench_conf's RUN_LOG=1) on one of the two consumers, its workload the
# usual UNIQUE orders + 5% duplicates with fresh ids of that consumer's kind; beside it, the
# same run on a database whose msg_id_record is empty, and on the filled one with retention off
# (what the table's size costs apart from what deleting costs). Runs repeat BENCH_REPEAT times,
# interleaved, at each InnoDB buffer pool size of BENCH_SCALE_POOLS (set at run time with SET
# GLOBAL innodb_buffer_pool_size, which MariaDB 10.6+ and MySQL 8+ resize online).
#   BENCH_SCALE_ROWS [20000000]   rows of the pre-filled table (both consumers)
#   BENCH_SCALE_POOLS [128M 1G]   buffer pool sizes, each run at all of them
#   BENCH_SCALE_CHUNK [500000]    rows per INSERT of the fill
# The fill loads rows without the secondary indexes and adds them after (a sorted index build),
# as an operator's restore would: inserting 20 M random keys one by one into a 128 MiB buffer
# pool takes hours, and it is the runs, not the fill, that are measured. The build fills the
# index pages to BENCH_SCALE_FILL percent: a table that grew by inserts of random keys has its
# leaves about ln 2 = 69% full (each split leaves two half-full pages), while a sorted build
# packs them to 15/16 at the server's default (innodb_fill_factor = 100), so that nearly every
# first insert into a leaf splits it: a cost the table in service does not pay.
#   BENCH_SCALE_FILL [69]         innodb_fill_factor of the index build (10-100; 100: packed)

SCALE_ROWS=${BENCH_SCALE_ROWS:-20000000}
SCALE_POOLS=${BENCH_SCALE_POOLS:-128M 1G}
SCALE_CHUNK=${BENCH_SCALE_CHUNK:-500000}
SCALE_FILL=${BENCH_SCALE_FILL:-69}
SCALE_DAYS=30 # record_retention_days of the runs
[[ "$SCALE_FILL" =~ ^[0-9]+$ ]] && ((SCALE_FILL >= 10 && SCALE_FILL <= 100)) ||
    b_die "BENCH_SCALE_FILL: '$SCALE_FILL' is not a percentage from 10 to 100"
[[ "$SCALE_ROWS" =~ ^[1-9][0-9]*$ ]] || b_die "BENCH_SCALE_ROWS: '$SCALE_ROWS' is not a row count"
[[ "$SCALE_CHUNK" =~ ^[1-9][0-9]*000$ ]] || b_die "BENCH_SCALE_CHUNK: '$SCALE_CHUNK' is not a multiple of 1000"

# scale_bytes SIZE: SIZE (a number with an optional K, M or G) in bytes.
scale_bytes()
{
    awk -v s="$1" 'BEGIN { m = 1; u = toupper(substr(s, length(s)))
        if (u == "K") m = 1024; else if (u == "M") m = 1048576; else if (u == "G") m = 1073741824
        if (m > 1) s = substr(s, 1, length(s) - 1)
        printf "%.0f", s * m }'
}

# scale_gen N: a FROM clause of the numbers 1..N (N a multiple of 1000) as column n, built from
# two JSON_TABLE sequences (MariaDB and MySQL both have JSON_TABLE; no seq_1_to_N on MySQL).
scale_gen()
{
    local a=$(($1 / 1000))
    echo "(SELECT (x.i - 1) * 1000 + y.i AS n FROM
        JSON_TABLE(CONCAT('[', REPEAT('0,', $a - 1), '0]'), '\$[*]' COLUMNS (i FOR ORDINALITY)) AS x,
        JSON_TABLE(CONCAT('[', REPEAT('0,', 999), '0]'), '\$[*]' COLUMNS (i FOR ORDINALITY)) AS y) AS g"
}

# scale_fill_consumer DB CONSUMER KIND ROWS: ROWS records of CONSUMER in DB's msg_id_record, ids
# of KIND (v4: random; v7: a 48-bit millisecond time from 40 days ago to 1 day ago, then random
# bits), create_time the same time, in chunks of SCALE_CHUNK rows.
scale_fill_consumer()
{
    local db=$1 c=$2 kind=$3 rows=$4 done=0 n step now_ms id
    now_ms=$(h_sql "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS UNSIGNED)" "$db") || b_die "clock of $db"
    step=$((39 * 86400000 / rows))
    # The time of row n, in ms since the epoch; h is SHA-256 (hex) of the consumer and n (MySQL 9 has no MD5).
    local ts="($now_ms - 40 * 86400000 + t.n * $step)"
    local var="SUBSTR('89ab', 1 + CONV(SUBSTR(t.h, 17, 1), 16, 10) % 4, 1)"
    if [[ "$kind" == v4 ]]; then
        id="CONCAT(SUBSTR(t.h, 1, 8), '-', SUBSTR(t.h, 9, 4), '-4', SUBSTR(t.h, 14, 3), '-', $var, SUBSTR(t.h, 18, 3), '-', SUBSTR(t.h, 21, 12))"
    else
        local x="LPAD(LOWER(HEX($ts)), 12, '0')"
        id="CONCAT(SUBSTR($x, 1, 8), '-', SUBSTR($x, 9, 4), '-7', SUBSTR(t.h, 14, 3), '-', $var, SUBSTR(t.h, 18, 3), '-', SUBSTR(t.h, 21, 12))"
    fi
    while ((done < rows)); do
        n=$((rows - done < SCALE_CHUNK ? rows - done : SCALE_CHUNK))
        n=$(((n + 999) / 1000 * 1000))
        h_sql "INSERT INTO msg_id_record (consumer, msg_id, create_time)
            SELECT '$c', $id, FROM_UNIXTIME($ts / 1000)
            FROM (SELECT g.n + $done AS n, SHA2(CONCAT('$c-', g.n + $done), 256) AS h FROM $(scale_gen "$n")) AS t" "$db" ||
            b_die "filling $db.msg_id_record ($c, rows $done..)"
        done=$((done + n))
    done
}

# scale_db DB: DB with idemd's schema, orders 1..UNIQUE and the handler's log table.
scale_db()
{
    bench_db "$1"
    h_mysql "$1" <"$ROOT/bench/order_pay_log.sql" || b_die "log table in $1"
}

# scale_fill DB: DB with idemd's schema, orders 1..UNIQUE, and SCALE_ROWS records, half for
# each consumer; the secondary indexes of msg_id_record dropped for the load, then rebuilt.
# Sets SCALE_FILL_S (seconds the fill took).
scale_fill()
{
    local db=$1 t0=$SECONDS half=$((SCALE_ROWS / 2))
    scale_db "$db"
    h_sql "ALTER TABLE msg_id_record DROP INDEX uk_consumer_msg_id, DROP INDEX idx_create_time" "$db" ||
        b_die "dropping the indexes of $db.msg_id_record"
    scale_fill_consumer "$db" bench.scale.v4 v4 "$half"
    scale_fill_consumer "$db" bench.scale.v7 v7 "$((SCALE_ROWS - half))"
    b_log "scale: $SCALE_ROWS rows loaded in $((SECONDS - t0)) s; building the indexes ($SCALE_FILL% full)"
    local ff
    ff=$(h_sql "SELECT @@GLOBAL.innodb_fill_factor") || b_die "reading innodb_fill_factor"
    h_sql "SET GLOBAL innodb_fill_factor = $SCALE_FILL" || b_die "setting innodb_fill_factor = $SCALE_FILL"
    h_sql "ALTER TABLE msg_id_record ADD UNIQUE KEY uk_consumer_msg_id (consumer, msg_id),
        ADD KEY idx_create_time (create_time)" "$db" || b_die "building the indexes of $db.msg_id_record"
    h_sql "SET GLOBAL innodb_fill_factor = $ff" || b_die "restoring innodb_fill_factor = $ff"
    h_sql "ANALYZE TABLE msg_id_record" "$db" >/dev/null
    SCALE_FILL_S=$((SECONDS - t0))
    b_log "scale: $db filled in $SCALE_FILL_S s"
}

# scale_workload KIND SEED: the bench's workload (gen_workload: UNIQUE orders, 5% duplicates)
# with each pay-NNNNNN id replaced by a fresh id of KIND (v4 or v7: now, one ms per 8 orders),
# the same id for the same order; SEED makes each run's ids its own.
scale_workload()
{
    local now_ms
    now_ms=$(($(date +%s%3N)))
    gen_workload "$UNIQUE" pay | awk -v kind="$1" -v seed="$2" -v now="$now_ms" -v U="$UNIQUE" '
function hex4() { return sprintf("%04x", int(rand() * 65536)) }
BEGIN {
    srand(seed)
    for (i = 1; i <= U; i++) {
        r = hex4() hex4() hex4() hex4() hex4() hex4() hex4() hex4()
        v = substr("89ab", 1 + int(rand() * 4), 1)
        if (kind == "v7") {
            t = now + int(i / 8)
            x = sprintf("%06x%06x", int(t / 16777216), t % 16777216)
            id[i] = substr(x, 1, 8) "-" substr(x, 9, 4) "-7" substr(r, 1, 3) "-" v substr(r, 4, 3) "-" substr(r, 7, 12)
        } else
            id[i] = substr(r, 1, 8) "-" substr(r, 9, 4) "-4" substr(r, 13, 3) "-" v substr(r, 16, 3) "-" substr(r, 19, 12)
    }
    FS = OFS = "\t"
}
{ split($1, p, "-"); $1 = id[p[2] + 0]; print }'
}

# scale_run DB KIND POOL N [DAYS]: run N of the two-statement handler on consumer
# bench.scale.KIND against DB (its msg_id_record as it is: empty or filled), with
# record_retention_days = DAYS (SCALE_DAYS; 0: no retention, label suffix -noret), label
# scale-POOL-KIND-DB.
scale_run()
{
    local db=$1 kind=$2 pool=$3 n=$4 days=${5:-$SCALE_DAYS} q=bench.scale.$2 label conf log t0 secs t_sql got rc reads flushed splits
    label="scale-$pool-$kind-${db#bench_scale_}"
    ((days == 0)) && label+=-noret
    conf=$BTMP/$label.conf log=$H_DIR/idemd-$label-$n.log
    h_sql "UPDATE orders SET status = 1, pay_count = 0, pay_time = NULL; TRUNCATE order_pay_log" "$db" ||
        b_die "resetting $db"
    [[ "$db" == bench_scale_empty ]] && h_sql "TRUNCATE msg_id_record" "$db"
    scale_workload "$kind" "$n$RANDOM" >"$BTMP/scale.tsv"
    bench_fill "$q" "$BTMP/scale.tsv"
    RUN_LOG=1
    bench_conf "$db" "$q" "batch_handler = false" "record_retention_days = $days" >"$conf"
    RUN_LOG=0
    t_sql=$(h_sql "SELECT NOW(3)" "$db")
    reads=$(scale_pool_reads) flushed=$(scale_pool_flushed) splits=$(scale_splits)
    bench_watch "$db"
    cpu_snap
    t0=$EPOCHREALTIME
    bench_daemon_start "$conf" "$log"
    if ! bench_watch_end; then
        tail -n 20 "$log" >&2
        bench_daemon_stop
        FAILS+=("$label run $n: effects did not reach $UNIQUE")
        return 1
    fi
    secs=$(bench_secs "$t0" "$W_END")
    SCALE_READS[$label]+=" $(bench_div "$(($(scale_pool_reads) - reads))" "$TOTAL" "%.2f")"
    SCALE_FLUSHED[$label]+=" $(bench_div "$(($(scale_pool_flushed) - flushed))" "$TOTAL" "%.2f")"
    [[ -n "$splits" ]] && SCALE_SPLITS[$label]+=" $(bench_div "$(($(scale_splits) - splits))" "$TOTAL" "%.3f")"
    h_wait_depth "$q" 0 30 >/dev/null 2>&1 || FAILS+=("$label run $n: queue not drained")
    bench_daemon_stop
    rc=$?
    ((rc == 0)) || FAILS+=("$label run $n: exit status $rc at stop")
    bench_check "$db"
    got=$(h_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q' AND create_time >= '$t_sql'" "$db")
    [[ "$C_BAD" == 0 && "$got" == "$UNIQUE" ]] ||
        FAILS+=("$label run $n: $C_BAD orders with pay_count != 1, $got new record rows (expected $UNIQUE)")
    SCALE_DELETED[$label]+=" $(grep -oE 'retention: deleted [0-9]+ rows' "$log" | awk '{ s += $3 } END { print s + 0 }')"
    R_RATE[$label]+=" $(bench_div "$TOTAL" "$secs")"
    b_log "$label run $n: $TOTAL messages in $secs s = $(bench_div "$TOTAL" "$secs") msg/s"
    h_mq delete "$q" >/dev/null 2>&1
}

# scale_sizes DB: "rows, data MiB, index MiB, bytes per row" of DB's msg_id_record.
scale_sizes()
{
    h_sql "ANALYZE TABLE msg_id_record" "$1" >/dev/null
    h_sql "SELECT (SELECT COUNT(*) FROM msg_id_record), ROUND(data_length / 1048576), ROUND(index_length / 1048576),
        ROUND((data_length + index_length) / GREATEST(1, (SELECT COUNT(*) FROM msg_id_record)))
        FROM information_schema.tables WHERE table_schema = '$1' AND table_name = 'msg_id_record'" "$1"
}

# scale_pool_reads: the server's buffer pool misses so far (pages read from disk).
scale_pool_reads() { h_sql "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_reads'" | cut -f2; }
# scale_pool_flushed: pages the server has written from its buffer pool so far (what a random
# key's inserts cost once the reads are gone: each dirties a leaf of its own).
scale_pool_flushed() { h_sql "SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_flushed'" | cut -f2; }
# scale_splits: index page splits so far (INNODB_METRICS index_page_splits, turned on before
# the runs; both servers have it), or nothing.
scale_splits() { h_sql "SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'index_page_splits'" 2>/dev/null; }

# scale_pool SIZE: resize the buffer pool online to SIZE and wait until the server says it is
# done, then read DB's dedup index once through (a server that has run a while has in its pool
# what fits of it; a cold pool would measure the warm-up instead).
scale_pool()
{
    local want i
    want=$(scale_bytes "$1")
    h_sql "SET GLOBAL innodb_buffer_pool_size = $want" || b_die "cannot set innodb_buffer_pool_size = $1"
    # Done: the size is set and no resize is under way. MySQL says so with
    # Innodb_buffer_pool_resize_status_code 0 (its status text then keeps "Completed resizing
    # buffer pool at ...", which the text check alone took for a resize under way); MariaDB
    # has no code, and its text is empty or says "Completed".
    local code text
    for ((i = 0; i < 600; i++)); do
        if [[ $(h_sql "SELECT @@innodb_buffer_pool_size") == "$want" ]]; then
            code=$(h_sql "SHOW STATUS LIKE 'Innodb_buffer_pool_resize_status_code'" | cut -f2)
            if [[ -n $code ]]; then
                [[ $code == 0 ]] && break
            else
                text=$(h_sql "SHOW STATUS LIKE 'Innodb_buffer_pool_resize_status'" | cut -f2)
                [[ $text != *[Rr]esiz* || $text == Completed* ]] && break
            fi
        fi
        sleep 0.5
    done
    ((i < 600)) || b_die "the buffer pool did not reach $1"
    h_sql "SELECT COUNT(*) FROM msg_id_record FORCE INDEX (uk_consumer_msg_id)" "$2" >/dev/null ||
        b_die "reading the dedup index of $2"
}

declare -A SCALE_DELETED SCALE_READS SCALE_FLUSHED SCALE_SPLITS
h_sql "SET GLOBAL innodb_monitor_enable = 'index_page_splits'" >/dev/null 2>&1
scale_fill bench_scale_full
read -r S_ROWS0 S_DATA0 S_INDEX0 S_BPR0 < <(scale_sizes bench_scale_full)
scale_db bench_scale_empty
for pool in $SCALE_POOLS; do
    scale_pool "$pool" bench_scale_full
    for ((r = 1; r <= REPEAT; r++)); do
        for kind in v4 v7; do
            scale_run bench_scale_empty "$kind" "$pool" "$r"
            scale_run bench_scale_full "$kind" "$pool" "$r"
            scale_run bench_scale_full "$kind" "$pool" "$r" 0
        done
    done
done
read -r S_ROWS1 S_DATA1 S_INDEX1 S_BPR1 < <(scale_sizes bench_scale_full)

echo "## idemd: the dedup table at scale ($(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo
machine_line
echo
echo "msg_id_record pre-filled with $S_ROWS0 rows in $SCALE_FILL_S s (two consumers, half each: random UUIDv4 ids and"
echo "time-ordered UUIDv7 ids; create_time over the last 40 days; secondary indexes built $SCALE_FILL% full, innodb_fill_factor):"
echo "$S_DATA0 MiB of data and $S_INDEX0 MiB of secondary indexes, $S_BPR0 bytes a row. After the runs: $S_ROWS1 rows ($S_DATA1 + $S_INDEX1 MiB, $S_BPR1 bytes a row)."
echo "Each run: $TOTAL messages ($UNIQUE orders + $DUPS duplicates) of fresh ids, the two-statement"
echo "per-message handler, default workers, record_retention_days = $SCALE_DAYS (retention deletes the"
echo "pre-filled table's oldest quarter while the runs go on; the no-retention column sets 0);"
echo "$REPEAT runs of each, interleaved;"
echo "messages/s, median (min-max)."
echo
echo "| buffer pool | ids | empty table | $S_ROWS0 rows | ratio | ≥ 0.8× | pages read from disk per message (empty / full) | pages written per message (empty / full) | index page splits per message (empty / full) | rows retention deleted (per run) | $S_ROWS0 rows, no retention | ratio |"
echo "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|"
for pool in $SCALE_POOLS; do
    for kind in v4 v7; do
        e=scale-$pool-$kind-empty f=scale-$pool-$kind-full
        echo "| $pool | UUID${kind} | $(with_range "$(rate_of "$e")" "${R_RATE[$e]:-}") |" \
            "$(with_range "$(rate_of "$f")" "${R_RATE[$f]:-}") | $(ratio "$(rate_of "$f")" "$(rate_of "$e")") |" \
            "**$(pass_if "$(rate_of "$f")" "$(rate_of "$e")" 0.8)** |" \
            "$(median "${SCALE_READS[$e]:-}") / $(median "${SCALE_READS[$f]:-}") |" \
            "$(median "${SCALE_FLUSHED[$e]:-}") / $(median "${SCALE_FLUSHED[$f]:-}") |" \
            "$(median "${SCALE_SPLITS[$e]:-}") / $(median "${SCALE_SPLITS[$f]:-}") |" \
            "$(median "${SCALE_DELETED[$f]:-}") | $(with_range "$(rate_of "$f-noret")" "${R_RATE[$f-noret]:-}") |" \
            "$(ratio "$(rate_of "$f-noret")" "$(rate_of "$e")") |"
    done
done
echo
if ((${#FAILS[@]} == 0)); then
    echo "Correctness: **PASS** (every run paid each order exactly once and recorded each id once)."
else
    echo "Correctness: **FAIL**"
    for f in "${FAILS[@]}"; do echo "- $f"; done
fi
echo
echo "(bench/run took $((SECONDS - T_START)) s)"
((${#FAILS[@]} == 0))
exit
