#!/usr/bin/env python3
"""The porting test (docs/porting.md): train_ported.c is train_plain.c, a small llm.c-style
trainer (flat buffers and llm.c's param_sizes[], lazy gradients, its own AdamW, its own printf, a
validation loss over the first windows, a uint64 RNG state), with the library's calls added. Checks:
  - at most 45 changed lines (added + removed lines of the unified diff; 45 now, 16 of them the
    plain trainer's own validation loop, which the port deletes for acc_accelerator_evaluate_tokens);
  - the plain trainer runs and learns (the ported one is compared with itself: other data order);
  - ported, 1 process x batch 8 and 2 processes x batch 4 with shuffling on end at the same
    parameters (within 1e-5 relative), and only rank 0 prints;
  - at 2 processes, 6 steps + save_state, then load_state + 6 more steps: the losses of steps 7..12
    and the final parameters are bit for bit those of 12 uninterrupted steps; the same from a
    checkpoint saved before the first step (AdamW moments and gradients not allocated yet);
  - the validation losses (the first 16 windows, every 4 steps; acc_accelerator_prepare_tokens_eval
    + acc_accelerator_evaluate_tokens) of 1 x 8 and 2 x 4 agree within 1e-5, and the resumed run's
    are bit for bit the uninterrupted run's; the RNG state (ACC_U64 in register_buffers) resumes;
  - the 2-process checkpoint resumed at 1 process x batch 8 ends at the parameters of the
    uninterrupted 1 x 8 run (within 1e-5 relative), and the warning says "per process" once.
usage: test_porting.py ACCELERATE PLAIN PORTED SOURCE_DIR WORK_DIR"""
import difflib, os, shutil, struct, subprocess, sys

acc, plain, ported, src, work = sys.argv[1:6]
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg)


last_stderr = ""


def run(args, what):
    global last_stderr
    p = subprocess.run(args, capture_output=True, text=True, timeout=100)
    if p.returncode != 0:
        print("FAIL: %s exited %d\nstdout:\n%s\nstderr:\n%s" % (what, p.returncode, p.stdout, p.stderr))
        sys.exit(1)
    last_stderr = p.stderr
    return p.stdout


vals = {}  # the validation lines of the last parse, by step


def parse(out):
    global vals
    steps = [l for l in out.splitlines() if l.startswith("step ")]
    vals = {int(l.split()[1]): float(l.split()[3]) for l in out.splitlines() if l.startswith("val ")}
    digest = [l for l in out.splitlines() if l.startswith("digest ")]
    return steps, [float(x) for x in digest[-1].split()[1:]] if digest else None


def launch(n, B, steps, *extra):
    return parse(run([acc, "launch", "--num_processes", str(n), ported, data, str(B), str(steps)] + list(extra),
                     "ported %d x %d" % (n, B)))


def close(a, b, rel=1e-5):
    return all(abs(x - y) <= rel * (1 + abs(x)) for x, y in zip(a, b))


# 1. the size of the port
a = open(os.path.join(src, "train_plain.c")).read().splitlines()
b = open(os.path.join(src, "train_ported.c")).read().splitlines()
changed = [l for l in difflib.unified_diff(a, b, lineterm="", n=0)
           if l[:1] in "+-" and not l.startswith(("+++", "---"))]
print("changed lines: %d" % len(changed))
check(len(changed) <= 45, "the port changes %d lines, more than 45:\n%s" % (len(changed), "\n".join(changed)))

# 2. a token shard: a noisy deterministic sequence the model can learn
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
data = os.path.join(work, "tokens.bin")
toks, x, s = [], 1, 12345
for i in range(4001):
    s = (s * 1103515245 + 12345) % 2**31
    x = (x * 5 + 3 + (s >> 16) % 3) % 64
    toks.append(x)
with open(data, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))

steps, dig = parse(run([plain, data, "8", "10"], "plain"))
check(len(steps) == 10 and dig is not None, "plain: %d step lines" % len(steps))
first, last = float(steps[0].split()[3]), float(steps[-1].split()[3])
check(last < first, "plain trainer does not learn: %g -> %g" % (first, last))

# 3. 1 x 8 == 2 x 4 with shuffling on; only rank 0 prints
s1, d1 = launch(1, 8, 12)
v1 = vals
s2, d2 = launch(2, 4, 12)
v2 = vals
check(sorted(v1) == [4, 8, 12] and sorted(v2) == [4, 8, 12], "validation at steps %s and %s" % (sorted(v1), sorted(v2)))
check(all(abs(v1[k] - v2.get(k, 0)) <= 1e-5 * (1 + abs(v1[k])) for k in v1), "validation 1 x 8 %s vs 2 x 4 %s" % (v1, v2))
check(v1[8] < v1[4], "the validation loss falls: %s" % v1)
check(len(s1) == 12 and len(s2) == 12, "step lines: %d at 1 process, %d at 2 (rank 1 must be silent)" % (len(s1), len(s2)))
check(d1 is not None and d2 is not None and close(d1, d2), "1 x 8 vs 2 x 4: parameters %s vs %s" % (d1, d2))
check(d1 != parse(run([plain, data, "8", "12"], "plain"))[1], "the ported run must differ from the plain one (shuffled data)")

# 4. interrupted and resumed bit for bit, at 2 processes
ck = os.path.join(work, "ckpt6")
s6, _ = launch(2, 4, 6, ck, "save")
check(s6 == s2[:6], "the first 6 steps of the interrupted run differ")
sr, dr = launch(2, 4, 12, ck, "resume")
check(vals == {k: v2[k] for k in (8, 12)}, "resumed validation %s vs uninterrupted %s" % (vals, v2))
check(sr == s2[6:], "resumed steps 7..12 differ:\n%s\nvs\n%s" % ("\n".join(sr), "\n".join(s2[6:])))
check(dr == d2, "resumed parameters %s differ from uninterrupted %s" % (dr, d2))
ck0 = os.path.join(work, "ckpt0")
launch(2, 4, 0, ck0, "save")
s0, d0 = launch(2, 4, 12, ck0, "resume")
check(s0 == s2 and d0 == d2, "resumed from a checkpoint saved before the first step: differs")

# 5. the 2-process checkpoint resumed at 1 process x 8
s1r, d1r = launch(1, 8, 12, ck, "resume")
warn = [l for l in last_stderr.splitlines() if "resumed a 2-process checkpoint" in l]
check(len(warn) == 1 and warn[0].count("per process") == 1, "the resume warning names batches per process once: %s" % warn)
check(len(s1r) == 6, "resumed at 1 process: %d step lines, expected 6" % len(s1r))
check(d1r is not None and close(d1r, d1), "resumed at 1 process: parameters %s vs %s" % (d1r, d1))

print("porting: %d failed" % failures)
sys.exit(1 if failures else 0)
