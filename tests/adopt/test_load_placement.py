#!/usr/bin/env python3
"""adopt_load_placement: after acc_accelerator_load_state the program's next large blocks land at
the same page offsets as in a run that never loaded (the library's load temporaries are mappings
of their own and do not raise glibc's mmap threshold). usage: PROG WORKDIR CHECK_PLACEMENT"""
import re, shutil, subprocess, sys

prog, work, check = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
if not check:
    print("SKIP: block placement is the sanitizer allocator's under a sanitizer build")
    sys.exit(77)
shutil.rmtree(work, ignore_errors=True)
ck = work + "/ck"
offs = {}
for mode in ("none", "save", "load"):
    r = subprocess.run([prog, mode, ck], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        sys.exit(f"FAIL: {mode}: exit {r.returncode}: {r.stderr.strip()}")
    m = re.search(r"params offset (0x[0-9a-f]+), then gradients (0x[0-9a-f]+), activations (0x[0-9a-f]+)", r.stdout)
    if not m:
        sys.exit(f"FAIL: {mode}: unexpected output {r.stdout!r}")
    offs[mode] = m.groups()
    print(mode, offs[mode])
for mode in ("save", "load"):
    if offs[mode] != offs["none"]:
        sys.exit(f"FAIL: after {mode}_state the program's blocks land at {offs[mode]}, "
                 f"in a fresh run at {offs['none']} (params, gradients, activations page offsets)")
shutil.rmtree(work, ignore_errors=True)
print("PASS")
