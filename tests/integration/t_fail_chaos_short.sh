# t_fail_chaos_short: the short chaos run (tests/chaos/run --short): two daemons, kill -9, a RabbitMQ and a MariaDB restart, closed connections, poisoned ids.
rc=0
bash "$H_ROOT/tests/chaos/run" --short >chaos.out 2>&1 || rc=$?
grep -vE '^#   ' chaos.out | tail -n 25
last=$(tail -n 1 chaos.out)
[[ "$last" =~ ^lost\ 0\ duplicated\ 0\ dead-lettered\ [0-9]+$ ]] || h_fail "chaos oracle: '$last' (details in $PWD/chaos.out)"
((rc == 0)) || h_fail "tests/chaos/run --short exited with status $rc (details in $PWD/chaos.out)"
echo "t_fail_chaos_short: ok ($last)"
