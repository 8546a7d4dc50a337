#!/usr/bin/env bash
# Build rlun's .deb or .rpm from the release binary:
#
#   scripts/package.sh deb     -> target/debian/rlun_<version>-1_<arch>.deb   (dpkg-deb)
#   scripts/package.sh rpm     -> target/rpm/rlun-<version>-1.<arch>.rpm      (rpmbuild)
#
# Only the distributions' own tools: dpkg-deb and dpkg-shlibdeps (dpkg-dev)
# for the .deb, rpmbuild (Debian's `rpm` package, or rpm-build) for the
# .rpm. No cargo packager to compile first. Both packages are built from
# one staging tree that this script fills (target/package-root/), so their
# contents cannot drift apart; only the paths distributions disagree on
# differ (units under /lib or /usr/lib, zsh completions, the licence file).
#
# The version comes from Cargo.toml.
# File times are set to SOURCE_DATE_EPOCH (default: the last commit's time)
# and man pages are gzipped with -n, so rebuilding the same commit gives the
# same file contents.
# RLUN_PACKAGE_NO_BUILD=1 packages the existing target/release/rlun.
set -euo pipefail
cd "$(dirname "$0")/.."

kind=${1:-}
case "$kind" in
deb | rpm) ;;
*)
    echo "usage: scripts/package.sh deb|rpm" >&2
    exit 2
    ;;
esac

die() {
    echo "package.sh: $*" >&2
    exit 1
}

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || die "no version in Cargo.toml"
# One line of under 80 characters (Debian's synopsis, rpm's Summary).
summary="userspace iSCSI/iSER initiator: LUNs as files, NBD exports or /dev/nbd"
release=1
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
export SOURCE_DATE_EPOCH=$epoch

# The long description, shared by both formats (one paragraph).
long_description="rlun logs in to iSCSI targets over TCP (RFC 7143) or iSER/RDMA (RFC 7145) \
without the kernel initiator and presents each remote LUN as a regular file \
in a FUSE mount (rlun mount), as an NBD export (rlun serve) or as a /dev/nbd \
block device (rlun attach), with a page cache, read-ahead, write-back and \
transparent reconnect. It also copies, inspects and benchmarks LUNs. \
Talking to a target needs no root."
# fuse3: fusermount3 for `rlun mount`. kmod: the `modprobe nbd` hint.
# rdma-core (libibverbs, librdmacm) is loaded with dlopen when an iser://
# URL is used, so it is only recommended: without it iser:// fails with a
# clear message and everything else works.

if [ "${RLUN_PACKAGE_NO_BUILD:-}" != 1 ]; then
    cargo build --release --locked
fi
[ -x target/release/rlun ] || die "no target/release/rlun (build it, or unset RLUN_PACKAGE_NO_BUILD)"

