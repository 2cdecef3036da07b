# t_demo_keep: `bash tests/demo --keep` runs the demo and leaves its private servers up as a sandbox: it prints their settings, an env file and the stop command; the servers answer (a query, a publish); `bash tests/demo --stop DIR` stops them and removes DIR.
[[ "$H_BUILD" == "$H_ROOT/build" ]] || h_skip "tests/demo builds and runs build/, not $H_BUILD"
kept=
stop_kept() { [[ -n "$kept" && -d "$kept" ]] && bash "$H_ROOT/tests/demo" --stop "$kept" >/dev/null 2>&1; return 0; }
trap stop_kept EXIT
# Its own servers, not this run's: a fresh environment for it.
env -u H_DIR -u AMQP_PORT -u MYSQL_SOCK -u MYSQL_PORT -u ERL_EPMD_PORT -u H_DIST_PORT -u H_RABBIT_NODE \
    bash "$H_ROOT/tests/demo" --keep >demo.log 2>&1 || { tail -n 30 demo.log; h_fail "tests/demo --keep failed"; }
grep -q '^RESULT: 15 payment messages for 5 orders -> every order paid exactly once' demo.log || h_fail "the demo's result: $(tail -n 5 demo.log)"
kept=$(sed -n 's/^to stop: bash tests\/demo --stop //p' demo.log)
[[ -n "$kept" && -f "$kept/env" ]] || h_fail "no stop command naming a directory with env: $(tail -n 12 demo.log)"
grep -q "^  run idemd on it: build/idemd .*-c $kept/demo.conf" demo.log || h_fail "no idemd command line: $(tail -n 12 demo.log)"
# The sandbox answers: the database through the printed settings, the broker through the env.
h_assert_eq "$(source "$kept/env" && MYSQL_SOCK=$MYSQL_SOCK h_sql "SELECT COUNT(*) FROM orders WHERE pay_count = 1" demo)" 5 "orders paid once, read in the sandbox"
h_assert_eq "$(source "$kept/env" && printf 'k1\t{"orderId": 1001}\n' | "$MQTOOL" -P "$AMQP_PORT" publish -r demo.pay)" \
    "published 1 confirmed 1" "a publish to the sandbox's broker"
out=$(bash "$H_ROOT/tests/demo" --stop "$kept" 2>&1) || h_fail "tests/demo --stop failed: $out"
[[ ! -e "$kept" ]] || h_fail "$kept is still there after --stop"
kept=
echo "t_demo_keep: ok"
