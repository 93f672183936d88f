#!/usr/bin/env python3
"""The layering check of accelerate-c: src/ must obey the layer table of docs/ARCHITECTURE.md.

Usage: layercheck.py --project DIR --build DIR [--build DIR2 ...] [--max-lines 1000] [--nm NM]

The table (between "<!-- layers:begin -->" and "<!-- layers:end -->") gives every top folder of
src/ a layer number, 0 the lowest; a subfolder (src/device/cuda/) has its top folder's layer.
A file may use its own layer and the layers below it, never one above. Checked:
  - includes: every quoted #include of the sources under src/ (text), upward or unresolved;
  - calls: the symbols of the built objects (nm): A uses a symbol that only B defines, B above A;
  - circles between files (any layers) and between folders, with one cycle and its symbols;
  - files over --max-lines lines, and more than two source files loose in src/.
Exit 0: no violation; 1: violations (printed one a line); 2: the check could not run (no table,
a malformed one, no object of any source under the build dirs, nm failing).
"""
import argparse, os, re, subprocess, sys
from collections import defaultdict, deque

SOURCE_EXTS = ('.c', '.h', '.cu', '.cc', '.cpp')   # the text checked under src/
COMPILED_EXTS = ('.c', '.cu', '.cc', '.cpp')       # the files that give an object
BEGIN, END = '<!-- layers:begin -->', '<!-- layers:end -->'
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
# nm -P letters: a global definition (uppercase; G/S are small-data sections on some targets,
# u a GNU unique global) and a use (U, or w/v: a weak reference to a symbol defined elsewhere).
DEFINES, USES = set('TDBRCVWGSu'), set('Uwv')


def die(msg):
    print(f'layercheck: error: {msg}', file=sys.stderr)
    sys.exit(2)


def read_table(project):
    """{folder: layer} from the table in docs/ARCHITECTURE.md; exits 2 when it is missing or bad."""
    path = os.path.join(project, 'docs', 'ARCHITECTURE.md')
    try:
        with open(path, encoding='utf-8') as f:
            lines = [line.strip() for line in f]
    except OSError as e:
        die(f'cannot read the layer table: {path}: {e.strerror}')
    if lines.count(BEGIN) != 1 or lines.count(END) != 1 or lines.index(BEGIN) > lines.index(END):
        die(f'{path}: no layer table: expected one line "{BEGIN}", then the table, then one line "{END}"')
    first = lines.index(BEGIN) + 1
    layers, header_seen = {}, False
    for n, line in enumerate(lines[first:lines.index(END)], first + 1):
        if not line or set(line) <= set('|-: '):       # blank or the |---|---| separator
            continue
        cells = [c.strip() for c in line.strip('|').split('|')] if line.startswith('|') else []
        if len(cells) >= 2 and not cells[0].isdigit() and not header_seen and not layers:
            header_seen = True                          # | layer | folder | ... |
            continue
        folder = re.fullmatch(r'`src/([A-Za-z0-9_.-]+)/`', cells[1]) if len(cells) >= 2 else None
        if not (folder and cells[0].isdigit()):
            die(f'{path}:{n}: malformed layer row (expected "| N | `src/<folder>/` | ... |"): {line}')
        if folder.group(1) in layers:
            die(f'{path}:{n}: src/{folder.group(1)}/ has two rows')
        layers[folder.group(1)] = int(cells[0])
    if not layers:
        die(f'{path}: the layer table between "{BEGIN}" and "{END}" has no rows')
    src = os.path.join(project, 'src')
    for folder in sorted(layers):
        if not os.path.isdir(os.path.join(src, folder)):
            die(f'{path}: the row of src/{folder}/ names a folder that does not exist')
    for folder in sorted(os.listdir(src)):
        if os.path.isdir(os.path.join(src, folder)) and folder not in layers and any(
                f.endswith(SOURCE_EXTS) for _, _, fs in os.walk(os.path.join(src, folder)) for f in fs):
            die(f'{path}: src/{folder}/ holds sources but has no row in the layer table')
    return layers


def list_sources(project):
    """Every source under src/, as project-relative paths with '/'."""
    out = []
    for root, dirs, files in os.walk(os.path.join(project, 'src')):
        dirs.sort()
        rel = os.path.relpath(root, project).replace(os.sep, '/')
        out += [f'{rel}/{f}' for f in sorted(files) if f.endswith(SOURCE_EXTS)]
    return out


