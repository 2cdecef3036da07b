# t_deb_package: dpkg-buildpackage builds idemd and idemd-dev from a copy of the tree; installed, they hold what make install puts down, create the idemd user, verify as units, build and run a plugin with pkg-config; purge leaves nothing behind.
#
# The packages are installed system-wide (on CI a throwaway machine) and purged at the end,
# also when the case fails; a user idemd the case created is deleted again. Outside CI the
# case is skipped when the packaging tools are missing or it has neither root nor sudo. It
# refuses to run where an idemd package or a file of the packages is already installed, and
# takes a lock so that overlapping test runs on one machine install one after the other.
# The build runs in a copy of the work tree, so build/ and /usr/local stay untouched.

skip_or_fail()
{
    [[ -z "${CI:-}" ]] || h_fail "$*"
    h_skip "$*"
}
missing=()
for t in dpkg-buildpackage dh lintian apt-get systemd-analyze pkg-config cc; do
    command -v "$t" >/dev/null || missing+=("$t")
done
((${#missing[@]} == 0)) ||
    skip_or_fail "missing ${missing[*]} (Debian packages dpkg-dev debhelper lintian: .ci/packages)"
# Root, or passwordless sudo (as on a CI runner), for apt-get, userdel, runuser and the root-only
# example config.
sudo=()
if (($(id -u) != 0)); then
    sudo -n true 2>/dev/null || skip_or_fail "apt-get install needs root or passwordless sudo"
    sudo=(sudo -n)
fi

ver=$(sed -n 's/^#define IDEMD_VERSION "\(.*\)"$/\1/p' "$H_ROOT/src/main.c")
[[ -n "$ver" ]] || h_fail "no IDEMD_VERSION in src/main.c"
debver=$(dpkg-parsechangelog -l "$H_ROOT/debian/changelog" -S Version)
h_assert_eq "${debver%-*}" "$ver" "debian/changelog's upstream version"
arch=$(dpkg --print-architecture)
# Where the units belong, as debian/rules decides it: debhelper 13.11.6 and later take them
# under /usr (Debian 13's lintian flags /lib/systemd/system as an aliased location); Debian
# 12's 13.11.4 reads only /lib/systemd/system.
dh_ver=$(dpkg-query -W -f='${Version}' debhelper 2>/dev/null) || dh_ver=
if [[ -n "$dh_ver" ]] && dpkg --compare-versions "$dh_ver" ge 13.11.6~; then
    want_unitdir=/usr/lib/systemd/system
else
    want_unitdir=/lib/systemd/system
fi
h_log "debhelper ${dh_ver:-?}: units under $want_unitdir"

# ---------- build ----------
# The work tree as it is (uncommitted changes included), without ignored files like build/.
src=$PWD/pkg/idemd-$ver
mkdir -p "$src"
if git -C "$H_ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$H_ROOT" && git ls-files -z --cached --others --exclude-standard) |
        tar -C "$H_ROOT" --null --ignore-failed-read -T - -cf - | tar -C "$src" -xf -
else
    tar -C "$H_ROOT" --exclude=./build --exclude='./build-*' -cf - . | tar -C "$src" -xf -
fi
[[ -x "$src/debian/rules" ]] || h_fail "the copy has no executable debian/rules"
h_log "dpkg-buildpackage -us -uc -b in $src"
# Nothing of the test run's make (SANITIZE=1, B=...) may reach the package build.
t0=$SECONDS
(cd "$src" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u SANITIZE -u CFLAGS -u CPPFLAGS \
    -u LDFLAGS -u LDLIBS DEB_BUILD_OPTIONS=parallel=2 dpkg-buildpackage -us -uc -b) \
    >build.log 2>&1 || { tail -n 40 build.log; h_fail "dpkg-buildpackage failed (build.log)"; }
h_log "built in $((SECONDS - t0)) s"
deb=$PWD/pkg/idemd_${debver}_$arch.deb
dev=$PWD/pkg/idemd-dev_${debver}_all.deb
changes=$PWD/pkg/idemd_${debver}_$arch.changes
for f in "$deb" "$dev" "$changes"; do [[ -f "$f" ]] || h_fail "no ${f##*/} after the build"; done
grep -qF -- '-D_FORTIFY_SOURCE=' build.log || h_fail "the build did not use dpkg-buildflags' CPPFLAGS"

# Findings are fixed or explained in debian/*.lintian-overrides.
rc=0
lintian -I --fail-on error,warning "$changes" >lintian.log 2>&1 || rc=$?
cat lintian.log
((rc == 0)) || h_fail "lintian reports errors or warnings"

# deb_paths DEB: the paths a package holds, one a line, absolute ("/" itself left out).
deb_paths() { dpkg-deb --fsys-tarfile "$1" | tar -tf - | sed 's|^\./|/|; s|/$||' | grep -vx '/\{0,1\}' || true; }
deb_paths "$deb" | sort >paths.idemd
deb_paths "$dev" | sort >paths.dev

# The packages hold exactly what make install puts down (man pages compressed), plus the
# sysusers.d file, the docs and the lintian overrides.
deb_files() { dpkg-deb --fsys-tarfile "$1" | tar -tf - | grep -v '/$' | sed 's|^\./|/|' | sort; }
{
    deb_files "$deb"
    deb_files "$dev"
} | grep -vE '^/usr/share/(doc|lintian)/' | sort >packaged.txt
env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$src" install-list PREFIX=/usr SYSCONFDIR=/etc UNITDIR="$want_unitdir" \
    PKGCONFIGDIR=/usr/share/pkgconfig | sed 's|^\(/usr/share/man/.*\)$|\1.gz|' >expected.txt
echo /usr/lib/sysusers.d/idemd.conf >>expected.txt
sort -o expected.txt expected.txt
diff -u expected.txt packaged.txt || h_fail "the packages' files differ from make install-list"
h_assert_eq "$(grep -c '^/usr/include/\|^/usr/share/pkgconfig/' paths.idemd || true)" 0 \
    "dev files in the idemd package"

# ---------- install ----------
# One run at a time installs on this machine (test runs of several work trees may overlap).
lockdir=/run/lock
[[ -d $lockdir && -w $lockdir ]] || lockdir=/tmp
exec {lock_fd}>>"$lockdir/idemd-t_deb_package.lock"
flock -w 150 "$lock_fd" || h_fail "another t_deb_package held $lockdir/idemd-t_deb_package.lock for 150 s"
for p in idemd idemd-dev; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) || st=
    [[ -z "$st" || $st == not-installed ]] || h_fail "package $p is on this machine already ($st)"
done
# What the packages would overwrite, and which of their directories exist already.
: >preexisting.txt
while read -r p; do
    if [[ -d "$p" ]]; then # a directory, or a symlink to one (/lib with merged /usr)
        echo "$p" >>preexisting.txt
    elif [[ -e "$p" || -L "$p" ]]; then
        h_fail "$p exists already: the packages would overwrite it"
    fi
done < <(cat paths.idemd paths.dev)
# Files with idemd in their name in the system's directories (not /usr/local, which other
# cases may install into), before the install and after the purge.
snapshot()
{
    find /etc /usr /var -path /usr/local -prune -o -path /var/tmp -prune -o -path /var/cache/apt -prune \
        -o -name '*idemd*' -print 2>/dev/null | sort
}
snapshot >before.txt
had_user=0
getent passwd idemd >/dev/null && had_user=1

apt_get() { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 -y "$@"; }
installed=0
made_conf=0
cleanup()
{
    h_daemon_kill9
    if ((made_conf)); then "${sudo[@]}" rm -f /etc/idemd/idemd.conf; fi
    if ((installed)); then
        apt_get purge idemd idemd-dev >cleanup.log 2>&1 || cat cleanup.log >&2
    fi
    if ((!had_user)) && getent passwd idemd >/dev/null; then
        "${sudo[@]}" userdel idemd
        if getent group idemd >/dev/null; then "${sudo[@]}" groupdel idemd; fi
    fi
    return 0
}
trap cleanup EXIT

installed=1
apt_get install --no-install-recommends "$deb" "$dev" >install.log 2>&1 ||
    { cat install.log; h_fail "apt-get install failed"; }
cat install.log
dpkg -L idemd idemd-dev | sed '/^\/\.$/d; /^$/d' | sort -u >listed.txt
diff -u <(sort -u paths.idemd paths.dev) listed.txt || h_fail "dpkg -L differs from the packages' contents"
while read -r p; do
    [[ -e "$p" ]] || h_fail "$p is listed by dpkg -L but missing"
done <listed.txt

# The alert rules and the Grafana dashboard, as in the tree.
for f in prometheus/idemd-alerts.yml grafana/idemd-dashboard.json; do
    cmp "$H_ROOT/conf/$f" "/usr/share/idemd/${f#*/}" || h_fail "/usr/share/idemd/${f#*/} is not conf/$f"
done
h_assert_eq "$(/usr/sbin/idemd --version)" "idemd $ver" "installed idemd --version"
grep -q "^idemctl $ver" <<<"$(/usr/sbin/idemctl --version)" || h_fail "installed idemctl --version"
for m in 8:idemd 8:idemctl 5:idemd.conf; do
    h_assert_eq "$(man -w "${m%%:*}" "${m#*:}")" "/usr/share/man/man${m%%:*}/${m#*:}.${m%%:*}.gz" "man -w $m"
done

# The system user, from /usr/lib/sysusers.d/idemd.conf through systemd-sysusers.
pw=$(getent passwd idemd) || h_fail "no user idemd after install"
IFS=: read -r _ _ uid gid _ home shell <<<"$pw"
echo "user idemd: uid $uid gid $gid home $home shell $shell"
sys_uid_max=$(awk '$1 == "SYS_UID_MAX" { print $2 }' /etc/login.defs)
((uid < ${sys_uid_max:-1000})) || h_fail "idemd is no system user (uid $uid)"
h_assert_eq "$(getent group idemd | cut -d: -f3)" "$gid" "group idemd"
h_assert_eq "$home" /nonexistent "idemd's home"
h_assert_eq "$shell" /usr/sbin/nologin "idemd's shell"

# The example config is a conffile, private, and valid with the installed plugin.
grep -q '^ /etc/idemd/idemd.conf.example ' <<<"$(dpkg-query -W -f='${Conffiles}\n' idemd)" ||
    h_fail "/etc/idemd/idemd.conf.example is not a conffile"
h_assert_eq "$(stat -c '%a %U:%G' /etc/idemd/idemd.conf.example)" "640 root:root" "example config mode"
out=$("${sudo[@]}" /usr/sbin/idemd --allow-root --check-config -c /etc/idemd/idemd.conf.example \
    2>example.err) || h_fail "example config: $out $(cat example.err)"
h_assert_eq "$out" "/etc/idemd/idemd.conf.example: configuration OK (1 queue)" "example config"
# As docs/deploying.md says (step 4): a copy root:idemd 0640, checked as the service user.
made_conf=1
"${sudo[@]}" install -m 0640 -o root -g idemd /etc/idemd/idemd.conf.example /etc/idemd/idemd.conf
out=$("${sudo[@]}" runuser -u idemd -- /usr/sbin/idemd --check-config -c /etc/idemd/idemd.conf \
    2>idemd-user.err) || h_fail "as user idemd: $out $(cat idemd-user.err)"
h_assert_eq "$out" "/etc/idemd/idemd.conf: configuration OK (1 queue)" "the config checked as user idemd"
"${sudo[@]}" rm /etc/idemd/idemd.conf
made_conf=0

# The units: in place, naming the installed binary, clean under systemd-analyze verify
# (any output line is a finding), and not enabled.
unitdir=$(dirname "$(grep '/systemd/system/idemd\.service$' listed.txt)")
[[ -d "$unitdir" ]] || h_fail "no idemd.service installed"
h_assert_eq "$unitdir" "$want_unitdir" "the units' directory"
grep -qxF 'ExecStart=/usr/sbin/idemd -c /etc/idemd/idemd.conf' "$unitdir/idemd.service" ||
    h_fail "idemd.service: ExecStart is '$(grep ^ExecStart= "$unitdir/idemd.service")'"
# Documentation= is checked with man -w, not by systemd-analyze (--man=no): systemd-analyze
# runs `man PAGE` with the output to /dev/null, and man-db, run as root with the standard
# width, saves the formatted page in its cache (/var/cache/man/cat5/idemd.conf.5.gz,
# cat8/idemd.8.gz). Those belong to no package, the purge cannot remove them, and man-db
# expires them itself (its daily job deletes cat pages unread for a week); an admin reading
# `man idemd` as root makes the same. man -w only looks the page up, so the machine is left
# as it was found, which the snapshot below checks.
for u in idemd.service idemd@.service; do
    docs=$(sed -n 's/^Documentation=//p' "$unitdir/$u")
    [[ -n "$docs" ]] || h_fail "$u has no Documentation="
    for d in $docs; do
        [[ $d == man:* ]] || continue
        [[ $d =~ ^man:([^()]+)\(([0-9])\)$ ]] || h_fail "$u: Documentation=$d is no man:PAGE(SECTION)"
        h_assert_eq "$(man -w "${BASH_REMATCH[2]}" "${BASH_REMATCH[1]}")" \
            "/usr/share/man/man${BASH_REMATCH[2]}/${BASH_REMATCH[1]}.${BASH_REMATCH[2]}.gz" "$u: man -w for $d"
    done
    rc=0
    out=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify --man=no "$unitdir/$u" 2>&1) || rc=$?
    echo "systemd-analyze verify $unitdir/$u: exit $rc${out:+: $out}"
    if ((rc != 0)) || [[ -n "$out" ]]; then h_fail "systemd-analyze verify $u: exit $rc: $out"; fi
done
[[ "$(readlink -f "$unitdir")" == /usr/lib/systemd/system ]] ||
    h_fail "$unitdir is not /usr/lib/systemd/system (no merged /usr?)"
rc=0
enabled=$(systemctl is-enabled idemd.service 2>&1) || rc=$?
h_assert_eq "$enabled" disabled "systemctl is-enabled idemd.service (exit $rc)"

# pkg-config from the system's own search path.
unset PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
h_assert_eq "$(pkg-config --path idemd)" /usr/share/pkgconfig/idemd.pc "pkg-config --path idemd"
pkg-config --validate idemd || h_fail "idemd.pc does not validate"
h_assert_eq "$(pkg-config --modversion idemd)" "$ver" "pkg-config --modversion idemd"
h_assert_eq "$(pkg-config --variable=plugindir idemd)" /usr/lib/idemd/plugins "plugindir"
h_assert_eq "$(pkg-config --variable=handler_abi idemd)" "$(h_handler_abi)" "handler_abi"

# A plugin outside the tree, against idemd-dev's header only.
# shellcheck disable=SC2046 # a list of flags
h_hello_plugin /usr/include/idemd/handler.h $(pkg-config --cflags idemd "$(h_db_pkg)") -DHELLO_MYSQL_H

# The packaged daemon runs it on the packaged schema: 20 messages, 20 records, queue empty.
db=t_deb_package
q=t_deb_package.q
H_SQL_DIR=/usr/share/idemd/sql h_new_db "$db"
{
    h_conf_common "$db"
    echo "queues = ( { name = \"$q\"; handler = \"$PWD/hello.so\"; retry_delays_ms = [ ]; } );"
} >hello.conf
out=$(/usr/sbin/idemd "${H_ALLOW_ROOT[@]}" --check-config -c hello.conf 2>&1) || h_fail "hello.conf: $out"
IDEMD=/usr/sbin/idemd h_daemon_start hello.conf idemd.log
out=$(h_gen d 1 20 | h_mq publish -r "$q")
h_assert_eq "$out" "published 20 confirmed 20" "publish"
h_wait_sql "SELECT COUNT(*) FROM msg_id_record WHERE consumer = '$q'" 20 30 || h_fail "records"
h_wait_depth "$q" 0 30 || h_fail "queue not drained"
h_daemon_stop || h_fail "the packaged idemd exited with status $? on SIGTERM"

# ---------- purge ----------
apt_get purge idemd idemd-dev >purge.log 2>&1 || { cat purge.log; h_fail "apt-get purge failed"; }
installed=0
cat purge.log
for p in idemd idemd-dev; do
    st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null) || st=
    [[ -z "$st" || $st == not-installed ]] || h_fail "$p is '$st' after purge"
done
left=()
while read -r p; do
    grep -qxF "$p" preexisting.txt && continue
    [[ -e "$p" || -L "$p" ]] && left+=("$p")
done <listed.txt
((${#left[@]} == 0)) || h_fail "purge left ${left[*]}"
snapshot >after.txt
diff -u before.txt after.txt || h_fail "files named *idemd* differ before install and after purge"
# Debian keeps a package's system user on purge (files it owned may remain elsewhere).
getent passwd idemd >/dev/null || h_fail "purge deleted the user idemd"
cleanup
((had_user)) || ! getent passwd idemd >/dev/null || h_fail "the user idemd outlived the cleanup"
echo "t_deb_package: ok"
