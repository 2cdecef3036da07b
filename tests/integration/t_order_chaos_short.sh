# t_order_chaos_short: a short ordering chaos round (tests/chaos/order --short): 3,000 keys x 3 messages at 1,200 msgs/s into an ordered queue, retries on 5% of the keys, kill -9 of the worker twice and a RabbitMQ restart; per key the effects come in publish order, none lost, none doubled. (The unordered control is make chaos-order; t_order_retry has a small one.)
rc=0
bash "$H_ROOT/tests/chaos/order" --short >chaos.out 2>&1 || rc=$?
grep -vE '^#   ' chaos.out | tail -n 12
last=$(tail -n 1 chaos.out)
[[ "$last" == "lost 0 duplicated 0 out-of-order 0" ]] || h_fail "ordering oracle: '$last' (details in $PWD/chaos.out)"
((rc == 0)) || h_fail "tests/chaos/order --short exited with status $rc (details in $PWD/chaos.out)"
grep -qE '^# figures: .* retries logged [1-9]' chaos.out || h_fail "no retry was injected (details in $PWD/chaos.out)"
echo "t_order_chaos_short: ok ($last)"
