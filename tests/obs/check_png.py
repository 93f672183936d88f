#!/usr/bin/python3
"""Checks a PNG rendered by rsvg-convert: its size, and that it is not blank (enough pixels
differ from the background, in several colors). Usage: check_png.py FILE WIDTH HEIGHT"""
import struct
import sys
import zlib


def unfilter(raw, width, height, bpp):
    stride = width * bpp
    rows, prev, off = [], bytearray(stride), 0
    for _ in range(height):
        ftype = raw[off]
        cur = bytearray(raw[off + 1:off + 1 + stride])
        off += 1 + stride
        for i in range(stride):
            a = cur[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if ftype == 1:
                cur[i] = (cur[i] + a) & 255
            elif ftype == 2:
                cur[i] = (cur[i] + b) & 255
            elif ftype == 3:
                cur[i] = (cur[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[i] = (cur[i] + pred) & 255
        rows.append(bytes(cur))
        prev = cur
    return rows


def main():
    path, want_w, want_h = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        print("FAIL not a PNG")
        return 1
    off, idat, ihdr = 8, b"", None
    while off < len(data):
        (n,) = struct.unpack(">I", data[off:off + 4])
        kind = data[off + 4:off + 8]
        body = data[off + 8:off + 8 + n]
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        off += 12 + n
    w, h, depth, ctype = ihdr[0], ihdr[1], ihdr[2], ihdr[3]
    if (w, h) != (want_w, want_h):
        print(f"FAIL size {w}x{h}, expected {want_w}x{want_h}")
        return 1
    if depth != 8 or ctype not in (2, 6):
        print(f"FAIL unexpected PNG format: depth {depth} color type {ctype}")
        return 1
    bpp = 4 if ctype == 6 else 3
    rows = unfilter(zlib.decompress(idat), w, h, bpp)
    colors, ink = {}, 0
    for row in rows:
        for x in range(0, w * bpp, bpp):
            px = row[x:x + 3]
            colors[px] = colors.get(px, 0) + 1
    background = max(colors, key=colors.get)
    ink = w * h - colors[background]
    share = ink / (w * h)
    strong = [c for c, k in colors.items() if k > 50 and c != background]
    print(f"{path}: {w}x{h}, {share:.1%} of the pixels drawn, {len(strong)} colors used by > 50 pixels")
    if share < 0.02 or len(strong) < 3:
        print("FAIL the picture is (nearly) blank")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
