# t_queue_names: queue names RabbitMQ would refuse (not UTF-8, "amq." prefix, a derived name over 255 bytes) or that would share a signing domain with onward messages ("onward:" prefix) are configuration errors naming the file, the line and the setting; idemd does not start with one.
counter=$H_TEST_PLUGINS/counter.so

# bad NAME LINE SETTING WORDS FILE: --check-config and a start of FILE both exit 1 naming
# FILE:LINE: SETTING: and WORDS; no worker starts.
bad()
{
    local f=$1 line=$2 setting=$3 words=$4 rc=0 out
    out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c "$f" 2>&1) || rc=$?
    echo "--- $f (--check-config status $rc): $out"
    ((rc == 1)) || h_fail "$f: --check-config exited $rc, expected 1"
    grep -qF "$f:$line: $setting: " <<<"$out" || h_fail "$f: no '$f:$line: $setting: ' in: $out"
    grep -qF -- "$words" <<<"$out" || h_fail "$f: no '$words' in: $out"
    rc=0
    out=$(timeout 30 "$IDEMD" "${H_ALLOW_ROOT[@]}" -c "$f" 2>&1 </dev/null) || rc=$?
    ((rc == 1)) || h_fail "$f: idemd exited $rc, expected 1: $out"
    grep -qF "$f:$line: $setting: " <<<"$out" || h_fail "$f: the start does not name $f:$line: $setting"
    h_assert_eq "$(grep -c 'ready:\|worker' <<<"$out" || true)" 0 "$f: ready or worker lines"
}

# conf NAME [QUEUE LINES...]: a config whose queue is NAME, on line 3.
conf()
{
    printf 'database = { socket = "%s"; user = "root"; database = "t"; };\n' "$MYSQL_SOCK"
    printf 'broker = { port = %s; };\n' "$AMQP_PORT"
    printf 'queues = ( { handler = "%s"; consumer = "c";\n  name = "%s";\n' "$counter" "$1"
    shift
    printf '  %s\n' "$@"
    printf '} );\n'
}

conf "amq.orders" >amq.conf
bad amq.conf 4 "queues.[0].name" "\"amq.orders\" starts with \"amq.\", which RabbitMQ keeps for itself"
conf "onward:orders" >onward.conf
bad onward.conf 4 "queues.[0].name" "\"onward:orders\" starts with \"onward:\", which idemd keeps for the dead letters of onward messages"
conf $'orders\xff' >utf8.conf
bad utf8.conf 4 "queues.[0].name" "byte 7 is not valid UTF-8"
conf $'ord\xc0\xafers' >overlong.conf
bad overlong.conf 4 "queues.[0].name" "byte 4 is not valid UTF-8"
conf $'orders\e[2J' >control.conf
bad control.conf 4 "queues.[0].name" "byte 7 is a control character (0x1b)"
conf "orders" 'declare = {' '  dead_letter_queue = "amq.orders.dlq"; };' >dlq_amq.conf
bad dlq_amq.conf 6 "queues.[0].declare.dead_letter_queue" "\"amq.orders.dlq\" starts with \"amq.\""
# 250 bytes: the default dead letter queue (+ ".dlq") would be 254 bytes, fine, but the first
# delay tier (+ ".retry.1000") 261.
long=$(printf 'n%.0s' $(seq 250))
conf "$long" >tier.conf
bad tier.conf 4 "queues.[0].name" "the delay queue \"$long.retry.1000\" would be 261 bytes long, more than RabbitMQ's 255"
# 255 bytes of two-byte characters fit, and a name over 255 bytes is refused as such.
conf "$(printf 'é%.0s' $(seq 128))" 'retry_delays_ms = [ ];' 'declare = { dead_letter_queue = ""; };' >bytes.conf
bad bytes.conf 4 "queues.[0].name" "must be at most 255 bytes long (got 256)"
ok_name="$(printf 'é%.0s' $(seq 127))x"
conf "$ok_name" 'retry_delays_ms = [ ];' 'declare = { dead_letter_queue = ""; };' >ok.conf
out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c ok.conf 2>&1) || h_fail "a 255-byte UTF-8 name was refused: $out"
# A name that only contains "onward:" or "amq." further on is fine.
conf "orders.onward:x.amq.y" >fine.conf
out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c fine.conf 2>&1) || h_fail "orders.onward:x.amq.y was refused: $out"
echo "t_queue_names: ok"
