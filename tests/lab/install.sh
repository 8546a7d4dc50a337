#!/usr/bin/env bash
# Install what the VM lab needs on a Debian 12 host (CI starts from a fresh one).
#
# Idempotent and quick when nothing is missing: apt runs only when dpkg-query
# reports a package absent, and the virtme-ng venv is only (re)built when its
# vng is missing or not the pinned version. Nothing lands in the work tree:
# packages go to the system, the venv to $RLUN_LAB_CACHE (default
# /var/cache/rlun-lab). Runs apt as root, or through sudo otherwise.
#
# Prints "vng=<path>" as its last line for tests/lab/lab.py.
set -euo pipefail
cd "$(dirname "$0")/../.."

CACHE=${RLUN_LAB_CACHE:-/var/cache/rlun-lab}
VENV=$CACHE/venv
VIRTME_NG_VERSION=1.42

# The VM and what runs inside it (the guest sees the host's root filesystem
# read-only, so every tool the scenarios use is installed here, on the host):
#   qemu-system-x86   the VM (software emulation: KVM hangs on these machines)
#   linux-image-amd64 Debian 12's own kernel (6.1) with rdma_rxe, nbd,
#                     iscsi_target_mod, ib_isert, ib_iser, iscsi_tcp as modules;
#                     kept for `lab.py --kernel 6.1`
#   and, from bookworm-backports (added below as an apt source), the kernel
#   the lab boots by default: linux-image-6.12.*-amd64, the one Debian 13
#   ships, which also has ublk_drv (6.1 is built without it) besides all of
#   the above. The versioned package the backports metapackage depends on is
#   installed, not the metapackage, so that bookworm's linux-image-amd64 (6.1)
#   stays installed beside it.
#   busybox-static    virtme-ng builds its small initramfs with it
#   rdma-core ibverbs-utils rdmacm-utils   soft-RoCE tools (rdma, ibv_devices, rping)
#   open-iscsi        iscsid/iscsiadm: the kernel initiator to compare with
#   multipath-tools   multipathd: dm-multipath over open-iscsi, the anchor of
#                     rlun's multipath (39-dm-multipath-alua); nothing starts
#                     it on the host
#   tgt               tgtd, the second target
#   nbd-client        attaches NBD exports to /dev/nbdX
#   fio e2fsprogs kmod iproute2 procps jq   workloads, ext4, modprobe, ip, sysctl, JSON
#   qemu-utils        qemu-nbd, the reference NBD exporter; its iscsi:// driver
#                     (qemu-block-extra of the very same build) and the other
#                     test peers come from scripts/install-test-deps.sh, run first
#   python3-venv      for the private virtme-ng venv (when python3 is Debian's)
PACKAGES=(
    qemu-system-x86
    linux-image-amd64
    busybox-static
    rdma-core
    ibverbs-utils
    rdmacm-utils
    open-iscsi
    multipath-tools
    tgt
    nbd-client
    fio
    e2fsprogs
    kmod
    iproute2
    procps
    qemu-utils
    jq
)

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    else
        sudo "$@"
    fi
}

installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" = installed ]
}

# The project's other test dependencies (tgt, libiscsi-bin, a matching
# qemu-utils/qemu-block-extra pair, fio...): quick when already there.
if [ -x scripts/install-test-deps.sh ] && [ "${RLUN_LAB_SKIP_TEST_DEPS:-}" != 1 ]; then
    scripts/install-test-deps.sh >&2
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    installed "$pkg" || missing+=("$pkg")
done
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    missing+=(python3-venv)
fi
# The kernel package wants an initramfs generator. virtme-ng does not use the
# initrd, so on a machine without one pick the smallest and fastest.
if ! installed linux-image-amd64 && ! installed initramfs-tools && ! installed dracut &&
    ! installed tiny-initramfs; then
    missing+=(tiny-initramfs)
fi

if [ "${#missing[@]}" -gt 0 ]; then
    echo "lab install: apt-get install ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Other jobs may hold the dpkg lock for a while on a shared machine.
    as_root apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    as_root apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
        "${missing[@]}" >&2
fi

# --- the backports kernel --------------------------------------------------------
BACKPORTS_SERIES=${RLUN_LAB_BACKPORTS_SERIES:-6.12}
BACKPORTS_SOURCES=/etc/apt/sources.list.d/rlun-lab-bookworm-backports.sources
have_backports_kernel() {
    local img v
    for img in /boot/vmlinuz-"$BACKPORTS_SERIES".*; do
        [ -e "$img" ] || continue
        v=${img#/boot/vmlinuz-}
        [ -d "/lib/modules/$v/kernel/drivers/block" ] && return 0
    done
    return 1
}
if [ "${RLUN_LAB_NO_BACKPORTS:-}" != 1 ] && ! have_backports_kernel; then
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
        echo "lab install: adding bookworm-backports as an apt source ($BACKPORTS_SOURCES)" >&2
        printf '%s\n' 'Types: deb' 'URIs: http://deb.debian.org/debian' 'Suites: bookworm-backports' \
            'Components: main' 'Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg' |
            as_root tee "$BACKPORTS_SOURCES" >/dev/null
    fi
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    # The versioned image the backports metapackage points at today.
    kpkg=$(apt-cache -o APT::Default-Release=bookworm-backports depends linux-image-amd64 |
        awk -v s="linux-image-$BACKPORTS_SERIES." '$1 == "Depends:" && index($2, s) == 1 {print $2; exit}')
    if [ -z "$kpkg" ]; then
        echo "lab install: bookworm-backports offers no linux-image-$BACKPORTS_SERIES.*-amd64" >&2
        exit 1
    fi
    echo "lab install: apt-get install $kpkg (bookworm-backports)" >&2
    as_root apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends \
        "$kpkg/bookworm-backports" >&2
    if ! have_backports_kernel; then
        echo "lab install: $kpkg installed, but no /boot/vmlinuz-$BACKPORTS_SERIES.* with modules" >&2
        exit 1
    fi
fi

vng_version() {
    "$VENV/bin/vng" --version 2>/dev/null | awk '{print $2}'
}
if [ "$(vng_version)" != "$VIRTME_NG_VERSION" ]; then
    echo "lab install: virtme-ng $VIRTME_NG_VERSION into $VENV" >&2
    as_root mkdir -p "$CACHE"
    as_root rm -rf "$VENV"
    as_root python3 -m venv "$VENV" >&2
    as_root "$VENV/bin/pip" install -q --disable-pip-version-check \
        "virtme-ng==$VIRTME_NG_VERSION" >&2
    [ "$(vng_version)" = "$VIRTME_NG_VERSION" ] || {
        echo "lab install: virtme-ng $VIRTME_NG_VERSION did not install into $VENV" >&2
        exit 1
    }
fi

for tool in qemu-system-x86_64 busybox rdma ibv_devices rping iscsiadm iscsid tgtd tgtadm \
    nbd-client fio mkfs.ext4 modprobe qemu-nbd; do
    if ! PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null 2>&1; then
        echo "lab install: '$tool' is still missing after installing packages" >&2
        exit 1
    fi
done
echo "vng=$VENV/bin/vng"
