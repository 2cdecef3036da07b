# t_attempt_upgrade: on an idemd_attempt made by the old 003 (no crashes column) a worker refuses to start and names the file to apply; sql/008 adds the column (twice is harmless), and then messages flow.
db=t_attempt_upgrade
q=t_attempt_upgrade.q
h_new_db "$db"
h_sql "DROP TABLE idemd_attempt;
       CREATE TABLE idemd_attempt (consumer VARBINARY(128) NOT NULL, msg_id VARBINARY(255) NOT NULL,
         attempts INT UNSIGNED NOT NULL,
         updated_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
         PRIMARY KEY (consumer, msg_id), KEY idx_updated_at (updated_at)) ENGINE=InnoDB;
       INSERT INTO idemd_attempt (consumer, msg_id, attempts) VALUES ('$q', 'old', 3)"
{
    h_conf_common "$db"
    cat <<CONF
queues = ( { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; workers = 1; } );
CONF
} >idemd.conf
chmod go= idemd.conf
setsid "$IDEMD" "${H_ALLOW_ROOT[@]}" -c idemd.conf </dev/null >idemd.log 2>&1 &
H_DAEMON_PID=$!
mkdir -p "$H_DIR/daemons"
: >"$H_DIR/daemons/$H_DAEMON_PID"
h_wait_log idemd.log "cannot use table idemd_attempt \(apply sql/003_idemd_attempt.sql and sql/008_idemd_attempt_crashes.sql\)" 1 30 ||
    h_fail "no refusal naming sql/008"
h_assert_eq "$(h_count_log idemd.log "worker $q#0 .* consuming|ready: 1 queues, 1 workers consuming")" 0 \
    "workers consuming without the column"
h_daemon_kill9

for _ in 1 2; do
    h_mysql "$db" <"$H_SQL_DIR/008_idemd_attempt_crashes.sql" || h_fail "sql/008 failed"
done
h_assert_eq "$(h_sql "SELECT consumer, msg_id, attempts, crashes FROM idemd_attempt")" \
    "$q"$'\told\t3\t0' "the old row, with crashes 0"
# (MySQL 8.0.19+ shows no display width: int unsigned, not int(10) unsigned.)
h_assert_eq "$(h_sql "SELECT REPLACE(COLUMN_TYPE, 'int(10)', 'int'), IS_NULLABLE, COLUMN_DEFAULT FROM information_schema.COLUMNS
                      WHERE TABLE_SCHEMA = '$db' AND TABLE_NAME = 'idemd_attempt' AND COLUMN_NAME = 'crashes'")" \
    $'int unsigned\tNO\t0' "the crashes column"

h_daemon_start idemd.conf idemd.log
out=$(h_gen u 1 20 | h_mq publish -r "$q")
h_assert_eq "$out" "published 20 confirmed 20" "publisher"
h_wait_sql "SELECT COUNT(*), MAX(n) FROM effects WHERE queue = '$q'" $'20\t1' 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
echo "t_attempt_upgrade: ok"
