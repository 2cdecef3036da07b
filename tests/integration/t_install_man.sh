# t_install_man: idemd(8) and idemd.conf(5) render without warnings, installed too, and cover every option and setting.
command -v groff >/dev/null || h_fail "groff is missing (Debian package groff-base)"
command -v man >/dev/null || h_fail "man is missing (Debian package man-db)"
export LC_ALL=C.UTF-8 MANWIDTH=80

make -s -C "$H_ROOT" man-check || h_fail "make man-check found groff warnings"

root=$PWD/root
make -s -C "$H_ROOT" install-man DESTDIR="$root" PREFIX=/usr || h_fail "make install-man failed"
for page in "$H_ROOT/docs/idemd.8" "$H_ROOT/docs/idemd.conf.5" \
    "$root/usr/share/man/man8/idemd.8" "$root/usr/share/man/man5/idemd.conf.5"; do
    name=${page##*/}
    man --warnings -l "$page" >"$name.txt" 2>"$name.err" || h_fail "man -l $page failed: $(cat "$name.err")"
    [[ ! -s "$name.err" ]] || h_fail "man --warnings -l $page: $(cat "$name.err")"
    (($(wc -l <"$name.txt") > 50)) || h_fail "$page renders to $(wc -l <"$name.txt") lines only"
done
grep -q '/usr/lib/idemd/plugins/' "$root/usr/share/man/man8/idemd.8" ||
    h_fail "installed idemd.8 does not name the installed plugin directory"

# Every long option of src/main.c is in idemd(8).
mapfile -t opts < <(sed -n 's/^ *{"\([a-z-]*\)", *\(no\|required\|optional\)_argument.*/\1/p' "$H_ROOT/src/main.c")
((${#opts[@]} >= 5)) || h_fail "found only ${#opts[@]} options in src/main.c"
for o in "${opts[@]}"; do
    grep -qF -- "\\-\\-${o//-/\\-}" "$H_ROOT/docs/idemd.8" || h_fail "idemd.8 does not document --$o"
done
echo "options documented: ${opts[*]}"

# idemctl(8) renders (installed too) and documents every long option of src/idemctl.c.
for page in "$H_ROOT/docs/idemctl.8" "$root/usr/share/man/man8/idemctl.8"; do
    man --warnings -l "$page" >idemctl.txt 2>idemctl.err || h_fail "man -l $page failed: $(cat idemctl.err)"
    [[ ! -s idemctl.err ]] || h_fail "man --warnings -l $page: $(cat idemctl.err)"
    (($(wc -l <idemctl.txt) > 100)) || h_fail "$page renders to $(wc -l <idemctl.txt) lines only"
done
mapfile -t opts < <(grep -o '{"[a-z-]*", *\(no\|required\|optional\)_argument' "$H_ROOT/src/idemctl.c" | cut -d'"' -f2)
((${#opts[@]} >= 15)) || h_fail "found only ${#opts[@]} options in src/idemctl.c"
for o in "${opts[@]}"; do
    grep -qF -- "\\-\\-${o//-/\\-}" "$H_ROOT/docs/idemctl.8" || h_fail "idemctl.8 does not document --$o"
done
echo "idemctl options documented: ${opts[*]}"

# Every setting of the reference in docs/configuration.md (generated from src/conf.c's
# table) is named in bold in the matching section of idemd.conf(5).
awk '/^## Reference/ { on = 1 } on && /^### / { sec = substr($0, 5) }
     on && /^\| `/ { split($0, a, "`"); print sec "\t" a[2] }' "$H_ROOT/docs/configuration.md" >settings.txt
(($(wc -l <settings.txt) >= 40)) || h_fail "read only $(wc -l <settings.txt) settings from docs/configuration.md"
awk '/^\.SH / { sh = $2; next }
     /^\.BR? / || /\\fB/ { l = $0; gsub(/\\f[BIRP]|\\\(dq/, " ", l); n = split(l, w, /[^A-Za-z0-9_]+/);
                           for (i = 1; i <= n; i++) if (w[i] != "") print sh "\t" w[i] }' \
    "$H_ROOT/docs/idemd.conf.5" | sort -u >bold.txt
missing=0
while IFS=$'\t' read -r sec name; do
    case $sec in
    daemon*) sh=DAEMON ;;
    broker*) sh=BROKER ;;
    database*) sh=DATABASE ;;
    queues*) sh=QUEUES ;;
    *) sh= ;;
    esac
    if [[ -n "$sh" ]]; then
        grep -qxF "$sh"$'\t'"$name" bold.txt && continue
    else
        grep -qxF "$name" <<<"$(cut -f2 bold.txt)" && continue
    fi
    echo "idemd.conf.5: $sec.$name is not documented${sh:+ in section $sh}"
    missing=$((missing + 1))
done <settings.txt
((missing == 0)) || h_fail "$missing setting(s) of docs/configuration.md missing from idemd.conf.5"
echo "settings documented: $(wc -l <settings.txt)"
echo "t_install_man: ok"
