#!/bin/sh
# usage: check_install.sh BUILD_DIR CONSUMER_SRC
set -eu
build=$1
src=$2
work=$(mktemp -d /tmp/acc-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/include/accelerate.h" || { echo "FAIL: header not installed"; exit 1; }
test -x "$prefix/bin/accelerate" || { echo "FAIL: CLI not installed"; exit 1; }
ls "$prefix"/lib*/libaccelerate.a >/dev/null || { echo "FAIL: static library not installed"; exit 1; }

# 1. CMake package
cmake -S "$src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
out=$(LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64" "$work/cmake-build/consumer")
echo "find_package consumer: $out"
case "$out" in *"consumer ok: 1 process"*) ;; *) echo "FAIL: unexpected output"; exit 1;; esac

# 2. pkg-config (static and shared)
pc=$(ls -d "$prefix"/lib*/pkgconfig | head -n1)
export PKG_CONFIG_PATH="$pc"
${CC:-cc} "$src/consumer.c" $(pkg-config --cflags --libs accelerate) -o "$work/pc-consumer"
out=$(LD_LIBRARY_PATH="$prefix/lib:$prefix/lib64" "$work/pc-consumer")
echo "pkg-config consumer: $out"
case "$out" in *"consumer ok: 1 process"*) ;; *) echo "FAIL: unexpected output"; exit 1;; esac
${CC:-cc} "$src/consumer.c" $(pkg-config --cflags accelerate) -o "$work/pc-static" \
  "$(ls "$prefix"/lib*/libaccelerate.a | head -n1)" $(pkg-config --libs-only-l --static accelerate | sed 's/-laccelerate//')
out=$("$work/pc-static")
case "$out" in *"consumer ok: 1 process"*) ;; *) echo "FAIL: static consumer: $out"; exit 1;; esac
echo "1 passed, 0 failed"
