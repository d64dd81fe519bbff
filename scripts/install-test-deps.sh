#!/bin/sh
# Install everything the test suite needs on a fresh Debian machine:
# the Cortex-M cross toolchain (GCC with newlib and libstdc++, Clang with lld, CMake, make) and QEMU
# (Debian packages), then this package with its test extras.
set -eu
cd "$(dirname "$0")/.."
if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
        gcc-arm-none-eabi libnewlib-arm-none-eabi libstdc++-arm-none-eabi-newlib qemu-system-arm \
        cmake make clang lld >/dev/null
else
    echo "install-test-deps: no apt-get; install gcc-arm-none-eabi, libnewlib-arm-none-eabi," \
         "libstdc++-arm-none-eabi-newlib, qemu-system-arm, cmake, make, clang and lld yourself" >&2
fi
python3 -m pip install --quiet --editable ".[test]"
