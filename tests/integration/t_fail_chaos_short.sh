# t_fail_chaos_short: a short high-load chaos round (tests/chaos/run --high-load --short): 1,000 msgs/s into two daemons with 2 workers per queue, kill -9 of an instance and a worker, a RabbitMQ and a MariaDB restart, closed connections, poisoned ids.
rc=0
bash "$H_ROOT/tests/chaos/run" --high-load --short >chaos.out 2>&1 || rc=$?
grep -vE '^#   ' chaos.out | tail -n 30
last=$(tail -n 1 chaos.out)
[[ "$last" == "lost 0 duplicated 0 misrouted 0" ]] || h_fail "chaos oracle: '$last' (details in $PWD/chaos.out)"
((rc == 0)) || h_fail "tests/chaos/run --high-load --short exited with status $rc (details in $PWD/chaos.out)"
echo "t_fail_chaos_short: ok ($last)"
