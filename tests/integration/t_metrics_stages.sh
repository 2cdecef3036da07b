# t_metrics_stages: idemd_stage_seconds counts every stage exactly (wait per stamped message, collect, begin, insert and ack per batch, handler per call, commit per COMMIT), on both transaction boundaries, and the exit log gives each stage's p50/p99.
db=t_metrics_stages
q=t_metrics_stages.q
h_new_db "$db"
mport=$(h_free_port 31000 2000)
n=300

s_conf()
{
    h_conf_common "$db"
    cat <<CONF
metrics = { listen = "127.0.0.1:$mport"; };
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; prefetch = 100;
             batch_size = 20; } );
CONF
}

# The exposition, or fail.
s_scrape() { curl -sS --max-time 5 "http://127.0.0.1:$mport/metrics"; }

# The value of sample $1 (name{labels} exactly as exposed) in the scrape $2.
s_value() { awk -v k="$1" '$1 == k { print $2; f = 1 } END { if (!f) print "absent" }' <<<"$2"; }

# Poll until sample $1 is $2; fail after $3 s.
s_wait()
{
    local deadline=$((SECONDS + $3)) got
    while :; do
        got=$(s_value "$1" "$(s_scrape)") || true
        [[ "$got" == "$2" ]] && return 0
        ((SECONDS < deadline)) || h_fail "metrics: $1 is '$got', expected '$2' after $3 s"
        sleep 0.2
    done
}

# One run of $n fresh messages with database.transaction = $1: every stage counted exactly.
s_run()
{
    local mode=$1 round=$2 m batches commits
    h_mq delete "$q" >/dev/null 2>&1
    h_mq declare "$q" >/dev/null || h_fail "cannot declare $q"
    # shellcheck disable=SC2001 # one substitution in the generated config
    sed "s/database = {/database = { transaction = \"$mode\";/" <<<"$(s_conf)" >idemd.conf
    grep -q "transaction = \"$mode\"" idemd.conf || h_fail "config: no transaction setting"
    h_daemon_start idemd.conf "idemd-$mode.log"
    h_gen "$mode-" 1 "$n" >msgs.txt
    h_assert_eq "$(h_mq publish -r "$q" <msgs.txt)" "published $n confirmed $n" "publisher ($mode)"
    h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'" $((n * round)) 60
    s_wait "idemd_messages_total{queue=\"$q\",outcome=\"ok\"}" "$n" 10
    s_wait "idemd_stage_seconds_count{queue=\"$q\",stage=\"ack\"}" \
        "$(s_value "idemd_batch_size_count{queue=\"$q\"}" "$(s_scrape)")" 10
    m=$(s_scrape)
    batches=$(s_value "idemd_batch_size_count{queue=\"$q\"}" "$m")
    commits=$(s_value "idemd_commits_total{queue=\"$q\"}" "$m")
    h_log "$mode: $batches batches, $commits commits"
    [[ "$batches" =~ ^[0-9]+$ ]] && ((batches > 0 && batches <= n)) || h_fail "$mode: batches '$batches'"
    h_assert_eq "$commits" "$batches" "$mode: one commit per batch (fresh ids, nothing fails)"
    h_assert_eq "$(s_value "idemd_stage_seconds_count{queue=\"$q\",stage=\"wait\"}" "$m")" "$n" \
        "$mode: wait, one per stamped message"
    h_assert_eq "$(s_value "idemd_stage_seconds_count{queue=\"$q\",stage=\"collect\"}" "$m")" \
        "$batches" "$mode: collect, one per batch"
    h_assert_eq "$(s_value "idemd_stage_seconds_count{queue=\"$q\",stage=\"begin\"}" "$m")" \
        "$batches" "$mode: begin, one per batch's transaction"
    h_assert_eq "$(s_value "idemd_stage_seconds_count{queue=\"$q\",stage=\"insert\"}" "$m")" \
        "$batches" "$mode: insert, one statement per batch"
    h_assert_eq "$(s_value "idemd_stage_seconds_count{queue=\"$q\",stage=\"handler\"}" "$m")" "$n" \
        "$mode: handler, one per call (counter.so: one per message)"
    h_assert_eq "$(s_value "idemd_stage_seconds_count{queue=\"$q\",stage=\"commit\"}" "$m")" \
        "$commits" "$mode: commit, one per COMMIT"
    h_assert_eq "$(s_value "idemd_stage_seconds_count{queue=\"$q\",stage=\"ack\"}" "$m")" \
        "$batches" "$mode: ack, one per batch"
    h_assert_eq "$(s_value "idemd_stage_seconds_bucket{queue=\"$q\",stage=\"commit\",le=\"+Inf\"}" "$m")" \
        "$commits" "$mode: commit's +Inf bucket is its count"
    h_daemon_stop
    h_assert_eq "$(h_mq depth "$q" | cut -d' ' -f1)" 0 "$mode: messages left in the queue"
    line=$(grep -o 'stages: .*' "idemd-$mode.log" | tail -n1)
    h_log "$mode: $line"
    for st in wait collect begin insert handler commit ack; do
        [[ "$line" =~ $st\ n=[0-9]+\ p50_us=[0-9]+\ p99_us=[0-9]+ ]] || h_fail "$mode: exit log has no $st stage: '$line'"
    done
    [[ "$line" == *"wait n=$n "* && "$line" == *"handler n=$n "* ]] || h_fail "$mode: exit log counts: '$line'"
}

s_run xa 1
s_run checked 2
echo "t_metrics_stages: ok"
