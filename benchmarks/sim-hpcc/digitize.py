#!/usr/bin/env python3
"""Reads HPCC's published FCT-slowdown curves off its figures.

The HPCC authors publish their ns-3 results (the simulator of
alibaba-edu/High-Precision-Congestion-Control, the paper's settings with
eta = 99 %) as PNG plots on hpcc-group.github.io (figs/fct_<wl><load>_<pct>pct.png):
slowdown (log axis, 1-10) against flow size, the x axis running over the
flows sorted by size in 1 % steps (fct_analysis.py). This script finds each
curve by its colour, column by column, and turns pixel rows back into
slowdowns on the log axis; it writes what benchmarks/sim-hpcc/published.json
holds. Pure Python (zlib only): the PNG is decoded here.

  git clone https://github.com/hpcc-group/hpcc-group.github.io /tmp/hpcc-site
  benchmarks/sim-hpcc/digitize.py /tmp/hpcc-site/figs > benchmarks/sim-hpcc/published.json
"""
import json
import math
import struct
import sys
import zlib


def read_png(path):
    data = open(path, 'rb').read()
    assert data[:8] == b'\x89PNG\r\n\x1a\n', path
    pos, idat, w = 8, b'', 0
    while pos < len(data):
        n, kind = struct.unpack('>I4s', data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if kind == b'IHDR':
            w, h, depth, ctype, _, _, interlace = struct.unpack('>IIBBBBB', body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
            bpp = 4 if ctype == 6 else 3
        elif kind == b'IDAT':
            idat += body
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 255
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pr) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


def px(img, x, y):
    w, h, bpp, rows = img
    r = rows[y]
    return r[x * bpp], r[x * bpp + 1], r[x * bpp + 2]


def near(c, ref, tol):
    return all(abs(a - b) <= tol for a, b in zip(c, ref))


GRAY = (128, 128, 128)
SERIES = {'hpcc': (0, 158, 115),    # "HPCC-INT" (green, dashed)
          'dcqcn': (86, 180, 233)}  # "DCQCN+w" (blue, dotted)
FIGS = {'websearch30': 'fct_wb30', 'hadoop30': 'fct_fb30', 'websearch50': 'fct_wb50'}


def axes(img):
    """The y axis column, the x axis row, the y rows of slowdown 1 and 10
    (from the axis, slowdown 1, and the lowest tick, 2: the top of the axis
    differs between figures), and the x columns of the first bucket (the y
    axis, labelled 0) and the last x tick."""
    w, h, _, _ = img
    # y axis: the column in the left quarter with the most axis-gray pixels.
    ax = max(range(w // 4), key=lambda x: sum(near(px(img, x, y), GRAY, 8) for y in range(0, h, 3)))
    # x axis: the row in the lower half with the most axis-gray pixels.
    ay = max(range(h // 2, h), key=lambda y: sum(near(px(img, x, y), GRAY, 8) for x in range(0, w, 3)))
    # y ticks: gray runs to the right of the axis (beyond its width).
    ticks = [y for y in range(h) if all(near(px(img, ax + d, y), GRAY, 8) for d in range(8, 28))]
    groups = []
    for y in ticks:
        if groups and y - groups[-1][-1] <= 2:
            groups[-1].append(y)
        else:
            groups.append([y])
    centres = [sum(g) / len(g) for g in groups if sum(g) / len(g) < ay - 10]
    y1 = ay  # 1 sits on the x axis
    y2 = centres[-1]
    y10 = y1 - (y1 - y2) / math.log10(2)
    # x ticks: gray runs just above the x axis, right of the y axis.
    cols = [x for x in range(ax + 20, w) if all(near(px(img, x, ay - d), GRAY, 8) for d in range(8, 24))]
    xg = []
    for x in cols:
        if xg and x - xg[-1][-1] <= 2:
            xg[-1].append(x)
        else:
            xg.append([x])
    xs = [sum(g) / len(g) for g in xg]
    return ax, ay, y1, y10, ax, xs[-1]


def curve(img, colour, frame):
    ax, ay, y1, y10, x0, x1 = frame
    w, h, _, _ = img
    out = []
    for k in range(100):
        lo, hi = x0 + k * (x1 - x0) / 100, x0 + (k + 1) * (x1 - x0) / 100
        ys = []
        for x in range(int(math.ceil(lo)), int(math.ceil(hi))):
            col = [y for y in range(h // 12, ay) if near(px(img, x, y), colour, 40)]
            if col:
                ys.append(sorted(col)[len(col) // 2])
        if not ys:
            out.append(None)
            continue
        y = sorted(ys)[len(ys) // 2]
        out.append(round(10 ** ((y1 - y) / (y1 - y10)), 3))
    return out


def main():
    figdir = sys.argv[1] if len(sys.argv) > 1 else '.'
    result = {'source': 'https://github.com/hpcc-group/hpcc-group.github.io figs/fct_*pct.png (results.md: '
                        'the ns-3 simulator of alibaba-edu/High-Precision-Congestion-Control, the HPCC paper\'s '
                        'topology and CC settings, HPCC eta=99%, maxStage=0); read by benchmarks/sim-hpcc/digitize.py',
              'series': {'hpcc': 'HPCC-INT', 'dcqcn': 'DCQCN+w'},
              'x': '1 % buckets of the flows sorted by size (fct_analysis.py)', 'figures': {}}
    for name, stem in FIGS.items():
        fig = {}
        for pct in ('50', '95', '99'):
            img = read_png(f'{figdir}/{stem}_{pct}pct.png')
            frame = axes(img)
            fig['p' + pct] = {s: curve(img, c, frame) for s, c in SERIES.items()}
            print(f'{stem}_{pct}pct: axes {frame}', file=sys.stderr)
        result['figures'][name] = fig
    json.dump(result, sys.stdout, indent=1)
    print()


if __name__ == '__main__':
    main()
