# t_plugin_db: test_plugin's database half (the example plugins' statements, and ABI 1.6's host->value_check on a value the server rounds) against this run's private server, which the unit run alone does not have.
out=$(cd "$H_ROOT" && IDEMD_TEST_DB_SOCKET=$MYSQL_SOCK "$H_BUILD/tests/unit/test_plugin" 2>&1) || h_fail "test_plugin failed: $(grep -v '^ok' <<<"$out" | tail -n 20)"
h_assert_eq "$(grep -c '^ok .*value_check' <<<"$out")" 3 "value_check cases run"
h_assert_eq "$(grep -c '^ok .* # SKIP' <<<"$out")" 0 "skipped cases"
h_assert_eq "$(grep -c '^not ok' <<<"$out")" 0 "failed cases"
echo "t_plugin_db: ok"
