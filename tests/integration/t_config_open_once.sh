# t_config_open_once: each config file is opened once, checked on that descriptor and read from it: with a link in a sticky world-writable directory flipped between a trusted file and one others may write, 150 runs of --check-config never read the untrusted one; directories on the path are checked (group-writable refused; in a sticky one, what is on the path must be root's or ours), for the main file and an @include.
q=t_config_open_once.q
conf_body()
{
    h_conf_common t_config_open_once
    echo "queues = ( { name = \"$q\"; handler = \"$H_TEST_PLUGINS/counter.so\"; workers = 1; } );"
}

# check FILE: --check-config's status, then its output, on one line each.
check()
{
    local rc=0 out
    out=$("$IDEMD" "${H_ALLOW_ROOT[@]}" --check-config -c "$1" 2>&1) || rc=$?
    printf '%s\n%s\n' "$rc" "$out"
}

# refused FILE WHY: --check-config exits 1 saying WHY.
refused()
{
    local res rc
    res=$(check "$1")
    rc=$(head -n1 <<<"$res")
    echo "--- $1 (status $rc): $(tail -n +2 <<<"$res")"
    [[ $rc == 1 ]] || h_fail "$1: --check-config exited $rc, expected 1: $res"
    grep -qF -- "$2" <<<"$res" || h_fail "$1: --check-config does not say '$2': $res"
}

# accepted FILE: --check-config exits 0.
accepted()
{
    local res
    res=$(check "$1")
    [[ $(head -n1 <<<"$res") == 0 ]] || h_fail "$1 was refused: $res"
}

# shared/ is like /tmp: root's, sticky, writable by all.
mkdir shared
chmod 1777 shared
conf_body >shared/good.conf
chmod 0640 shared/good.conf
# The untrusted file holds a setting idemd does not know: reading it shows in the output.
{
    echo "untrusted_marker = 1;"
    conf_body
} >shared/evil.conf
chmod 0666 shared/evil.conf
here=$(realpath .)
accepted shared/good.conf
refused shared/evil.conf "shared/evil.conf: refused: $here/shared/evil.conf is writable by others (mode 0666)"
ln -s good.conf shared/link.conf
accepted shared/link.conf

# The flipper swaps the link (rename: it is always there) until flip.on goes or this shell ends.
touch flip.on
python3 - shared "$$" <<'PY' &
import os, sys
d, parent = sys.argv[1], int(sys.argv[2])
n = 0
while True:
    if n % 256 == 0:
        if not os.path.exists("flip.on"):
            break
        try:
            os.kill(parent, 0)
        except OSError:
            break
    target = "evil.conf" if n % 2 == 0 else "good.conf"
    tmp = os.path.join(d, ".flip")
    os.symlink(target, tmp)
    os.rename(tmp, os.path.join(d, "link.conf"))
    n += 1
PY
flipper=$!
runs=150 good=0 refusals=0 bad=0 other=0
for ((i = 0; i < runs; i++)); do
    res=$(check shared/link.conf)
    rc=$(head -n1 <<<"$res")
    if grep -qF untrusted_marker <<<"$res"; then
        bad=$((bad + 1))
        echo "--- run $i read the untrusted file: $res"
    elif [[ $rc == 0 ]]; then
        good=$((good + 1))
    elif [[ $rc == 1 ]] && grep -qF "shared/link.conf: refused: $here/shared/evil.conf is writable by others" <<<"$res"; then
        refusals=$((refusals + 1))
    else
        other=$((other + 1))
        echo "--- run $i: unexpected: $res"
    fi
done
rm -f flip.on
wait "$flipper" || h_fail "the flipper failed"
echo "--- $runs runs of --check-config while the link flips: $good read the trusted file, $refusals refused the untrusted one, $bad read the untrusted one, $other other"
h_assert_eq "$bad" 0 "runs that read the file others may write (through the flipped link)"
h_assert_eq "$other" 0 "runs with another outcome"
((good > 0 && refusals > 0)) || h_fail "the link did not flip under the runs ($good good, $refusals refused)"

# Directories: a group-writable one on the path is refused.
mkdir gw
chmod 0775 gw
conf_body >gw/idemd.conf
chmod 0640 gw/idemd.conf
refused gw/idemd.conf "gw/idemd.conf: refused: directory $here/gw is writable by group (mode 0775)"
chmod 0755 gw
accepted gw/idemd.conf

# In the sticky directory, what is on the path must be root's (or the user idemd runs as):
# a link another user owns could be pointed anywhere by them, a directory of theirs filled.
ln -s good.conf shared/their.conf
chown -h nobody shared/their.conf
refused shared/their.conf "shared/their.conf: refused: $here/shared/their.conf is owned by uid $(id -u nobody), in directory $here/shared that others may write to (mode 1777)"
mkdir shared/sub
conf_body >shared/sub/idemd.conf
chmod 0640 shared/sub/idemd.conf
accepted shared/sub/idemd.conf
chown nobody shared/sub
refused shared/sub/idemd.conf "shared/sub/idemd.conf: refused: $here/shared/sub is owned by uid $(id -u nobody), in directory $here/shared that others may write to"

# The same for an @include, named with the line that includes it.
conf_body | grep -v '^queues = ' >main.conf
echo '@include "shared/their.inc"' >>main.conf
line=$(wc -l <main.conf)
conf_body | grep '^queues = ' >shared/queues.inc
chmod 0640 main.conf shared/queues.inc
ln -s queues.inc shared/their.inc
accepted main.conf
chown -h nobody shared/their.inc
refused main.conf "main.conf:$line: @include: shared/their.inc: refused: $here/shared/their.inc is owned by uid $(id -u nobody), in directory $here/shared that others may write to"
echo "t_config_open_once: ok"
