#!/usr/bin/env bash
# Build rlun's .deb or .rpm from the release binary:
#
#   scripts/package.sh deb     -> target/debian/rlun_<version>-1_<arch>.deb   (cargo-deb)
#   scripts/package.sh rpm     -> target/generate-rpm/rlun-<version>-1.<arch>.rpm (cargo-generate-rpm)
#
# The version comes from Cargo.toml. Package contents are declared in
# Cargo.toml ([package.metadata.deb], [package.metadata.generate-rpm]); this
# script builds the release binary, writes what those declarations take from
# target/package-assets/ (gzipped man pages, the Debian changelog) and runs
# the packager. Needs cargo-deb / cargo-generate-rpm
# (scripts/install-test-deps.sh installs them when missing).
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

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || { echo "package.sh: no version in Cargo.toml" >&2; exit 1; }

if [ "${RLUN_PACKAGE_NO_BUILD:-}" != 1 ]; then
    cargo build --release --locked
fi

assets=target/package-assets
rm -rf "$assets"
mkdir -p "$assets/man"
# Man pages gzipped with -n (no name or time stamp: reproducible), as
# Debian policy asks and as rpm's brp-compress would leave them.
for page in man/*.[0-9]; do
    gzip -9n <"$page" >"$assets/man/$(basename "$page").gz"
done
# The Debian changelog, always at the Cargo.toml version.
date=$(date -R -u -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")
cat >"$assets/changelog" <<CHANGELOG
rlun (${version}-1) unstable; urgency=medium

  * Release ${version}; see README.md for what it does.

 -- rlun developers <rlun@example.org>  ${date}
CHANGELOG

case "$kind" in
deb)
    cargo deb --no-build --locked --strip
    ls -1 target/debian/rlun_"${version}"-1_*.deb
    ;;
rpm)
    # cargo-generate-rpm packages the binary as it is: strip it the way
    # cargo-deb does for the .deb (debug info stays out of both packages).
    strip --strip-unneeded -o "$assets/rlun" target/release/rlun
    cargo generate-rpm
    ls -1 target/generate-rpm/rlun-"${version}"-1.*.rpm
    ;;
esac
