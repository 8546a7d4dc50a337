#!/usr/bin/env bash
# Packaging tests (issue 13), run by scripts/test.sh as root on Debian 12:
#
#   1. build the .deb and the .rpm (scripts/package.sh) and look inside:
#      dpkg-deb -I/-c, lintian (no errors), rpm -qip/-qlp/--configfiles/
#      --requires/--recommends; man pages, completions and the Grafana
#      dashboard (/usr/share/rlun/grafana) in both, equal to the committed
#      (fresh) ones;
#   2. unpack the .rpm into a scratch root and run its binary; install it
#      into another with rpm itself (-i, -V, -U keeps an edited config, -e);
#   3. install the .deb with apt: rlun --version, man rlun, bash completion,
#      systemd-analyze verify on the three installed units, the README's
#      main job (info, cp both ways, mount + read/write + umount) against a
#      loopback tgtd, the mount with --metrics-listen: the installed
#      dashboard is JSON and every rlun_ name in its queries is on that
#      /metrics (dashboard_names.py); config errors (unknown target, missing and
#      world-readable secret file, malformed TOML with its line);
#   4. readiness: the mount and serve units' commands, as the installed
#      units spell them, for a target named in /etc/rlun/rlun.toml, under a
#      test NOTIFY_SOCKET (notify.py): READY=1 only once the mount / socket
#      is usable, STOPPING=1 on SIGTERM; the attach unit's ExecStop picks its
#      own device (attach itself needs /dev/nbd: the VM lab);
#   5. as an unprivileged user created here: info, cp, bench, mount through
#      the setuid fusermount3 with a read and a write, umount, serve --socket
#      in a directory the user owns, attach refused with the exact message;
#   6. apt reinstall keeps the edited /etc/rlun/rlun.toml; apt purge leaves
#      no file of the package behind.
#
#   tests/packaging/run.sh          (root; RLUN_PACKAGE_NO_BUILD=1 to package
#                                    the existing target/release/rlun)
# Prints one line per check and a final "N passed, N failed" line; exits
# non-zero when a check failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   - $*"; }
bad() { failed=$((failed + 1)); echo "FAIL - $*"; }
# check NAME COMMAND...: COMMAND must succeed.
check() {
    local name=$1
    shift
    local out
    if out=$("$@" 2>&1); then ok "$name"; else
        bad "$name"
        printf '%s\n' "$out" | tail -n 20 | sed 's/^/     | /'
    fi
}
# expect_err NAME PATTERN COMMAND...: COMMAND must fail and say PATTERN (ERE).
expect_err() {
    local name=$1 pattern=$2
    shift 2
    local out rc=0
    out=$("$@" 2>&1) || rc=$?
    if [ "$rc" -ne 0 ] && grep -Eq -- "$pattern" <<<"$out"; then ok "$name"; else
        bad "$name (exit $rc, wanted /$pattern/)"
        printf '%s\n' "$out" | tail -n 10 | sed 's/^/     | /'
    fi
}
finish() {
    echo "packaging: $passed passed, $failed failed"
    [ "$failed" -eq 0 ]
    exit $?
}

