#!/usr/bin/env python3
"""The cost of adoption at one process (issue 19, docs/porting.md "The cost of adoption"): the
llm.c-style trainer of bench/adopt/ built without the library (PLAIN) and ported (PORTED), from one
source. Speed is bench/adopt/run.sh's business; this test keeps what makes a port cost nothing at
one process, run directly and under `accelerate launch --num_processes 1`:
  - the same arithmetic: every logged loss and the final loss are identical bit for bit;
  - the library leaves the program's buffers where the program put them: the page offsets of the
    parameter, gradient, activation and AdamW buffers are those of the plain program (not checked
    under a sanitizer, whose allocator places blocks its own way);
  - no extra thread, no CPU binding: the thread count and the allowed CPUs during the last step
    are the plain program's, also under the launcher;
  - the library's per-step calls neither fault memory in nor allocate per step: the steps after
    the first take at most 40 page faults, minor and major together (re-touching the 1.6 MB
    gradient buffer would take ~400; a major fault is code or data read from disk, which a fresh
    build on a busy machine may still take, so it is not singled out; the kernel's own work
    (reclaim, DAMON, compaction) gives even the plain program a few: 9 once under ASan in CI, so
    the bound is not 8 any more);
  - the floating-point control word (MXCSR) is the plain program's.
usage: test_adopt.py ACCELERATE PLAIN PORTED WORK_DIR [check-placement 0|1]"""
import os, re, subprocess, sys

acc, plain, ported, work = sys.argv[1:5]
placement = len(sys.argv) < 6 or sys.argv[5] == "1"
failures = 0
FAULTS = 40  # page faults the steps after the first may take (re-touching the gradients: ~400)


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


def run(args, what):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run(args, capture_output=True, text=True, timeout=150, env=env)
    if p.returncode != 0:
        print(f"FAIL: {what} exited with {p.returncode}\n{p.stdout}\n{p.stderr}")
        sys.exit(1)
    return p.stdout


def report(out, what):
    r = {"losses": re.findall(r"^step \d+ loss (\S+)", out, re.M)}
    m = re.search(r"final_loss (\S+)", out)
    a = re.search(r"^addr (.*)$", out, re.M)
    f = re.search(r"^steady_minflt (\d+) steady_majflt (\d+)", out, re.M)
    l = re.search(r"^library_ms_per_step \S+ mxcsr (\S+) threads (\S+) cpus (\S+)", out, re.M)
    if not (m and a and f and l and r["losses"]):
        print(f"FAIL: {what}: the trainer's report is incomplete:\n{out}")
        sys.exit(1)
    r["final"] = m.group(1)
    words = a.group(1).split()
    r["offsets"] = {words[i]: int(words[i + 1], 16) % 4096 for i in range(0, len(words), 2)}
    r["minflt"], r["majflt"] = int(f.group(1)), int(f.group(2))
    r["mxcsr"], r["threads"], r["cpus"] = l.group(1), l.group(2), l.group(3)
    return r


os.makedirs(work, exist_ok=True)
shard = os.path.join(work, "shard.bin")
run([plain, "--make-shard", shard, "20000"], "making the shard")
args = [shard, "12", "2"]  # 12 steps of B=2 (the steps log 0, 10 and 11)
p = report(run([plain] + args, "plain"), "plain")
for what, cmd in (("ported", [ported] + args),
                  ("ported under accelerate launch", [acc, "launch", "--num_processes", "1", ported] + args)):
    q = report(run(cmd, what), what)
    check(q["losses"] == p["losses"] and q["final"] == p["final"],
          f"{what}: losses {q['losses']} final {q['final']}, plain {p['losses']} final {p['final']}")
    if placement:
        check(q["offsets"] == p["offsets"],
              f"{what}: buffer page offsets {q['offsets']}, plain {p['offsets']} (the library moved them)")
    check(q["threads"] == p["threads"], f"{what}: {q['threads']} threads during the run, plain {p['threads']}")
    check(q["cpus"] == p["cpus"], f"{what}: allowed CPUs {q['cpus']}, plain {p['cpus']}")
    check(q["minflt"] + q["majflt"] <= FAULTS,
          f"{what}: {q['minflt']} minor / {q['majflt']} major page faults after the first step (expected <= {FAULTS} in all)")
    check(q["mxcsr"] == p["mxcsr"], f"{what}: MXCSR {q['mxcsr']}, plain {p['mxcsr']}")
check(p["minflt"] <= FAULTS, f"plain: {p['minflt']} minor page faults after the first step (expected <= {FAULTS})")
print("adopt: ok" if not failures else f"adopt: {failures} failure(s)")
sys.exit(1 if failures else 0)
