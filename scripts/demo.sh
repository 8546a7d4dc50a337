#!/usr/bin/env bash
# rlun's main job on a fresh machine, end to end:
#   install tgt, fuse3 and libclang-dev, build rlun, start a private iSCSI target (tgtd)
#   on 127.0.0.1 with a 256 MiB file-backed LUN, then discover it, list and
#   inspect its LUN, restore an image onto it, back it up again, mount the
#   target through rlun (FUSE) and read and write the LUN as a file - checking
#   the bytes at every step.
#
#   scripts/demo.sh            (as root, or with sudo available)
#   KEEP=1 scripts/demo.sh     leave the target running afterwards
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
need_root() { $SUDO "$@"; }

# libclang-dev: building rlun runs bindgen on the ublk UAPI header.
if ! command -v tgtd >/dev/null || ! command -v fusermount3 >/dev/null ||
    ! dpkg-query -W -f='${db:Status-Status}' libclang-dev 2>/dev/null | grep -qx installed; then
    echo "==> installing tgt, fuse3 and libclang-dev"
    need_root apt-get update -qq
    need_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tgt fuse3 libclang-dev
fi

echo "==> building rlun"
cargo build --release --quiet
RLUN=$PWD/target/release/rlun

work=$(mktemp -d /tmp/rlun-demo.XXXXXX)
PORT=${PORT:-3270}
CTL=${CTL:-3270}
IQN=iqn.2026-11.org.rlun:demo
cleanup() {
    if [ "${KEEP:-0}" != 1 ]; then
        mountpoint -q "$work/mnt" 2>/dev/null && need_root fusermount3 -uz "$work/mnt"
        # Kill the daemon itself (with sudo, $TGTD_PID is sudo's pid).
        need_root pkill -9 -f "tgtd -f -C $CTL " 2>/dev/null || true
        rm -rf "$work"
    fi
}
trap cleanup EXIT

echo "==> starting tgtd on 127.0.0.1:$PORT with a 256 MiB LUN"
truncate -s 256M "$work/lun.img"
if ss -Hltn "sport = :$PORT" | grep -q .; then
    echo "port $PORT is in use; run with PORT=<free port> CTL=<free number <= 32767>" >&2
    exit 1
fi
$SUDO tgtd -f -C "$CTL" --iscsi portal=127.0.0.1:$PORT >"$work/tgtd.log" 2>&1 &
TGTD_PID=$!
disown "$TGTD_PID" 2>/dev/null || true
for _ in $(seq 50); do
    need_root tgtadm -C "$CTL" --op show --mode sys >/dev/null 2>&1 && break
    sleep 0.1
done
need_root tgtadm -C "$CTL" --lld iscsi --op new --mode target --tid 1 -T "$IQN"
need_root tgtadm -C "$CTL" --lld iscsi --op new --mode logicalunit --tid 1 --lun 1 -b "$work/lun.img"
need_root tgtadm -C "$CTL" --lld iscsi --op bind --mode target --tid 1 -I ALL

URL=iscsi://127.0.0.1:$PORT/$IQN/1
echo "==> rlun discover 127.0.0.1:$PORT"
"$RLUN" discover 127.0.0.1:$PORT
echo "==> rlun ls iscsi://127.0.0.1:$PORT"
"$RLUN" ls iscsi://127.0.0.1:$PORT
echo "==> rlun info $URL"
"$RLUN" info "$URL"
echo "==> rlun cp image.img $URL   (restore)"
head -c 256M /dev/urandom >"$work/image.img"
"$RLUN" -v cp "$work/image.img" "$URL"
echo "==> rlun cp $URL backup.img  (backup)"
"$RLUN" -v cp "$URL" "$work/backup.img"
cmp "$work/image.img" "$work/backup.img"
cmp "$work/image.img" "$work/lun.img"
echo "==> OK: the image went to the LUN and came back byte for byte"

MNT=$work/mnt
mkdir -p "$MNT"
echo "==> rlun mount iscsi://127.0.0.1:$PORT/$IQN $MNT"
need_root "$RLUN" mount --daemon --log-file "$work/mount.log" "iscsi://127.0.0.1:$PORT/$IQN" "$MNT"
ls -l "$MNT"
cmp "$work/image.img" "$MNT/lun1"
echo "==> writing 16 MiB through the mounted file"
head -c 16M /dev/urandom >"$work/patch.img"
dd if="$work/patch.img" of="$MNT/lun1" bs=1M seek=64 conv=notrunc,fsync status=none
echo "==> rlun umount $MNT"
need_root "$RLUN" umount "$MNT"
cmp <(dd if="$work/lun.img" bs=1M skip=64 count=16 status=none) "$work/patch.img"
echo "==> OK: the LUN was readable and writable as a file through the rlun mount"
if [ "${KEEP:-0}" = 1 ]; then
    echo "target left running: $URL (tgtd pid $TGTD_PID, files in $work)"
fi
