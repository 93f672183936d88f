#!/usr/bin/env python3
"""Every public function declaration (ACC_EXTERN) in include/accelerate/*.h carries `@since X.Y`
in the comment just above it (or on its own lines), libgit2/libuv style (issue 20, R11).
Usage: check_since.py INCLUDE_DIR. Prints each declaration without one; exit 1 if any."""
import glob, os, re, sys

missing, count = [], 0
for path in sorted(glob.glob(os.path.join(sys.argv[1], 'accelerate', '*.h'))):
    lines = open(path, encoding='utf-8').read().split('\n')
    for i, line in enumerate(lines):
        if not re.match(r'\s*ACC_EXTERN\b', line) or '#define' in line:
            continue
        count += 1
        # the text between the previous declaration (a line ending in ';' or '}' or a
        # preprocessor line) and the end of this one
        j = i - 1
        while j >= 0 and not re.search(r'[;}]\s*$', lines[j]) and not lines[j].lstrip().startswith('#'):
            j -= 1
        k = i
        while k < len(lines) and not lines[k].rstrip().endswith(';'):
            k += 1
        if '@since' not in '\n'.join(lines[j + 1:k + 1]):
            missing.append(f'{os.path.relpath(path, sys.argv[1])}:{i + 1}: {line.strip()}')
if count == 0:
    print('check_since: no ACC_EXTERN declaration found: wrong include directory?')
    sys.exit(2)
for m in missing:
    print(f'no @since: {m}')
print(f'check_since: {count} public declarations, {len(missing)} without @since')
sys.exit(1 if missing else 0)
