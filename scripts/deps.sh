#!/usr/bin/env bash
# Installs what hawser needs to build and test, from Debian packages only.
# Idempotent: does nothing (no apt-get update) when everything is present.
set -euo pipefail
PKGS=(
  build-essential cmake ninja-build pkg-config git ccache
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev
  liburing-dev libibverbs-dev libcurl4-openssl-dev
  libgtest-dev libgmock-dev
  python3-dev pybind11-dev python3-pytest python3-numpy python3-torch
  python3-setuptools python3-wheel python3-pip python3-venv dpkg-dev
  etcd-server etcd-client openssl iperf3 fio iproute2 procps nftables
  # The sanitizer builds and the fuzz targets: clang, its sanitizer and
  # libFuzzer runtimes, llvm-symbolizer for readable reports.
  clang libclang-rt-14-dev llvm-14
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts an etcd service on install on some systems; tests run their own.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
  systemctl stop etcd || true
fi