if [ "$(id -u)" -ne 0 ]; then
    echo "tests/packaging/run.sh needs root (apt install, useradd)" >&2
    exit 2
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
work=$(mktemp -d /tmp/rlun-pkgtest.XXXXXX)
chmod 755 "$work"
USER_NAME=rlun-pkgtest
PORT=${RLUN_PKGTEST_PORT:-3295}
CTL=${RLUN_PKGTEST_CTL:-3295}
IQN=iqn.2026-11.org.rlun:pkgtest
TGTD_PID=
# The instance name of the units run here, a target in /etc/rlun/rlun.toml.
UNIT_NAME=pkgtest
FAKE_NBD=99
FAKE_PID=
# The mode of /dev/fuse before section 5 changed it, until it is put back.
FUSE_MODE=
cleanup() {
    [ -n "$FUSE_MODE" ] && chmod "$FUSE_MODE" /dev/fuse
    for mp in "$work/mnt" "$work/user/mnt" /run/rlun/mount/$UNIT_NAME; do
        mountpoint -q "$mp" 2>/dev/null && fusermount3 -uz "$mp"
    done
    rmdir /run/rlun/mount/$UNIT_NAME 2>/dev/null
    rm -f /run/rlun/nbd/$UNIT_NAME.sock "/run/rlun/%2Fdev%2Fnbd$FAKE_NBD.pid"
    [ -n "$FAKE_PID" ] && kill "$FAKE_PID" 2>/dev/null
    [ -n "$TGTD_PID" ] && { kill -9 "$TGTD_PID" && wait "$TGTD_PID"; } 2>/dev/null
    id "$USER_NAME" >/dev/null 2>&1 && userdel "$USER_NAME" 2>/dev/null
    dpkg-query -W -f='${db:Status-Status}' rlun 2>/dev/null | grep -q . &&
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -q rlun >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT

# ---------------------------------------------------------------- 1. build
echo "== building the packages"
if ! scripts/package.sh deb >"$work/deb.log" 2>&1; then
    bad "scripts/package.sh deb"
    tail -n 30 "$work/deb.log"
    finish
fi
deb=$(ls target/debian/rlun_"$version"-1_*.deb)
ok "built $deb"
# The .rpm checks are skipped (as failures) when it cannot be built; the
# .deb ones still run.
rpm=
if RLUN_PACKAGE_NO_BUILD=1 scripts/package.sh rpm >"$work/rpm.log" 2>&1; then
    rpm=$(ls target/rpm/rlun-"$version"-1.*.rpm)
    ok "built $rpm"
else
    bad "scripts/package.sh rpm"
    tail -n 30 "$work/rpm.log" | sed 's/^/     | /'
fi

echo "== .deb contents"
info=$(dpkg-deb -I "$deb")
check "deb: Package rlun, Version $version-1" grep -Eq "^ Version: $version-1$" <<<"$info"
check "deb: Depends has fuse3 and kmod" grep -Eq '^ Depends: .*fuse3.*kmod' <<<"$info"
check "deb: Recommends libibverbs1, librdmacm1" grep -Eq '^ Recommends: libibverbs1, librdmacm1' <<<"$info"
check "deb: rdma-core is no hard dependency (dlopened)" bash -c "! grep -E '^ (Depends|Pre-Depends):' <<<'$info' | grep -Eq 'libibverbs|librdmacm'"
check "deb: /etc/rlun/rlun.toml is a conffile" \
    bash -c "dpkg-deb --ctrl-tarfile '$deb' | tar -xO ./conffiles | grep -qx /etc/rlun/rlun.toml"
list=$(dpkg-deb -c "$deb")
for f in ./usr/bin/rlun ./usr/share/man/man8/rlun.8.gz ./usr/share/man/man8/rlun-mount.8.gz \
    ./usr/share/man/man8/rlun-serve.8.gz ./usr/share/man/man5/rlun.toml.5.gz \
    ./usr/share/bash-completion/completions/rlun ./usr/share/zsh/vendor-completions/_rlun \
    ./usr/share/fish/vendor_completions.d/rlun.fish ./etc/rlun/rlun.toml \
    ./lib/systemd/system/rlun-mount@.service ./lib/systemd/system/rlun-serve@.service \
    ./lib/systemd/system/rlun-attach@.service ./lib/systemd/system/rlun-attach-ublk@.service ./usr/share/doc/rlun/copyright ./usr/share/doc/rlun/changelog.Debian.gz \
    ./usr/share/rlun/grafana/rlun-dashboard.json; do
    check "deb contains $f" grep -Eq " $f\$" <<<"$list"
done
check "deb: rlun.toml has mode 600" grep -Eq '^-rw------- (root/root|0/0) .* \./etc/rlun/rlun\.toml$' <<<"$list"
mkdir -p "$work/deb"
dpkg-deb -x "$deb" "$work/deb"
for c in rlun.bash:usr/share/bash-completion/completions/rlun \
    _rlun:usr/share/zsh/vendor-completions/_rlun rlun.fish:usr/share/fish/vendor_completions.d/rlun.fish; do
    check "deb: ${c%%:*} is the committed completion" cmp "packaging/completions/${c%%:*}" "$work/deb/${c#*:}"
done
for page in man/*.[0-9]; do
    sec=${page##*.}
    check "deb: $page gzipped as the committed page" \
        bash -c "zcat '$work/deb/usr/share/man/man$sec/$(basename "$page").gz' | cmp - '$page'"
done
for page in "$work"/deb/usr/share/man/man*/*.gz; do
    check "deb: whatis can index $(basename "$page") (lexgrog)" lexgrog "$page"
done
check "deb: the Grafana dashboard is the committed one" cmp packaging/grafana/rlun-dashboard.json "$work/deb/usr/share/rlun/grafana/rlun-dashboard.json"
check "deb: the binary is stripped" bash -c "! file -L '$work/deb/usr/bin/rlun' | grep -q 'not stripped'"

echo "== lintian"
lintian --tag-display-limit 0 "$deb" >"$work/lintian.txt" 2>&1
if grep -q '^E: ' "$work/lintian.txt"; then
    bad "lintian: errors"
    sed 's/^/     | /' "$work/lintian.txt"
else
    ok "lintian: no errors ($(grep -c '^W: ' "$work/lintian.txt") warnings)"
    sed -n 's/^\(W: .*\)/     | \1/p' "$work/lintian.txt"
fi

if [ -n "$rpm" ]; then
echo "== .rpm contents"
check "rpm: Version $version, Release 1" bash -c "rpm -qip '$rpm' | grep -Eq '^Version *: $version\$' && rpm -qip '$rpm' | grep -Eq '^Release *: 1\$'"
check "rpm: /etc/rlun/rlun.toml is a config file" bash -c "rpm -qp --configfiles '$rpm' | grep -qx /etc/rlun/rlun.toml"
check "rpm: noreplace, mode 600" bash -c "rpm -qp --queryformat '[%{FILENAMES} %{FILEFLAGS:fflags} %{FILEMODES:perms}\n]' '$rpm' | grep -Eq '^/etc/rlun/rlun.toml cn -rw-------\$'"
check "rpm: requires fuse3 and kmod" bash -c "rpm -qp --requires '$rpm' | grep -qx fuse3 && rpm -qp --requires '$rpm' | grep -qx kmod"
check "rpm: rdma-core is no hard requirement (dlopened)" bash -c "! rpm -qp --requires '$rpm' | grep -Eq 'libibverbs|librdmacm'"
check "rpm: recommends libibverbs and librdmacm" bash -c "rpm -qp --recommends '$rpm' | grep -qx libibverbs && rpm -qp --recommends '$rpm' | grep -qx librdmacm"
rlist=$(rpm -qlp "$rpm")
for f in /usr/bin/rlun /usr/share/man/man8/rlun.8.gz /usr/share/man/man8/rlun-serve.8.gz \
    /usr/share/man/man5/rlun.toml.5.gz /usr/share/bash-completion/completions/rlun \
    /usr/share/zsh/site-functions/_rlun /usr/share/fish/vendor_completions.d/rlun.fish \
    /usr/lib/systemd/system/rlun-mount@.service /usr/lib/systemd/system/rlun-serve@.service \
    /usr/lib/systemd/system/rlun-attach@.service /usr/lib/systemd/system/rlun-attach-ublk@.service /usr/share/licenses/rlun/copyright \
    /usr/share/rlun/grafana/rlun-dashboard.json; do
    check "rpm contains $f" grep -qx "$f" <<<"$rlist"
done

echo "== .rpm unpacked into a scratch root"
mkdir -p "$work/rpmroot"
(cd "$work/rpmroot" && rpm2cpio "$ROOT/$rpm" | cpio -idm --quiet)
check "rpm: its rlun --version says $version" bash -c "'$work/rpmroot/usr/bin/rlun' --version | grep -qx 'rlun $version'"
check "rpm: its rlun --help lists attach and serve" bash -c "'$work/rpmroot/usr/bin/rlun' --help | grep -q '^  attach ' && '$work/rpmroot/usr/bin/rlun' --help | grep -q '^  serve '"
check "rpm: its completions are the committed ones" bash -c "cmp '$work/rpmroot/usr/share/bash-completion/completions/rlun' packaging/completions/rlun.bash && cmp '$work/rpmroot/usr/share/zsh/site-functions/_rlun' packaging/completions/_rlun && cmp '$work/rpmroot/usr/share/fish/vendor_completions.d/rlun.fish' packaging/completions/rlun.fish"
check "rpm: its units are the committed ones" bash -c "for u in mount serve attach; do cmp '$work/rpmroot/usr/lib/systemd/system/rlun-'\$u'@.service' packaging/systemd/rlun-\$u@.service || exit 1; done"
check "rpm: its Grafana dashboard is the committed one" cmp "$work/rpmroot/usr/share/rlun/grafana/rlun-dashboard.json" packaging/grafana/rlun-dashboard.json
check "rpm: its man page is the committed one" bash -c "zcat '$work/rpmroot/usr/share/man/man8/rlun.8.gz' | cmp - man/rlun.8"

echo "== .rpm installed by rpm into a scratch root"
# rpm itself, with its own database under the scratch root (Debian's rpm
# keeps it in ~/.rpmdb, so under root/). --nodeps: the
# root holds no glibc, fuse3 or kmod for the requirements to name.
rr=$work/rpminst
mkdir -p "$rr"
check "rpm -i: installs" bash -c "rpm --root '$rr' --initdb && rpm --root '$rr' -i --nodeps '$ROOT/$rpm' 2>/dev/null && rpm --root '$rr' -q rlun | grep -qx 'rlun-$version-1.*'"
check "rpm -V: every installed file as packaged (modes, digests)" bash -c "out=\$(rpm --root '$rr' -V --nodeps rlun 2>/dev/null); [ -z \"\$out\" ] || { echo \"\$out\"; exit 1; }"
check "rpm -i: /etc/rlun/rlun.toml mode 600" bash -c "[ \"\$(stat -c %a '$rr/etc/rlun/rlun.toml')\" = 600 ]"
echo '# edited by the packaging test' >>"$rr/etc/rlun/rlun.toml"
check "rpm -U --replacepkgs: the edited config stays (noreplace)" bash -c "rpm --root '$rr' -U --replacepkgs --nodeps '$ROOT/$rpm' 2>/dev/null && tail -n1 '$rr/etc/rlun/rlun.toml' | grep -qx '# edited by the packaging test'"
check "rpm -e: no file of the package left but the edited config (.rpmsave)" bash -c "rpm --root '$rr' -e rlun 2>/dev/null; left=\$(find '$rr' -path '$rr/root' -prune -o -path '$rr/var' -prune -o -type f -print); [ \"\$left\" = '$rr/etc/rlun/rlun.toml.rpmsave' ] || { echo \"\$left\"; exit 1; }"
fi

# --------------------------------------------------------------- 3. install
echo "== apt install ./$(basename "$deb")"
if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "./$deb" >"$work/apt.log" 2>&1; then
    bad "apt install"
    tail -n 30 "$work/apt.log"
    finish
fi
ok "apt install"
check "installed: rlun --version" bash -c "/usr/bin/rlun --version | grep -qx 'rlun $version'"
check "installed: man rlun" bash -c "MANWIDTH=80 man -P cat rlun 2>/dev/null | grep -q 'rlun-mount(8)'"
check "installed: man 5 rlun.toml has the SYSTEMD section" bash -c "man -P cat 5 rlun.toml 2>/dev/null | grep -q 'rlun-mount@<name>.service'"
check "installed: bash completion" bash -c "source /usr/share/bash-completion/completions/rlun && complete -p rlun | grep -q ' rlun\$'"
check "installed: /etc/rlun/rlun.toml mode 600 root" bash -c "[ \"\$(stat -c %a:%U /etc/rlun/rlun.toml)\" = 600:root ]"
# systemd-analyze exits 0 on unknown keys and bad values (it only warns):
# the check wants no output at all.
for unit in mount serve attach attach-ublk; do
    check "installed: systemd-analyze verify rlun-$unit@store.service: no error, no warning" \
        bash -c 'out=$(systemd-analyze verify --man=no "$1" 2>&1) && [ -z "$out" ] || { echo "$out"; exit 1; }' \
        _ /lib/systemd/system/rlun-$unit@store.service
done

echo "== the README's main job with the installed binary against a loopback tgtd"
truncate -s 64M "$work/lun.img"
head -c 16M /dev/urandom >"$work/image"
tgtd -f -C "$CTL" --iscsi portal=127.0.0.1:$PORT >"$work/tgtd.log" 2>&1 &
TGTD_PID=$!
for _ in $(seq 100); do tgtadm -C "$CTL" --op show --mode sys >/dev/null 2>&1 && break; sleep 0.1; done
tgtadm -C "$CTL" --lld iscsi --op new --mode target --tid 1 -T "$IQN" &&
    tgtadm -C "$CTL" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$work/lun.img" &&
    tgtadm -C "$CTL" --lld iscsi --op bind --mode target --tid 1 -I ALL ||
    { bad "tgtd on 127.0.0.1:$PORT"; cat "$work/tgtd.log"; finish; }
URL=iscsi://127.0.0.1:$PORT/$IQN/1
R=/usr/bin/rlun
check "installed: rlun info" bash -c "$R info '$URL' | grep -q 67108864"
check "installed: rlun cp image -> LUN" $R cp --no-progress "$work/image" "$URL"
check "installed: rlun cp LUN -> file, same bytes" bash -c "$R cp --no-progress '$URL' '$work/back' && cmp -n 16777216 '$work/image' '$work/back'"
mkdir -p "$work/mnt"
METRICS=127.0.0.1:$((PORT + 1))
check "installed: rlun mount --daemon --metrics-listen $METRICS" $R mount --daemon --metrics-listen "$METRICS" "$URL" "$work/mnt"
check "installed: read through the mount" cmp -n 16777216 "$work/image" "$work/mnt/lun1"
check "installed: the Grafana dashboard is JSON and every rlun_ metric it queries is on /metrics" \
    python3 tests/packaging/dashboard_names.py /usr/share/rlun/grafana/rlun-dashboard.json "http://$METRICS/metrics"
check "installed: write through the mount" dd if=/dev/zero of="$work/mnt/lun1" bs=1M count=1 seek=2 conv=notrunc,fsync status=none
check "installed: rlun umount" $R umount "$work/mnt"
check "installed: the write reached the target" bash -c "cmp -n 1048576 -i 2097152:0 '$work/lun.img' /dev/zero"

echo "== config errors (installed binary)"
cfg=$work/cfg
mkdir -p "$cfg"
printf '[targets.store]\nurl = "%s"\nchap_user = "u"\nchap_secret_file = "store.secret"\n' "$URL" >"$cfg/rlun.toml"
chmod 600 "$cfg/rlun.toml"
expect_err "config: unknown target name (info)" "no target named 'nope' in config file $cfg/rlun.toml.*store" \
    $R --config "$cfg/rlun.toml" info nope
mkdir -p "$work/mnt-nope"
expect_err "config: unknown target name (mount, as rlun-mount@nope runs it)" "no target named 'nope'.*store" \
    $R --config "$cfg/rlun.toml" mount nope "$work/mnt-nope"
expect_err "config: missing secret file" "cannot read secret file $cfg/store.secret" \
    $R --config "$cfg/rlun.toml" info store
echo secret123456 >"$cfg/store.secret"
chmod 644 "$cfg/store.secret"
expect_err "config: world-readable secret file, with the fix" "readable by .*chmod 600 $cfg/store.secret" \
    $R --config "$cfg/rlun.toml" info store
printf '[defaults]\nconnect_timeout_secs = 10\n[targets.store\nurl = "x"\n' >"$cfg/bad.toml"
expect_err "config: malformed TOML points at its line" "bad.toml: .*line 3" \
    $R --config "$cfg/bad.toml" info store

# ------------------------------------------------------------- 4. readiness
echo "== readiness: the units' commands under a test NOTIFY_SOCKET"
# A target named in the packaged config file, as an admin would add it
# (section 6 checks that a reinstall keeps this edit and a purge removes it).
printf '\n[targets.%s]\nurl = "%s"\n' "$UNIT_NAME" "iscsi://127.0.0.1:$PORT/$IQN" >>/etc/rlun/rlun.toml
# KEY of the installed unit rlun-KIND@.service, with %i = $UNIT_NAME.
unit_line() { sed -n "s/^$2=//p" "/lib/systemd/system/rlun-$1@.service" | sed "s/%i/$UNIT_NAME/g"; }
# The mount unit: its ExecStartPre makes the mount point, then ExecStart.
pre=$(unit_line mount ExecStartPre)
check "mount unit: ExecStartPre ($pre)" $pre
read -r -a cmd <<<"$(unit_line mount ExecStart)"
check "mount unit: ${cmd[*]}: READY=1 once the mount reads, STOPPING=1 on SIGTERM" \
    python3 tests/packaging/notify.py mount "/run/rlun/mount/$UNIT_NAME" "/run/rlun/mount/$UNIT_NAME/lun1" -- "${cmd[@]}"
rmdir "/run/rlun/mount/$UNIT_NAME" 2>/dev/null
# The serve unit: systemd makes /run/rlun/nbd (RuntimeDirectory=rlun/nbd).
check "serve unit: RuntimeDirectory=rlun/nbd" grep -qx 'RuntimeDirectory=rlun/nbd' /lib/systemd/system/rlun-serve@.service
mkdir -p /run/rlun/nbd
read -r -a cmd <<<"$(unit_line serve ExecStart)"
check "serve unit: ${cmd[*]}: READY=1 once the socket greets, STOPPING=1 on SIGTERM" \
    python3 tests/packaging/notify.py nbd "/run/rlun/nbd/$UNIT_NAME.sock" -- "${cmd[@]}"
# The attach unit: its command needs /dev/nbd (VM lab); here its ExecStop,
# as systemd expands it (${MAINPID} the main pid, $$ a dollar, the "-"
# prefix dropped), must sync exactly the device of its own main process:
# a pid file for /dev/nbd$FAKE_NBD held by a stand-in main process.
sleep 300 &
FAKE_PID=$!
sleep 1000 &
other_pid=$!
mkdir -p /run/rlun
echo "$FAKE_PID" >"/run/rlun/%2Fdev%2Fnbd$FAKE_NBD.pid"
echo "$other_pid" >"/run/rlun/%2Fdev%2Fnbd$((FAKE_NBD + 1)).pid"
stop=$(unit_line attach ExecStop)
stop=${stop#-}
stop=${stop//'${MAINPID}'/$FAKE_PID}
stop=${stop//'$$'/'$'}
stop_out=$(eval "$stop" 2>&1)
check "attach unit: ExecStop syncs its own device /dev/nbd$FAKE_NBD and no other" \
    bash -c "grep -q \"/dev/nbd$FAKE_NBD'\" <<<\"\$1\" && ! grep -q \"/dev/nbd$((FAKE_NBD + 1))\" <<<\"\$1\"" _ "$stop_out"
kill "$other_pid" 2>/dev/null
rm -f "/run/rlun/%2Fdev%2Fnbd$((FAKE_NBD + 1)).pid"

# -------------------------------------------------------------- 5. non-root
echo "== as the unprivileged user $USER_NAME"
# A user left by an interrupted run is made anew.
id "$USER_NAME" >/dev/null 2>&1 && userdel "$USER_NAME"
useradd --system --no-create-home --home-dir "$work/user" --shell /bin/bash "$USER_NAME"
mkdir -p "$work/user/mnt"
chown -R "$USER_NAME:" "$work/user"
as_user() { setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups --reset-env -- "$@"; }
check "user: is not root" bash -c "[ \"\$(setpriv --reuid=$USER_NAME --regid=$USER_NAME --init-groups id -u)\" != 0 ]"
as_user $R info "$URL" >"$work/user-info.txt" 2>&1
check "user: rlun info (root's /etc/rlun/rlun.toml unreadable: a warning, not an error)" \
    bash -c "grep -q 67108864 '$work/user-info.txt' && grep -q 'not readable by this user' '$work/user-info.txt'"
check "user: rlun cp LUN -> own file" bash -c "setpriv --reuid=$USER_NAME --regid=$USER_NAME --init-groups --reset-env $R cp --no-progress '$URL' '$work/user/copy' && cmp -n 16777216 '$work/user/copy' '$work/lun.img'"
check "user: rlun bench" bash -c "setpriv --reuid=$USER_NAME --regid=$USER_NAME --init-groups --reset-env $R bench '$URL' --duration 1s --size 16M | grep -Eiq 'iops|MB/s|MiB/s'"
# fusermount3 opens /dev/fuse with the user's permissions: where no udev
# makes it 0666 (a container, a CI runner) it is 0600 root and no user can
# mount; rlun must say so and name the fix. Both modes are checked, and the
# original comes back afterwards (or in cleanup).
FUSE_MODE=$(stat -c %a /dev/fuse)
chmod 0600 /dev/fuse
expect_err "user: with /dev/fuse 0600, rlun mount says why and names the fix" \
    'closed to uid [0-9]+, and fusermount3 opens it with the user.s permissions.*chmod 0666 /dev/fuse' \
    as_user $R mount "$URL" "$work/user/mnt"
chmod 0666 /dev/fuse
check "user: with /dev/fuse 0666, rlun mount through setuid fusermount3" as_user $R mount --daemon "$URL" "$work/user/mnt"
check "user: the mount is the user's" bash -c "findmnt -no OPTIONS '$work/user/mnt' | grep -q user_id=$(id -u "$USER_NAME")"
check "user: read through the mount" as_user cmp -n 1048576 "$work/image" "$work/user/mnt/lun1"
check "user: write through the mount" as_user dd if=/dev/urandom of="$work/user/mnt/lun1" bs=64k count=16 seek=64 conv=notrunc,fsync status=none
as_user dd if="$work/user/mnt/lun1" of="$work/user/written" bs=64k count=16 skip=64 status=none
check "user: rlun umount" as_user $R umount "$work/user/mnt"
check "user: the write reached the target" cmp -n 1048576 -i 4194304:0 "$work/lun.img" "$work/user/written"
chmod "$FUSE_MODE" /dev/fuse
FUSE_MODE=
# setpriv execs rlun: $! is rlun's pid, so SIGTERM reaches rlun itself.
setpriv --reuid="$USER_NAME" --regid="$USER_NAME" --init-groups --reset-env -- \
    $R serve "$URL" --socket "$work/user/nbd.sock" >"$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 150); do
    as_user nbdinfo --size "nbd+unix:///lun1?socket=$work/user/nbd.sock" >/dev/null 2>&1 && break
    sleep 0.2
done
check "user: rlun serve --socket in the user's dir answers nbdinfo" \
    bash -c "setpriv --reuid=$USER_NAME --regid=$USER_NAME --init-groups nbdinfo --size 'nbd+unix:///lun1?socket=$work/user/nbd.sock' | grep -qx 67108864"
check "user: the socket is the user's, mode 600" bash -c "[ \"\$(stat -c %a:%U '$work/user/nbd.sock')\" = 600:$USER_NAME ]"
kill -TERM "$serve_pid" 2>/dev/null
serve_rc=0
wait "$serve_pid" || serve_rc=$?
check "user: rlun serve stops cleanly on SIGTERM (exit $serve_rc)" test "$serve_rc" -eq 0
expect_err "user: rlun attach says it needs root" '^rlun: attaching NBD devices needs root \(CAP_SYS_ADMIN\)$' \
    as_user $R attach "$URL"

# ------------------------------------------------------ 6. reinstall, purge
echo "== apt reinstall keeps the edited config file; apt purge"
check "apt reinstall" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --reinstall --no-install-recommends "./$deb"
check "reinstalled: /etc/rlun/rlun.toml keeps [targets.$UNIT_NAME], mode 600" \
    bash -c "grep -qx '\[targets.$UNIT_NAME\]' /etc/rlun/rlun.toml && [ \"\$(stat -c %a /etc/rlun/rlun.toml)\" = 600 ]"
check "apt remove keeps the config file (policy: only purge removes conffiles)" \
    bash -c "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q rlun >/dev/null && [ ! -e /usr/bin/rlun ] && grep -qx '\[targets.$UNIT_NAME\]' /etc/rlun/rlun.toml"
check "apt purge" env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q rlun
check "purged: dpkg knows no rlun" bash -c "! dpkg-query -W -f='\${db:Status-Status}' rlun 2>/dev/null | grep -q ."
# Every file and directory of the package is gone, but the directories
# other packages share (/usr/share/man/man8, ...), which dpkg keeps.
left=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\.||; s|/$||' | while read -r f; do
    [ -n "$f" ] && [ -e "$f" ] && ! [ -d "$f" ] && echo "$f"
done)
check "purged: no file of the package is left${left:+ (left: $left)}" test -z "$left"
for d in /etc/rlun /usr/share/doc/rlun; do
    check "purged: $d is gone" test ! -e "$d"
done

finish
