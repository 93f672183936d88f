#!/usr/bin/env python3
"""Every configure preset owns every ACC_* option of CMakeLists.txt (issue 31, newuser-4 finding
7): `cmake --preset X` on a folder configured by hand with, say, -DACC_BUILD_TESTS=OFF must set
it back, or the tests run stale binaries. Reads CMakePresets.json (with `inherits`) and the
option() / set(... CACHE ...) lines of the top CMakeLists.txt.
Usage: check_presets.py SOURCE_DIR"""
import json
import re
import sys

src = sys.argv[1]
text = open(f"{src}/CMakeLists.txt").read()
options = set(re.findall(r"^option\((ACC_[A-Z_]+)", text, re.M))
options |= set(re.findall(r"^set\((ACC_[A-Z_]+) \"[^\"]*\" CACHE", text, re.M))
presets = {p["name"]: p for p in json.load(open(f"{src}/CMakePresets.json"))["configurePresets"]}


def cache(name):
    p = presets[name]
    out = {}
    parents = p.get("inherits", [])
    for parent in [parents] if isinstance(parents, str) else parents:
        out.update(cache(parent))
    out.update(p.get("cacheVariables", {}))
    return out


fails = 0
if len(options) < 8:
    print(f"FAIL: only {sorted(options)} found in CMakeLists.txt")
    fails += 1
for name, p in presets.items():
    if p.get("hidden"):
        continue
    missing = sorted(options - set(cache(name)))
    if missing:
        print(f"FAIL: preset '{name}' does not set {', '.join(missing)}")
        fails += 1
print("presets: all checks passed" if not fails else f"{fails} failure(s)")
sys.exit(1 if fails else 0)