# ---------------------------------------------------------------- staging
# stage ROOT: the installed tree, with the paths both formats share.
# Units and zsh completions go where each format wants them (below).
stage() {
    local root=$1
    rm -rf "$root"
    install -D -m 755 /dev/null "$root/usr/bin/rlun"
    strip --strip-unneeded -o "$root/usr/bin/rlun" target/release/rlun
    chmod 755 "$root/usr/bin/rlun"
    local page sec
    for page in man/*.[0-9]; do
        sec=${page##*.}
        install -d -m 755 "$root/usr/share/man/man$sec"
        gzip -9n <"$page" >"$root/usr/share/man/man$sec/$(basename "$page").gz"
        chmod 644 "$root/usr/share/man/man$sec/$(basename "$page").gz"
    done
    install -D -m 644 packaging/completions/rlun.bash "$root/usr/share/bash-completion/completions/rlun"
    install -D -m 644 packaging/completions/rlun.fish "$root/usr/share/fish/vendor_completions.d/rlun.fish"
    # 0600: the file may hold CHAP secrets.
    install -D -m 600 packaging/rlun.toml "$root/etc/rlun/rlun.toml"
    install -D -m 644 README.md "$root/usr/share/doc/rlun/README.md"
    install -D -m 644 packaging/grafana/rlun-dashboard.json "$root/usr/share/rlun/grafana/rlun-dashboard.json"
}
# stage_units ROOT DIR: the systemd units into ROOT/DIR.
stage_units() {
    local unit
    for unit in packaging/systemd/rlun-*@.service; do
        install -D -m 644 "$unit" "$1/$2/$(basename "$unit")"
    done
}
# clamp ROOT: every file's time to SOURCE_DATE_EPOCH.
clamp() {
    find "$1" -exec touch -h -d "@$epoch" {} +
}

case "$kind" in
deb)
    command -v dpkg-deb >/dev/null && command -v dpkg-shlibdeps >/dev/null ||
        die "dpkg-deb and dpkg-shlibdeps are needed: apt-get install dpkg-dev"
    arch=$(dpkg --print-architecture)
    root=target/package-root/deb
    stage "$root"
    stage_units "$root" lib/systemd/system
    install -D -m 644 packaging/completions/_rlun "$root/usr/share/zsh/vendor-completions/_rlun"
    install -D -m 644 packaging/copyright "$root/usr/share/doc/rlun/copyright"
    date=$(date -R -u -d "@$epoch")
    printf 'rlun (%s-%s) unstable; urgency=medium\n\n  * Release %s; see README.md for what it does.\n\n -- rlun developers <rlun@example.org>  %s\n' \
        "$version" "$release" "$version" "$date" | gzip -9n >"$root/usr/share/doc/rlun/changelog.Debian.gz"
    chmod 644 "$root/usr/share/doc/rlun/changelog.Debian.gz"

    # Shared-library dependencies of the binary, as Debian's own packages
    # compute them (dpkg-shlibdeps wants a debian/control beside it).
    shl=target/package-root/shlibdeps
    rm -rf "$shl"
    mkdir -p "$shl/debian"
    printf 'Source: rlun\n\nPackage: rlun\nArchitecture: any\n' >"$shl/debian/control"
    auto=$(cd "$shl" && dpkg-shlibdeps -O "$OLDPWD/$root/usr/bin/rlun" 2>/dev/null |
        sed -n 's/^shlibs:Depends=//p')
    [ -n "$auto" ] || die "dpkg-shlibdeps found no dependencies for usr/bin/rlun"

    install -d -m 755 "$root/DEBIAN"
    {
        echo "Package: rlun"
        echo "Version: $version-$release"
        echo "Architecture: $arch"
        echo "Section: net"
        echo "Priority: optional"
        echo "Maintainer: rlun developers <rlun@example.org>"
        echo "Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)"
        echo "Depends: fuse3, kmod, $auto"
        echo "Recommends: libibverbs1, librdmacm1"
        echo "Description: $summary"
        fold -s -w 78 <<<"$long_description" | sed 's/ *$//; s/^/ /'
    } >"$root/DEBIAN/control"
    echo /etc/rlun/rlun.toml >"$root/DEBIAN/conffiles"
    (cd "$root" && find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -printf '%P\0' |
        LC_ALL=C sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
    chmod 644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"
    clamp "$root"
    mkdir -p target/debian
    out=target/debian/rlun_${version}-${release}_${arch}.deb
    dpkg-deb --root-owner-group -Zxz --build "$root" "$out" >/dev/null
    echo "$out"
    ;;
rpm)
    command -v rpmbuild >/dev/null || die "rpmbuild is needed: apt-get install rpm (Debian) or dnf install rpm-build"
    root=target/package-root/rpm
    stage "$root"
    stage_units "$root" usr/lib/systemd/system
    install -D -m 644 packaging/completions/_rlun "$root/usr/share/zsh/site-functions/_rlun"
    install -D -m 644 packaging/copyright "$root/usr/share/licenses/rlun/copyright"
    clamp "$root"
    top=$PWD/target/package-root/rpmbuild
    rm -rf "$top"
    mkdir -p "$top/SPECS" "$top/RPMS"
    spec=$top/SPECS/rlun.spec
    # The payload is the staged tree, copied as it is (already stripped,
    # man pages already compressed): no build section, no post-processing,
    # no debuginfo package. No scriptlets, so no /bin/sh requirement; the
    # automatic requirements are the binary's libraries (glibc, libgcc).
    cat >"$spec" <<SPEC
Name: rlun
Version: $version
Release: $release
Summary: $summary
License: MIT OR Apache-2.0
URL: https://example.org/rlun
Requires: fuse3
Requires: kmod
Recommends: libibverbs
Recommends: librdmacm
%global debug_package %{nil}
%global __os_install_post %{nil}
%global _build_id_links none

%description
$long_description

%install
cp -a "$PWD/$root/." "%{buildroot}/"

%files
%attr(0755,root,root) /usr/bin/rlun
%attr(0644,root,root) %doc /usr/share/man/man5/*.5.gz
%attr(0644,root,root) %doc /usr/share/man/man8/*.8.gz
%attr(0644,root,root) /usr/share/bash-completion/completions/rlun
%attr(0644,root,root) /usr/share/zsh/site-functions/_rlun
%attr(0644,root,root) /usr/share/fish/vendor_completions.d/rlun.fish
%dir %attr(0755,root,root) /etc/rlun
%attr(0600,root,root) %config(noreplace) /etc/rlun/rlun.toml
%attr(0644,root,root) /usr/lib/systemd/system/rlun-mount@.service
%attr(0644,root,root) /usr/lib/systemd/system/rlun-serve@.service
%attr(0644,root,root) /usr/lib/systemd/system/rlun-attach@.service
%attr(0644,root,root) /usr/lib/systemd/system/rlun-attach-ublk@.service
%attr(0644,root,root) %doc /usr/share/licenses/rlun/copyright
%attr(0644,root,root) %doc /usr/share/doc/rlun/README.md
%dir %attr(0755,root,root) /usr/share/rlun
%dir %attr(0755,root,root) /usr/share/rlun/grafana
%attr(0644,root,root) /usr/share/rlun/grafana/rlun-dashboard.json
SPEC
    rpmbuild -bb --quiet \
        --define "_topdir $top" \
        --define "_rpmdir $top/RPMS" \
        --define "_build_name_fmt %%{NAME}-%%{VERSION}-%%{RELEASE}.%%{ARCH}.rpm" \
        --define "use_source_date_epoch_as_buildtime 1" \
        --define "clamp_mtime_to_source_date_epoch 1" \
        "$spec"
    mkdir -p target/rpm
    built=$(ls "$top"/RPMS/rlun-"$version"-"$release".*.rpm)
    out=target/rpm/$(basename "$built")
    mv "$built" "$out"
    echo "$out"
    ;;
esac
