#!/usr/bin/env python3
"""Proves that layercheck.py catches what it is meant to catch, on copies of the project.

Usage: planted.py --checker layercheck.py --project DIR [--build DIR] [--cc CC] [--nm NM] --case planted|table

--case planted: copies src/, include/ and docs/ARCHITECTURE.md to a temporary project, runs the
  checker on the copy as it is (the baseline: today's tree may have violations of its own), then
  plants one violation per run (an upward include, an upward call, a circle of two files, a file
  of 1,200 lines) and asserts exit 1 and that the planted violation's message is printed by the
  planted run and not by the baseline. Every run must have read objects (edges > 0).
--case table: the checker must stop with exit 2 and a clear message when the table cannot be
  trusted (no markers, a row for a folder that does not exist, a source folder without a row) or
  when the build dirs hold no object (a check of nothing); and a small clean project passes.
  Needs no build of the project (compiles its own three files).
Exit 0 when every case passed, 1 otherwise.
"""
import argparse, os, re, shutil, subprocess, sys, tempfile

failures = []


def check(ok, what, output):
    print(('ok:   ' if ok else 'FAIL: ') + what)
    if not ok:
        failures.append(what)
        print('  checker output:\n' + ''.join('    ' + l + '\n' for l in output.splitlines()))


def copy_project(args, tmp):
    """A text copy of the parts of the project the checker reads."""
    dst = tempfile.mkdtemp(dir=tmp)
    for d in ('src', 'include'):
        shutil.copytree(os.path.join(args.project, d), os.path.join(dst, d))
    os.makedirs(os.path.join(dst, 'docs'))
    shutil.copy(os.path.join(args.project, 'docs', 'ARCHITECTURE.md'), os.path.join(dst, 'docs'))
    return dst


def write(project, rel, text):
    with open(os.path.join(project, rel), 'w') as f:
        f.write(text)


def compile_into(args, project, tmpbuild, rel):
    """Compiles project/rel into tmpbuild laid out as CMake does: x.dir/<rel>.o."""
    obj = os.path.join(tmpbuild, 'x.dir', rel + '.o')
    os.makedirs(os.path.dirname(obj), exist_ok=True)
    subprocess.run([args.cc, '-c', '-I', os.path.join(project, 'src'), '-I', os.path.join(project, 'include'),
                    '-o', obj, os.path.join(project, rel)], check=True)


def run(args, project, builds):
    """(exit status, output lines, edges) of one checker run."""
    cmd = [sys.executable, args.checker, '--project', project, '--nm', args.nm]
    for b in builds:
        cmd += ['--build', b]
    r = subprocess.run(cmd, capture_output=True, text=True)
    out = r.stdout + r.stderr
    m = re.search(r'(\d+) edges', out)
    return r.returncode, out, int(m.group(1)) if m else 0


def layer_of(project, folder):
    text = open(os.path.join(project, 'docs', 'ARCHITECTURE.md')).read()
    return int(re.search(r'^\|\s*(\d+)\s*\|\s*`src/' + folder + r'/`', text, re.M).group(1))


def planted_cases(args, tmp):
    base = copy_project(args, tmp)
    rc, baseline, edges = run(args, base, [args.build])
    check(rc in (0, 1) and edges > 0, f'baseline run on the unplanted copy (exit {rc}, {edges} edges)', baseline)
    core, train = f'layer {layer_of(base, "core")} core', f'layer {layer_of(base, "train")} train'

    def planted(what, files, compiled, expect):
        """Plants files ({rel: text}), compiles those in compiled, runs the checker; expect is a
        regex that must match a line of the planted run and no line of the baseline."""
        project = copy_project(args, tmp)
        tmpbuild = tempfile.mkdtemp(dir=tmp)
        for rel, text in files.items():
            write(project, rel, text)
        for rel in compiled:
            compile_into(args, project, tmpbuild, rel)
        rc, out, edges = run(args, project, [args.build, tmpbuild])
        new = [l for l in out.splitlines() if re.search(expect, l)]
        old = [l for l in baseline.splitlines() if re.search(expect, l)]
        check(rc == 1 and edges > 0 and new and not old,
              f'{what}: exit {rc}, {edges} edges, reported: {new[0] if new else "nothing"}', out)

    planted('upward include',
            {'src/core/planted_include.c': '/* planted */\n#include "train/grad_sync.h"\n'}, [],
            re.escape(f'upward include: src/core/planted_include.c:2 includes "train/grad_sync.h" '
                      f'({train}) from {core}'))
    planted('upward call',
            {'src/core/planted_call.c': 'void acc_accelerator_create(void);\n'
                                        'void planted_call(void) { acc_accelerator_create(); }\n'},
            ['src/core/planted_call.c'],
            re.escape(f'upward call: src/core/planted_call.c ({core}) uses acc_accelerator_create '
                      f'defined in src/train/') + r'\S+\.c ' + re.escape(f'({train})'))
    planted('circle of two files',
            {'src/core/planted_a.c': 'void pb(void);\nvoid pa(void) { pb(); }\n',
             'src/core/planted_b.c': 'void pa(void);\nvoid pb(void) { pa(); }\n'},
            ['src/core/planted_a.c', 'src/core/planted_b.c'],
            re.escape('cycle: src/core/planted_a.c -(pb)-> src/core/planted_b.c -(pa)-> src/core/planted_a.c'))
    planted('oversized file',
            {'src/core/planted_big.c': ''.join(f'/* line {i} */\n' for i in range(1, 1201))}, [],
            re.escape('too long: src/core/planted_big.c has 1200 lines'))


