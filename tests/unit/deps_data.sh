#!/bin/sh
# scripts/deps.sh (issue 31, newuser-4 findings 5 and 6), with stand-ins for dpkg-query, apt-get
# and `id -u` (root):
#  - a data package that dpkg lists as installed but whose files are gone is reinstalled
#    (apt-get install --reinstall), and deps.sh checks that the files are back;
#  - when the reinstall does not bring them back, deps.sh fails naming the missing file;
#  - nothing is run when every file is there;
#  - as a user, the printed command says --reinstall;
#  - `deps.sh main` installs only the main job's packages; `deps.sh` installs the test toolchain too.
# Usage: deps_data.sh <source dir> <scratch dir>
src=$1 T=$2
rm -rf "$T" && mkdir -p "$T/bin" "$T/data/fm" || exit 1
touch "$T/data/jargon.txt.gz"
# dpkg-query: every package installed (or none, with FAKE_NONE); -L lists the fake data files.
cat > "$T/bin/dpkg-query" <<'A'
#!/bin/sh
case "$1" in
  -W) [ -n "$FAKE_NONE" ] && exit 1; shift 2; for p in "$@"; do echo "$p install ok installed"; done; exit 0 ;;
  -L) case "$2" in
        dataset-fashion-mnist) printf '/.\n%s/data/fm\n%s/data/fm/train-images-idx3-ubyte.gz\n' "$FAKE_DIR" "$FAKE_DIR" ;;
        jargon-text) printf '/.\n%s/data/jargon.txt.gz\ndiverted by other to: /x\n' "$FAKE_DIR" ;;
      esac; exit 0 ;;
esac
exit 1
A
# apt-get: records its arguments; a reinstall restores the file unless FAKE_BROKEN is set.
cat > "$T/bin/apt-get" <<'A'
#!/bin/sh
echo "$*" >> "$FAKE_DIR/calls"
case " $* " in *" --reinstall "*) [ -n "$FAKE_BROKEN" ] || touch "$FAKE_DIR/data/fm/train-images-idx3-ubyte.gz" ;; esac
exit 0
A
printf '#!/bin/sh\necho "${FAKE_UID:-0}"\n' > "$T/bin/id"
chmod +x "$T/bin/"*
fail=0
run() { FAKE_DIR=$T ACC_APT_LOG=$T/apt.log PATH="$T/bin:$PATH" bash "$src/scripts/deps.sh" "$@" > "$T/out" 2>&1; }

# 1. the data file is gone: reinstalled, and it is back
rm -f "$T/calls"
run main; rc=$?
[ $rc -eq 0 ] || { echo "FAIL 1: deps.sh exited $rc"; cat "$T/out"; fail=1; }
grep -q "dataset-fashion-mnist is installed but its files are gone (no $T/data/fm/train-images-idx3-ubyte.gz); reinstalling it" "$T/out" ||
  { echo "FAIL 1: no message naming the missing file"; cat "$T/out"; fail=1; }
grep -q -- "install .*--reinstall dataset-fashion-mnist$" "$T/calls" 2>/dev/null ||
  { echo "FAIL 1: no apt-get install --reinstall dataset-fashion-mnist:"; cat "$T/calls"; fail=1; }
grep -q "jargon-text" "$T/calls" && { echo "FAIL 1: jargon-text (files present) was reinstalled"; fail=1; }

# 2. everything present: apt-get is not run
rm -f "$T/calls"
run main; rc=$?
[ $rc -eq 0 ] && [ ! -e "$T/calls" ] || { echo "FAIL 2: rc $rc, apt-get called: $(cat "$T/calls" 2>/dev/null)"; fail=1; }

# 3. the reinstall does not bring the file back: a failure naming it
rm -f "$T/data/fm/train-images-idx3-ubyte.gz" "$T/calls"
FAKE_BROKEN=1 run main; rc=$?
[ $rc -ne 0 ] && grep -q "was reinstalled but $T/data/fm/train-images-idx3-ubyte.gz is still missing" "$T/out" ||
  { echo "FAIL 3: rc $rc"; cat "$T/out"; fail=1; }

# 4. as a user: the printed command reinstalls
FAKE_UID=1000 run main; rc=$?
[ $rc -eq 1 ] && grep -q "sudo apt-get install -y --reinstall dataset-fashion-mnist" "$T/out" ||
  { echo "FAIL 4: rc $rc"; cat "$T/out"; fail=1; }
touch "$T/data/fm/train-images-idx3-ubyte.gz"

# 5. profiles: main has the example, CLI and modules but not the test toolchain; the default has all
rm -f "$T/calls"
FAKE_NONE=1 run main
inst=$(grep " install " "$T/calls")
for p in libgloo-dev libopenmpi-dev libyaml-dev libdnnl-dev dataset-fashion-mnist jargon-text; do
  echo " $inst " | grep -q " $p " || { echo "FAIL 5: deps.sh main does not install $p: $inst"; fail=1; }
done
for p in slurm-wlm munge clang protobuf-compiler python3-crc32c; do
  echo " $inst " | grep -q " $p " && { echo "FAIL 5: deps.sh main installs the test package $p"; fail=1; }
done
[ "$(wc -l < "$T/out")" -le 3 ] || { echo "FAIL 5: more than 3 lines of output:"; cat "$T/out"; fail=1; }
rm -f "$T/calls"
FAKE_NONE=1 run
inst=$(grep " install " "$T/calls")
for p in libgloo-dev slurm-wlm munge clang protobuf-compiler python3-crc32c mpich; do
  echo " $inst " | grep -q " $p " || { echo "FAIL 5: deps.sh (everything) does not install $p"; fail=1; }
done
[ $fail -eq 0 ] && echo "deps data: all checks passed"
exit $fail