def object_source(build, path):
    """(source, target, owned) of a CMake object file, or None. CMake writes the object of
    source S of a target declared in directory D (relative to the top) as
    <build>/D/CMakeFiles/<target>.dir/<S relative to D>.o, spelling '..' as '__':
    CMakeFiles/accelerate_objs.dir/src/core/rng.c.o, tests/cli/CMakeFiles/t.dir/__/__/src/cli/x.c.o,
    src/device/cuda/CMakeFiles/accelerate_cuda.dir/cuda_device.c.o. source is project-relative;
    target names the target (its .dir); owned is false when the target reaches out of its own
    directory for the source (a test compiling a file of src/ into itself)."""
    parts = os.path.relpath(path, build).replace(os.sep, '/').split('/')
    at = next((i for i, p in enumerate(parts) if p.endswith('.dir')), None)
    if at is None or at + 1 == len(parts):
        return None
    where = parts[:at - 1] if at > 0 and parts[at - 1] == 'CMakeFiles' else parts[:at]
    rest = ['..' if p == '__' else p for p in parts[at + 1:]]
    src = os.path.normpath('/'.join(where + rest)).replace(os.sep, '/')
    if not src.endswith(tuple(e + '.o' for e in COMPILED_EXTS)):
        return None
    return src[:-2], os.path.join(build, *parts[:at + 1]), '..' not in rest


def find_objects(project, builds):
    """{source: (object, target)}, one object per source that exists in the project (stale
    objects of moved or deleted files are skipped). Of several objects of one source, the one of
    the target that owns it is read, then the newest."""
    objs, rank = {}, {}
    for build in builds:
        if not os.path.isdir(build):
            die(f'build dir {build} does not exist')
        for root, dirs, files in os.walk(build):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith('.o'):
                    continue
                p = os.path.join(root, f)
                found = object_source(build, p)
                if not found or not found[0].startswith('src/') or \
                        not os.path.isfile(os.path.join(project, found[0])):
                    continue
                src, target, owned = found
                r = (owned, os.path.getmtime(p))
                if src not in objs or r > rank[src]:
                    objs[src], rank[src] = (p, target), r
    return objs


def read_symbols(objs, nm):
    """({symbol: {sources defining it}}, {source: {symbols it uses}}) from nm -P -A, which starts
    every line with "<object>: " (one nm for a hundred objects at a time: a process each is slow)."""
    definers, uses = defaultdict(set), defaultdict(set)
    source_of = {obj: src for src, (obj, _) in objs.items()}
    paths = sorted(source_of)
    for i in range(0, len(paths), 100):
        try:
            r = subprocess.run([nm, '-P', '-A'] + paths[i:i + 100], capture_output=True, text=True)
        except OSError as e:
            die(f'cannot run {nm}: {e.strerror}')
        if r.returncode != 0:
            die(f'{nm} -P failed: {r.stderr.strip()}')
        for line in r.stdout.splitlines():
            obj, _, rest = line.partition(': ')
            fields = rest.split()
            if obj not in source_of or len(fields) < 2:
                die(f'unexpected line from {nm} -P -A: {line}')
            if fields[1] in DEFINES:
                definers[fields[0]].add(source_of[obj])
            elif fields[1] in USES:
                uses[source_of[obj]].add(fields[0])
    return definers, uses


def reachable(start, adj):
    seen, todo = set(), [start]
    while todo:
        for w in adj.get(todo.pop(), ()):
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def circles(adj):
    """The strongly connected components of more than one node, each sorted. The graphs here are
    small (a hundred files), so plain reachability sets are enough: u and v share a component
    when each reaches the other."""
    nodes = sorted(set(adj) | {w for ws in adj.values() for w in ws})
    reach = {v: reachable(v, adj) for v in nodes}
    comps, done = [], set()
    for v in nodes:
        if v not in done:
            comp = sorted({v} | {u for u in reach[v] if v in reach[u]})
            done.update(comp)
            if len(comp) > 1:
                comps.append(comp)
    return comps