def table_cases(args, tmp):
    def expect_2(what, project, builds, needle):
        rc, out, _ = run(args, project, builds)
        check(rc == 2 and needle in out, f'{what}: exit {rc}, message names "{needle}"', out)

    empty = tempfile.mkdtemp(dir=tmp)
    p = copy_project(args, tmp)
    doc = os.path.join(p, 'docs', 'ARCHITECTURE.md')
    text = open(doc).read()
    write(p, 'docs/ARCHITECTURE.md', text.replace('<!-- layers:begin -->', '').replace('<!-- layers:end -->', ''))
    expect_2('table without markers', p, [empty], 'no layer table')

    p = copy_project(args, tmp)
    write(p, 'docs/ARCHITECTURE.md', text.replace('<!-- layers:end -->', '| 99 | `src/nowhere/` | x | y |\n<!-- layers:end -->'))
    expect_2('row of a missing folder', p, [empty], 'src/nowhere/')

    p = copy_project(args, tmp)
    write(p, 'docs/ARCHITECTURE.md', text.replace('<!-- layers:end -->', '| x | src/core | x | y |\n<!-- layers:end -->'))
    expect_2('malformed row', p, [empty], 'malformed layer row')

    p = copy_project(args, tmp)
    os.makedirs(os.path.join(p, 'src', 'planted_new'))
    write(p, 'src/planted_new/x.c', 'int planted_x;\n')
    expect_2('source folder without a row', p, [empty], 'src/planted_new/')

    expect_2('build dir without objects', copy_project(args, tmp), [empty], 'found no object file')

    # And the other way round: a small clean project passes (the checker can say yes).
    p, build = tempfile.mkdtemp(dir=tmp), tempfile.mkdtemp(dir=tmp)
    for d in ('docs', 'src/low', 'src/high/sub', 'include'):
        os.makedirs(os.path.join(p, d))
    write(p, 'docs/ARCHITECTURE.md', '<!-- layers:begin -->\n| layer | folder |\n|---|---|\n'
          '| 0 | `src/low/` | x |\n| 1 | `src/high/` | y |\n<!-- layers:end -->\n')
    write(p, 'include/pub.h', 'int low(void);\n')
    write(p, 'src/low/low.h', '#include "pub.h"\n')
    write(p, 'src/low/low.c', '#include "low/low.h"\nint low(void) { return 1; }\n')
    write(p, 'src/high/sub/high.c', '#include "low/low.h"\n#include "../high.h"\nint high(void) { return low(); }\n')
    write(p, 'src/high/high.h', 'int high(void);\n')
    write(p, 'src/main.c', 'int high(void);\nint main(void) { return high(); }\n')
    for rel in ('src/low/low.c', 'src/high/sub/high.c', 'src/main.c'):
        compile_into(args, p, build, rel)
    rc, out, edges = run(args, p, [build])
    check(rc == 0 and edges == 2 and '0 violations' in out, f'clean project: exit {rc}, {edges} edges', out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--checker', required=True)
    ap.add_argument('--project', required=True)
    ap.add_argument('--build', help='the project build dir (for --case planted)')
    ap.add_argument('--cc', default='cc')
    ap.add_argument('--nm', default='nm')
    ap.add_argument('--case', choices=('planted', 'table'), required=True)
    args = ap.parse_args()
    if args.case == 'planted' and not args.build:
        ap.error('--case planted needs --build')
    with tempfile.TemporaryDirectory(prefix='layers-') as tmp:
        (planted_cases if args.case == 'planted' else table_cases)(args, tmp)
    print(f'{len(failures)} failed' if failures else 'all passed')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
