#!/bin/sh
# usage: check_lib_only.sh SOURCE_DIR
# Configures the library alone (no tests, CLI, examples, benchmarks) in a scratch directory and
# checks that neither zlib nor libyaml was looked up and that no CLI target exists.
set -eu
src=$1
work=$(mktemp -d /tmp/acc-libonly-XXXXXX)
trap 'rm -rf "$work"' EXIT
cmake -S "$src" -B "$work" -DACC_BUILD_TESTS=OFF -DACC_BUILD_CLI=OFF -DACC_BUILD_EXAMPLES=OFF \
  -DACC_BUILD_BENCH=OFF >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
if grep -E '^(ZLIB_[A-Z_]*|YAML_[A-Z_]*|pkgcfg_lib_YAML[A-Za-z_-]*)(:[A-Z]+)?=' "$work/CMakeCache.txt"; then
  echo "FAIL: the library-only configuration looked for zlib or libyaml"; exit 1
fi
if cmake --build "$work" --target help | grep -q accelerate_cli; then
  echo "FAIL: the library-only configuration defines the CLI"; exit 1
fi
cmake --build "$work" --target help | grep -q ' accelerate$\| accelerate ' || {
  echo "FAIL: no accelerate library target"; exit 1; }
echo "library-only configuration: no zlib, no libyaml, no CLI"
