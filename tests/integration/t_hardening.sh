# t_hardening: the built daemon and plugins are hardened (PIE, full RELRO, stack protector, FORTIFY), and LOAD DATA LOCAL is refused.
db=t_hardening
q=t_hardening.q
dlq=t_hardening.dlq

# check_elf FILE KIND: KIND "exe" (a PIE) or "lib" (a plugin).
check_elf()
{
    local f=$1 kind=$2 hdr dyn seg syms
    hdr=$(readelf -hW "$f") dyn=$(readelf -dW "$f") seg=$(readelf -lW "$f")
    syms=$(nm -D --undefined-only "$f")
    grep -qE 'Type: +DYN' <<<"$hdr" || h_fail "$f: not a position-independent (DYN) ELF file"
    if [[ $kind == exe ]]; then
        grep -qE 'FLAGS_1.*PIE' <<<"$dyn" || h_fail "$f: no PIE flag (built without -pie)"
    fi
    grep -qE '\(FLAGS\).*BIND_NOW|FLAGS_1.*NOW' <<<"$dyn" || h_fail "$f: no BIND_NOW (-z now)"
    grep -qE '^ +GNU_RELRO ' <<<"$seg" || h_fail "$f: no GNU_RELRO segment (-z relro)"
    grep -qE '^ +GNU_STACK .* RW +0x' <<<"$seg" || h_fail "$f: the stack is executable"
    grep -qE ' __stack_chk_fail(@|$)' <<<"$syms" || h_fail "$f: no __stack_chk_fail (stack protector)"
    # FORTIFY_SOURCE is left out of ASan builds (SANITIZE=1): ASan checks those calls itself.
    if grep -qE ' __asan_init' <<<"$syms"; then
        echo "$f: an ASan build: FORTIFY not expected"
    else
        grep -qE ' __[a-z]+_chk(@|$)' <<<"$syms" || h_fail "$f: no _chk function (FORTIFY_SOURCE)"
    fi
    echo "$f: PIE/DYN, BIND_NOW, GNU_RELRO, non-executable stack, stack protector, FORTIFY"
}
check_elf "$IDEMD" exe
check_elf "$H_PLUGINS/order_pay.so" lib
check_elf "$H_TEST_PLUGINS/counter.so" lib
# The flags behind what readelf can see: the Makefile's compile line for idemd.
# (The default build's, also when this runs under make SANITIZE=1 test: not inherited.)
flags=$(env -u MAKEFLAGS -u MAKELEVEL -u SANITIZE \
    make -C "$H_ROOT" -n -B B=/nonexistent SANITIZE= /nonexistent/obj/log.o 2>/dev/null || true)
for f in -fstack-protector-strong -fstack-clash-protection -D_FORTIFY_SOURCE=2 -fPIE; do
    grep -qF -- "$f" <<<"$flags" || h_fail "the compile line lacks $f: $flags"
done

# A hostile or hijacked server may ask the client for any local file (LOAD DATA LOCAL):
# idemd's connections refuse.
h_new_db "$db"
h_sql "CREATE TABLE load_local (line TEXT)"
# The server side allows it (MariaDB's default; MySQL's is off), so the refusal is idemd's.
h_db_is_mysql && h_sql "SET GLOBAL local_infile = ON"
{
    h_conf_common "$db"
    cat <<CONF
queues = (
  { name = "$q"; handler = "$H_TEST_PLUGINS/counter.so"; declare = { dead_letter_queue = "$dlq"; }; }
);
CONF
} >idemd.conf
h_daemon_start idemd.conf idemd.log
out=$(printf 'l1\tload-local\n' | h_mq publish -r "$q")
h_assert_eq "$out" "published 1 confirmed 1" "publish"
h_wait_log idemd.log "outcome=(ok|reject) queue=$q id=l1 " 1 30
h_daemon_stop || h_fail "idemd exited with status $? on SIGTERM"
h_assert_eq "$(h_sql "SELECT COUNT(*) FROM load_local")" 0 "rows read from a local file"
h_assert_eq "$(h_count_log idemd.log "outcome=reject queue=$q id=l1 .*reason=\".*(local infile|LOCAL INFILE|not allowed|must be enabled on both the client and server)")" 1 \
    "l1 rejected with the client's refusal"
echo "t_hardening: ok"
