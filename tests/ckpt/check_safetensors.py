#!/usr/bin/env python3
"""Independent check of accelerate-c's safetensors files, using only struct and json.

check_safetensors.py OURS THEIRS [INDEX]
  OURS:   a file written by test_ckpt_python (known tensors); every byte of the layout is checked.
  THEIRS: written here, the way other writers do it (unpadded header, JSON in another order than
          the data, spaces in the JSON), for the C reader to open.
  INDEX:  a model.safetensors.index.json written by acc_save_model; it must be byte for byte
          what json.dumps(index, indent=2, sort_keys=True) + "\n" writes (as Accelerate does).
Exit status 0 when everything matches."""
import json
import struct
import sys

SIZES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1, "U64": 8}
errors = []


def check(cond, msg):
    if not cond:
        errors.append(msg)


def main():
    ours, theirs = sys.argv[1], sys.argv[2]
    raw = open(ours, "rb").read()
    (n,) = struct.unpack_from("<Q", raw, 0)
    check(n % 8 == 0, "header length %d is not a multiple of 8" % n)
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = raw[8 + n:]
    check(header.pop("__metadata__") == {"format": "pt", "step": "7"}, "metadata")
    expected = [
        ("w.f32", "F32", [2, 3]), ("w.f64", "F64", [3]), ("w.f16", "F16", [2]), ("w.bf16", "BF16", [2]),
        ("scalar", "I32", []), ("w.i64", "I64", [2]), ("bytes", "U8", [5]), ("rng.u64", "U64", [2]),
        ("empty", "F32", [0]),
    ]
    check(list(header.keys()) == [e[0] for e in expected], "tensor order %s" % list(header.keys()))
    offset = 0
    for name, dtype, shape in expected:
        t = header.get(name, {})
        check(t.get("dtype") == dtype, "%s dtype %s" % (name, t.get("dtype")))
        check(t.get("shape") == shape, "%s shape %s" % (name, t.get("shape")))
        numel = 1
        for d in shape:
            numel *= d
        size = numel * SIZES[dtype]
        check(t.get("data_offsets") == [offset, offset + size], "%s offsets %s, expected %s" %
              (name, t.get("data_offsets"), [offset, offset + size]))
        offset += size
    check(len(data) == offset, "data section is %d bytes, expected %d" % (len(data), offset))

    def at(name):
        return data[header[name]["data_offsets"][0]:]

    check(list(struct.unpack_from("<6f", at("w.f32"))) == [0.5 * i - 1.0 for i in range(6)], "w.f32 values")
    check(list(struct.unpack_from("<3d", at("w.f64"))) == [1.0 / 3.0, -1e300, 42.0], "w.f64 values")
    check(list(struct.unpack_from("<2e", at("w.f16"))) == [1.0, -2.0], "w.f16 values")
    check(list(struct.unpack_from("<2H", at("w.bf16"))) == [0x3F80, 0xBF80], "w.bf16 bits")
    check(struct.unpack_from("<i", at("scalar"))[0] == -123456, "scalar value")
    check(list(struct.unpack_from("<2q", at("w.i64"))) == [-2**63, 2**63 - 1], "w.i64 values")
    check(list(at("bytes")[:5]) == [0, 1, 127, 128, 255], "bytes values")
    check(list(struct.unpack_from("<2Q", at("rng.u64"))) == [0x0123456789abcdef, 2**64 - 1], "rng.u64 values")
    try:  # numpy, where installed, reads "U64" as uint64 (safetensors' own mapping)
        import numpy as np
        off = header["rng.u64"]["data_offsets"]
        arr = np.frombuffer(data[off[0]:off[1]], dtype="<u8")
        check(arr.dtype == np.uint64 and int(arr[1]) == 2**64 - 1, "numpy uint64 %s" % arr)
    except ImportError:
        pass

    # A file as another writer might produce it: unpadded header (length 8k+3), JSON keys in the
    # reverse order of the data, default separators with spaces, no __metadata__.
    body = struct.pack("<2f", 1.25, -7.5) + struct.pack("<d", 2.5)
    hdr = {"b": {"dtype": "F64", "shape": [], "data_offsets": [8, 16]},
           "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    text = json.dumps(hdr)
    while len(text) % 8 != 3:
        text += " "
    with open(theirs, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode() + body)

    if len(sys.argv) > 3:
        text = open(sys.argv[3], "rb").read().decode("ascii")
        index = json.loads(text)
        check(text == json.dumps(index, indent=2, sort_keys=True) + "\n", "index text differs from json.dumps")
        check(index["metadata"]["total_size"] == 4 * (6 + 4 + 10), "total_size %s" % index["metadata"])
        check("\\u00e9" in text, "non-ASCII name not escaped as \\u00e9")
        check(index["weight_map"] == {"a": "model-00001-of-00003.safetensors", "z\u00e9": "model-00002-of-00003.safetensors",
                                      "b": "model-00003-of-00003.safetensors"}, "weight_map %s" % index["weight_map"])

    for e in errors:
        print("FAIL:", e)
    print("check_safetensors.py: %d problems" % len(errors))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