def cycle_in(comp, adj):
    """One shortest cycle through comp[0] that stays inside comp (breadth first): [a, b, ..., a]."""
    start, inside = comp[0], set(comp)
    parent, queue = {start: None}, deque([start])
    while queue:
        u = queue.popleft()
        for w in sorted(adj[u]):
            if w == start:                             # back at the start: walk the parents
                path = [u]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1] + [start]
            if w in inside and w not in parent:
                parent[w] = u
                queue.append(w)
    raise AssertionError('a strongly connected component without a cycle')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--project', required=True, help='the source tree (holds src/ and docs/)')
    ap.add_argument('--build', required=True, action='append', help='a CMake build dir (repeatable)')
    ap.add_argument('--max-lines', type=int, default=1000, help='the most lines a source file may have')
    ap.add_argument('--nm', default='nm', help='the nm program (default: nm)')
    args = ap.parse_args()
    project = args.project
    table = read_table(project)
    loose_layer = max(table.values()) + 1              # a file loose in src/ sits above all folders

    def folder(f):                                     # src/a/b/x.c -> a; src/x.c -> itself
        parts = f.split('/')
        return parts[1] if len(parts) > 2 else f

    def layer(f):
        return table[folder(f)] if folder(f) in table else loose_layer

    def where(f):                                      # "layer 6 train"
        return f'layer {layer(f)} {folder(f) if folder(f) in table else "(loose in src/)"}'

    sources = list_sources(project)
    violations = []

    def report(msg):
        violations.append(msg)
        print(msg)

    # Includes: src-rooted names first ("core/internal.h"), then beside the file, then include/.
    for f in sources:
        with open(os.path.join(project, f), errors='replace') as fh:
            text = fh.read().splitlines()
        for n, line in enumerate(text, 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            name = m.group(1)
            found = None
            for base in ('src', os.path.dirname(f), 'include'):
                cand = os.path.normpath(os.path.join(base, name)).replace(os.sep, '/')
                if os.path.isfile(os.path.join(project, cand)):
                    found = cand
                    break
            if found is None:
                report(f'unresolved include: {f}:{n} includes "{name}" (not under src/, beside the file or in include/)')
            elif found.startswith('include/'):
                continue                               # the public headers: allowed everywhere
            elif not found.startswith('src/'):
                report(f'include outside src/ and include/: {f}:{n} includes "{name}" ({found})')
            elif layer(found) > layer(f):
                report(f'upward include: {f}:{n} includes "{name}" ({where(found)}) from {where(f)}')

    # Calls: the file graph from the objects' symbols.
    objs = find_objects(project, args.build)
    if not objs:
        die('found no object file of any source under src/ in ' + ', '.join(args.build) +
            ' (not a build dir of this project, or not built yet): nothing would be checked')
    definers, uses = read_symbols(objs, args.nm)
    edges = defaultdict(lambda: defaultdict(set))      # a -> b -> the symbols a uses from b
    target = {src: t for src, (_, t) in objs.items()}
    for a in sorted(uses):
        for sym in uses[a]:
            # The file that alone defines sym; when several do (a module with its own copies of
            # core functions), the one that alone defines it in a's own target, as the linker
            # would pick. Otherwise sym names no single file: no edge.
            defs = definers.get(sym, set())
            near = {b for b in defs if target[b] == target[a]}
            if len(defs) == 1 or len(near) == 1:
                b = next(iter(defs if len(defs) == 1 else near))
                if b != a:
                    edges[a][b].add(sym)
    n_edges = sum(len(bs) for bs in edges.values())
    for a in sorted(edges):
        for b in sorted(edges[a]):
            if layer(b) > layer(a):
                syms = sorted(edges[a][b])
                more = f' (and {len(syms) - 1} more: {", ".join(syms[1:])})' if len(syms) > 1 else ''
                report(f'upward call: {a} ({where(a)}) uses {syms[0]} defined in {b} ({where(b)}){more}')

    # Circles between files (same folder included), then between folders.
    def first_sym(a, b):
        return sorted(edges[a][b])[0]

    for comp in circles(edges):
        cyc = cycle_in(comp, edges)
        hops = ''.join(f' -({first_sym(a, b)})-> {b}' for a, b in zip(cyc, cyc[1:]))
        report(f'file circle ({len(comp)} files): {" ".join(comp)}\n  cycle: {cyc[0]}{hops}')
    fedges, example = defaultdict(set), {}             # folder graph; one file edge per folder edge
    for a in sorted(edges):
        for b in sorted(edges[a]):
            if folder(a) != folder(b):
                fedges[folder(a)].add(folder(b))
                example.setdefault((folder(a), folder(b)), f'{a} uses {first_sym(a, b)} of {b}')
    for comp in circles(fedges):
        cyc = cycle_in(comp, fedges)
        hops = ''.join(f' -({example[a, b]})-> {b}' for a, b in zip(cyc, cyc[1:]))
        report(f'folder circle ({len(comp)} folders): {" ".join(comp)}\n  cycle: {cyc[0]}{hops}')

    # Size, and the files loose in src/.
    for f in sources:
        with open(os.path.join(project, f), 'rb') as fh:
            count = sum(1 for _ in fh)
        if count > args.max_lines:
            report(f'too long: {f} has {count} lines (at most {args.max_lines})')
    loose = [f for f in sources if f.count('/') == 1 and f.endswith(COMPILED_EXTS)]
    if len(loose) > 2:
        report(f'loose files: {len(loose)} source files directly in src/ (at most 2): {" ".join(loose)}')

    unbuilt = [f for f in sources if f.endswith(COMPILED_EXTS) and f not in objs]
    if unbuilt:
        print(f'note: {len(unbuilt)} sources have no object in the build dirs, their calls are not '
              f'checked: {" ".join(unbuilt)}')
    print(f'layercheck: {len(sources)} files under src/, {len(objs)} objects, {n_edges} edges, '
          f'{len(violations)} violations')
    return 1 if violations else 0


if __name__ == '__main__':
    sys.exit(main())
