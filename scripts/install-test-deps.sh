#!/usr/bin/env bash
# Install what rlun's tests need on a Debian 12 machine (CI starts from a fresh one).
#
# Idempotent and quick when nothing is missing: the apt step is skipped when
# dpkg-query already reports every package installed, and rustup components
# are only added when absent. Runs apt as root, or through sudo otherwise.
set -euo pipefail

# Real peers and tools used by the integration tests and benches/compare.sh:
#   tgt              tgtd/tgtadm, the iSCSI target the tests talk to
#   libiscsi-bin     iscsi-ls/-inq/-readcapacity16/-perf, the reference initiator
#   (and qemu-utils + qemu-block-extra, handled apart below: qemu-img/qemu-io/
#    qemu-nbd, with iscsi:// support from qemu-block-extra)
#   fio, fuse3, libfuse3-dev, libnbd-bin, e2fsprogs   FUSE and NBD front-end tests
#   python3-libnbd   nbdsh, the scriptable libnbd client of tests/nbd_serve.rs
#   openssl          throwaway TLS certificates for the `rlun serve` TLS tests
#   iproute2, procps, util-linux (setpriv), time (/usr/bin/time), python3
#   valgrind, strace benches/instructions.sh (callgrind: instructions per I/O;
#                    strace -c: system calls per I/O), smoke-run by scripts/test.sh
#   pkg-config       for -sys crates that look up system libraries
#   libibverbs1 librdmacm1 ibverbs-providers   rdma-core at run time: rlun
#                    dlopens them for iser:// (no RDMA headers needed to build)
#   libibverbs-dev librdmacm-dev gcc   the test that checks rlun's RDMA struct
#                    layouts against rdma-core's headers compiles a C program
#   g++              libfuzzer-sys compiles libFuzzer (scripts/fuzz.sh; the
#                    nightly toolchain it needs is never installed from here)
#   nftables         scripts/soak.sh: packet loss when the kernel has no
#                    netem qdisc (iproute2 gives ip, ss and tc)
#   dpkg-dev, rpm    scripts/package.sh builds the .deb (dpkg-deb,
#                    dpkg-shlibdeps) and the .rpm (rpmbuild)
#   lintian, rpm2cpio, cpio, file, man-db, systemd (systemd-analyze)
#                    tests/packaging/run.sh: check the .deb/.rpm and the units
#   tmux             tests/stats_tgtd.rs: `rlun stats --watch` in a real terminal
#   prometheus       promtool, which checks `--metrics-listen`'s exposition
PACKAGES=(
    tgt
    libiscsi-bin
    fio
    fuse3
    libfuse3-dev
    libnbd-bin
    python3-libnbd
    openssl
    e2fsprogs
    iproute2
    nftables
    procps
    util-linux
    time
    python3
    valgrind
    strace
    pkg-config
    libibverbs1
    librdmacm1
    ibverbs-providers
    libibverbs-dev
    librdmacm-dev
    gcc
    g++
    # bindgen of libublk-rs-sys (the ublk UAPI header) at build time
    libclang-dev
    dpkg-dev
    lintian
    rpm
    rpm2cpio
    cpio
    file
    man-db
    systemd
    tmux
    prometheus
)

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    else
        sudo "$@"
    fi
}

missing_packages() {
    local pkg status
    for pkg in "${PACKAGES[@]}"; do
        status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
        if [ "$status" != "installed" ]; then
            echo "$pkg"
        fi
    done
}

# Version of an installed package, empty when absent (or only config files left).
pkg_version() {
    dpkg-query -W -f='${db:Status-Status} ${Version}' "$1" 2>/dev/null |
        awk '$1 == "installed" {print $2}' || true
}

export DEBIAN_FRONTEND=noninteractive
updated=0
apt_update_once() {
    if [ "$updated" = 0 ]; then
        as_root apt-get update -q
        updated=1
    fi
}
apt_install() {
    apt_update_once
    as_root apt-get install -y -q --no-install-recommends "$@"
}

mapfile -t missing < <(missing_packages)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-test-deps: installing ${missing[*]}"
    apt_install "${PACKAGES[@]}"
fi

# qemu loads its iscsi:// driver from qemu-block-extra, which must come from the
# very same build as qemu-utils (otherwise qemu-img says "Unknown protocol
# 'iscsi'"). Keep a qemu-utils the machine already has when a matching
# qemu-block-extra exists; otherwise install both at the archive's version.
utils_ver=$(pkg_version qemu-utils)
extra_ver=$(pkg_version qemu-block-extra)
if [ -z "$utils_ver" ] || [ "$utils_ver" != "$extra_ver" ]; then
    echo "install-test-deps: qemu-utils '${utils_ver}' / qemu-block-extra '${extra_ver}': installing a matching pair"
    apt_update_once
    if [ -n "$utils_ver" ] &&
        apt-cache madison qemu-block-extra | awk -F'|' '{gsub(/ /, "", $2); print $2}' | grep -qxF "$utils_ver"; then
        apt_install "qemu-block-extra=$utils_ver"
    else
        candidate=$(apt-cache policy qemu-block-extra | awk '/Candidate:/ {print $2}')
        apt_install --allow-downgrades "qemu-utils=$candidate" "qemu-block-extra=$candidate"
    fi
fi

# Rust toolchain components used by scripts/test.sh.
if command -v rustup >/dev/null 2>&1; then
    installed=$(rustup component list --installed 2>/dev/null || true)
    for component in rustfmt clippy; do
        if ! grep -q "^${component}-" <<<"$installed"; then
            echo "install-test-deps: adding rustup component $component"
            rustup component add "$component"
        fi
    done
fi

# Fail here, with a clear message, rather than deep inside a test.
for tool in tgtd tgtadm iscsi-ls iscsi-inq iscsi-readcapacity16 iscsi-perf \
    qemu-img qemu-io qemu-nbd fio valgrind strace setpriv python3 cargo lintian rpm rpm2cpio cpio \
    systemd-analyze man dpkg-deb dpkg-shlibdeps rpmbuild tmux promtool; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "install-test-deps: '$tool' is still missing after installing packages" >&2
        exit 1
    fi
done
