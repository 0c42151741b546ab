#!/usr/bin/env python3
"""Static profile of the kernels in a cubin: code bytes, the loops (backward branches) and what fills them.

A loop body that does not fit the SM's instruction cache is fetched from L2 on every trip: ncu shows it as
`no_instruction` stalls. This lists, per kernel, its code size and its outermost loops over --min-kb with the bytes,
the tensor-core instructions (HGMMA: wgmma, HMMA: mma.sync) and, for a cubin built with -lineinfo, the source lines
that contribute most instructions to each loop.

  nvcc ... -lineinfo -cubin -o x.cubin src/cuda/chunk_bwd/chunk_bwd_bf16.cu
  python3 tools/sass_profile.py x.cubin --kernel chunk_bwd_fused --lines 8
"""
import argparse
import collections
import re
import subprocess


def kernels(listing):
    """Yield (name, [(address, (file, line) or None, instruction text)]) per kernel of an nvdisasm listing."""
    name, ins, labels, pending, where = None, [], {}, [], None
    for raw in listing.splitlines():
        if raw.startswith(".text."):
            if name:
                yield name, ins, labels
            name, ins, labels, pending, where = raw[len(".text."):].rstrip(":"), [], {}, [], None
            continue
        m = re.search(r'//## File "(.*?)", line (\d+)', raw)
        if m:
            where = (m.group(1).split("/")[-1], int(m.group(2)))
            continue
        m = re.match(r"^(\.L_x_\d+):", raw)
        if m:
            pending.append(m.group(1))
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", raw)
        if m and name:
            addr = int(m.group(1), 16)
            for label in pending:
                labels[label] = addr
            pending = []
            ins.append((addr, where, m.group(2)))
    if name:
        yield name, ins, labels


def outer_loops(ins, labels, min_bytes):
    loops = []
    for addr, _, text in ins:
        m = re.search(r"\bBRA\b.*?\((\.L_x_\d+)\)", text)
        if m and labels.get(m.group(1), addr) < addr:
            loops.append((labels[m.group(1)], addr))
    big = sorted({(s, e) for s, e in loops if e + 16 - s >= min_bytes})
    return [l for l in big if not any(o != l and o[0] <= l[0] and l[1] <= o[1] for o in big)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubin")
    ap.add_argument("--kernel", default="", help="only kernels whose mangled name contains this")
    ap.add_argument("--min-kb", type=float, default=4.0, help="loops at least this large (default 4 KB)")
    ap.add_argument("--lines", type=int, default=0, help="top source lines per loop (needs -lineinfo)")
    args = ap.parse_args()
    listing = subprocess.run(["nvdisasm", "-g", args.cubin], check=True, capture_output=True, text=True).stdout
    for name, ins, labels in kernels(listing):
        if args.kernel not in name or not ins:
            continue
        size = ins[-1][0] + 16
        print(f"{name}\n  code {size / 1024:.1f} KB, {len(ins)} instructions")
        for s, e in outer_loops(ins, labels, args.min_kb * 1024):
            body = [(w, t) for a, w, t in ins if s <= a <= e]
            ops = collections.Counter(re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_]+)", t).group(2) for _, t in body)
            print(f"  loop 0x{s:x}-0x{e:x}: {(e + 16 - s) / 1024:.1f} KB, {len(body)} instructions, "
                  f"HGMMA {ops['HGMMA']}, HMMA {ops['HMMA']}, BAR {ops['BAR']}")
            lines = collections.Counter(w for w, _ in body if w)
            for (f, line), n in lines.most_common(args.lines):
                print(f"    {n:6d}  {f}:{line}")


if __name__ == "__main__":
    main()
