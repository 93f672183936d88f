#!/usr/bin/python3
"""Reads a TensorBoard event file written by accelerate-c with readers nobody here wrote:
python3-crc32c for the TFRecord checksums and protoc --decode (against tfevent.proto) for the
Event messages. Usage: check_tfevents.py EVENT_FILE PROTO_DIR EXPECTATIONS...
Each expectation is a regular expression that must match the decoded text of some record.
Also checks the file name TensorBoard scans for, and that a flipped byte is detected."""
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

import crc32c


def masked(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """Yields the payload of every record; raises ValueError naming the first bad one."""
    with open(path, "rb") as f:
        blob = f.read()
    off, n = 0, 0
    while off < len(blob):
        if off + 12 > len(blob):
            raise ValueError(f"record {n}: truncated header at offset {off}")
        header = blob[off:off + 8]
        (length,) = struct.unpack("<Q", header)
        (lcrc,) = struct.unpack("<I", blob[off + 8:off + 12])
        if masked(header) != lcrc:
            raise ValueError(f"record {n}: length CRC mismatch at offset {off}")
        data = blob[off + 12:off + 12 + length]
        if len(data) != length or off + 16 + length > len(blob):
            raise ValueError(f"record {n}: truncated payload at offset {off}")
        (dcrc,) = struct.unpack("<I", blob[off + 12 + length:off + 16 + length])
        if masked(data) != dcrc:
            raise ValueError(f"record {n}: data CRC mismatch at offset {off}")
        yield data
        off += 16 + length
        n += 1


def decode(data, proto_dir):
    r = subprocess.run(["protoc", "--proto_path=" + proto_dir, "--decode=obs_test.Event", "tfevent.proto"],
                       input=data, capture_output=True, check=False)
    if r.returncode != 0:
        raise ValueError("protoc could not decode a record: " + r.stderr.decode(errors="replace"))
    return r.stdout.decode()


def main():
    path, proto_dir, expectations = sys.argv[1], sys.argv[2], sys.argv[3:]
    failures = []
    name = os.path.basename(path)
    m = re.fullmatch(r"events\.out\.tfevents\.(\d+)\.([^/]+)\.(\d+)\.(\d+)", name)
    if not m:
        failures.append(f"file name {name!r} is not events.out.tfevents.<time>.<host>.<pid>.<n>")
    else:
        if abs(int(m.group(1)) - time.time()) > 86400:
            failures.append(f"time in the file name {m.group(1)} is not now")
        if m.group(2) != socket.gethostname():
            failures.append(f"host in the file name {m.group(2)!r} is not {socket.gethostname()!r}")
    texts = []
    try:
        for data in records(path):
            texts.append(decode(data, proto_dir))
    except ValueError as e:
        failures.append(str(e))
    if texts and 'file_version: "brain.Event:2"' not in texts[0]:
        failures.append("the first record is not the file_version event:\n" + texts[0])
    for exp in expectations:
        if not any(re.search(exp, t, re.S) for t in texts):
            failures.append(f"no record matches {exp!r}")
    # A flipped byte anywhere must be detected.
    tmp = tempfile.mkdtemp()
    try:
        size = os.path.getsize(path)
        for pos in (3, 10, 20, size // 2, size - 2):
            bad = os.path.join(tmp, name)
            shutil.copy(path, bad)
            with open(bad, "r+b") as f:
                f.seek(pos)
                b = f.read(1)
                f.seek(pos)
                f.write(bytes([b[0] ^ 0x10]))
            try:
                list(records(bad))
                failures.append(f"a flipped byte at offset {pos} was not detected")
            except ValueError:
                pass
    finally:
        shutil.rmtree(tmp)
    print(f"{path}: {len(texts)} records decoded")
    for f in failures:
        print("FAIL", f)
    if os.environ.get("SHOW_EVENTS"):
        print("\n---\n".join(texts))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
