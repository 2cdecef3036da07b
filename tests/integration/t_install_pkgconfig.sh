# t_install_pkgconfig: make install into a DESTDIR; an out-of-tree plugin builds with pkg-config and loads; make uninstall removes exactly what install put down.
root=$PWD/root
# B= installs the build under test (build/, or build-asan/ for sanitizer runs).
mk() { make -s -C "$H_ROOT" B="$H_BUILD" DESTDIR="$root" PREFIX=/usr "$@"; }

mk install >install.log 2>&1 || { cat install.log; h_fail "make install failed"; }
(cd "$root" && find . -type f -o -type l | sed 's|^\./||' | sort) >installed.txt
{
    echo etc/idemd/idemd.conf.example
    echo usr/include/idemd/handler.h
    for p in "$H_ROOT"/src/plugins/*.c; do
        n=${p##*/}
        echo "usr/lib/idemd/plugins/${n%.c}.so"
    done
    echo usr/lib/pkgconfig/idemd.pc
    echo usr/lib/systemd/system/idemd.service
    echo usr/lib/systemd/system/idemd@.service
    echo usr/sbin/idemd
    echo usr/sbin/idemctl
    for s in "$H_ROOT"/sql/*.sql; do echo "usr/share/idemd/sql/${s##*/}"; done
    echo usr/share/idemd/idemd-alerts.yml
    echo usr/share/idemd/idemd-dashboard.json
    echo usr/share/man/man5/idemd.conf.5
    echo usr/share/man/man8/idemd.8
    echo usr/share/man/man8/idemctl.8
} | sort >expected.txt
cat installed.txt
diff -u expected.txt installed.txt || h_fail "installed files differ from the expected list"
# uninstall works from the same list: it must name exactly what install put down.
mk install-list | sed 's|^/||' | sort >listed.txt
diff -u installed.txt listed.txt || h_fail "make install-list differs from what install put down"

# Paths inside the installed files follow PREFIX=/usr; nothing points into /usr/local.
! grep -n /usr/local "$root"/usr/lib/systemd/system/* "$root"/usr/share/man/man*/* \
    "$root"/etc/idemd/idemd.conf.example "$root"/usr/lib/pkgconfig/idemd.pc ||
    h_fail "installed files still name /usr/local"
grep -qxF 'ExecStart=/usr/sbin/idemd -c /etc/idemd/idemd.conf' "$root/usr/lib/systemd/system/idemd.service" ||
    h_fail "idemd.service: ExecStart does not run /usr/sbin/idemd"
grep -qxF 'ExecStart=/usr/sbin/idemd -c /etc/idemd/%i.conf' "$root/usr/lib/systemd/system/idemd@.service" ||
    h_fail "idemd@.service: ExecStart does not run /usr/sbin/idemd"
[[ -x "$root/usr/sbin/idemd" ]] || h_fail "usr/sbin/idemd is not executable"
grep -q '^idemd [0-9]' <<<"$("$root/usr/sbin/idemd" --version)" || h_fail "installed idemd --version"
grep -q '^idemctl [0-9]' <<<"$("$root/usr/sbin/idemctl" --version)" || h_fail "installed idemctl --version"

# The sample config, pointed into the DESTDIR, is valid and loads the installed plugin.
(umask 077 && sed "s|\"/usr/lib/idemd/plugins/|\"$root/usr/lib/idemd/plugins/|" \
    "$root/etc/idemd/idemd.conf.example" >example.conf) # it holds a password: keep it private
out=$("$root/usr/sbin/idemd" "${H_ALLOW_ROOT[@]}" --check-config -c example.conf 2>example.err) ||
    h_fail "example config: $out $(cat example.err)"
echo "$out"
cat example.err
[[ "$out" == "example.conf: configuration OK (1 queue)" ]] || h_fail "example config: $out"
# Its queue is a quorum queue by default, so no delay hop can lose a message: nothing on stderr.
h_assert_eq "$(grep -c . example.err)" 0 "lines --check-config wrote on stderr"

# pkg-config, as a cross or staged build would use it.
export PKG_CONFIG_SYSROOT_DIR=$root PKG_CONFIG_PATH=$root/usr/lib/pkgconfig
pc_path=$(pkg-config --path idemd) || h_fail "pkg-config finds no idemd"
h_assert_eq "$pc_path" "$root/usr/lib/pkgconfig/idemd.pc" "pkg-config --path idemd"
pkg-config --validate idemd || h_fail "idemd.pc does not validate"
cflags=$(pkg-config --cflags idemd)
cflags=${cflags% } # pkgconf ends the list with a space
h_assert_eq "$cflags" "-I$root/usr/include" "pkg-config --cflags idemd"
h_assert_eq "$(pkg-config --variable=plugindir idemd)" "$root/usr/lib/idemd/plugins" "plugindir"
h_assert_eq "$(pkg-config --modversion idemd)" "$("$IDEMD" --version | cut -d' ' -f2)" "version"
h_assert_eq "$(pkg-config --variable=handler_abi idemd)" "$(h_handler_abi)" "handler_abi"

# A minimal handler outside the tree, strict C11, with nothing but the installed header.
# shellcheck disable=SC2086 # cflags is a list of flags
h_hello_plugin "$root/usr/include/idemd/handler.h" $cflags
if command -v c++ >/dev/null; then
    # shellcheck disable=SC2086
    c++ -Wall -Wextra -Werror -fsyntax-only $cflags -x c++ - <<<'#include <idemd/handler.h>' ||
        h_fail "the installed header does not compile as C++"
fi
unset PKG_CONFIG_SYSROOT_DIR PKG_CONFIG_PATH

{
    h_conf_common t_install_pkgconfig
    # No delay tiers: a classic queue's at-most-once delay hop would be warned about on stderr.
    echo "queues = ( { name = \"t_install_pkgconfig.q\"; handler = \"$PWD/hello.so\"; retry_delays_ms = [ ]; } );"
} >hello.conf
chmod 0600 hello.conf
for bin in "$IDEMD" "$root/usr/sbin/idemd"; do
    out=$("$bin" "${H_ALLOW_ROOT[@]}" --check-config -c hello.conf 2>&1) || h_fail "$bin --check-config: $out"
    echo "$bin: $out"
    h_assert_eq "$out" "hello.conf: configuration OK (1 queue)" "$bin --check-config"
done

# uninstall removes exactly what install put down: a file of the admin's stays.
echo 'database = { database = "mine"; };' >"$root/etc/idemd/idemd.conf"
mk uninstall >uninstall.log 2>&1 || { cat uninstall.log; h_fail "make uninstall failed"; }
left=$(cd "$root" && find . -type f -o -type l | sed 's|^\./||' | sort)
h_assert_eq "$left" "etc/idemd/idemd.conf" "files left by make uninstall"
rm "$root/etc/idemd/idemd.conf"
mk uninstall >>uninstall.log 2>&1 || h_fail "a second make uninstall failed"
left=$(cd "$root" && find . -type f -o -type l | wc -l)
h_assert_eq "$left" 0 "files left after removing the admin's file"
for d in usr/lib/idemd usr/share/idemd usr/include/idemd etc/idemd; do
    [[ ! -e "$root/$d" ]] || h_fail "make uninstall left the directory $d"
done
echo "t_install_pkgconfig: ok"
