#!/usr/bin/env python3
"""Static profile of the kernels in a cubin: code bytes, the loops and what fills them.

A loop body that does not fit the SM's instruction cache is fetched again on every trip: ncu shows it as
`no_instruction` stalls. This lists, per kernel, its code size and its outermost loops of at least --min-kb with their
instructions and bytes (a loop is the blocks that reach its back edge without passing its head, so out-of-line slow
paths such as mbarrier retries count where they loop), the tensor-core instructions in them (HGMMA: wgmma, HMMA:
mma.sync) and, for a cubin built with -lineinfo, the source lines that contribute most instructions.

  nvcc ... -lineinfo -cubin -o x.cubin src/cuda/chunk_bwd/chunk_bwd_bf16.cu
  python3 tools/sass_profile.py x.cubin --kernel chunk_bwd_fused --lines 8

With --against BEFORE.cubin (the same source in another tree) it prints, per kernel in both, how each opcode's count
changed, for the kernel and for its loops in order: work that a change put on a hot path shows as its instructions
(ptxas may schedule a branch's arithmetic ahead of the branch and predicate only its stores, so a branch that is
never taken can still add executed instructions to every trip; ncu's smsp__inst_executed.sum confirms it).
"""
import argparse
import collections
import importlib.util
import os
import re
import shutil
import subprocess


def find_tool(name):
    """A CUDA binary tool: on PATH, in $CUDA_HOME/bin or /usr/local/cuda/bin, or (nvdisasm) the copy Triton bundles;
    None where there is none."""
    found = shutil.which(name)
    dirs = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin"), "/usr/local/cuda/bin"]
    spec = importlib.util.find_spec("triton")
    if spec and spec.submodule_search_locations:
        dirs.append(os.path.join(spec.submodule_search_locations[0], "backends", "nvidia", "bin"))
    for d in dirs:
        if not found and os.access(os.path.join(d, name), os.X_OK):
            found = os.path.join(d, name)
    return found


def kernels(listing):
    """Yield (name, [(address, (file, line) or None, instruction text)], {label: address}) per kernel."""
    name, ins, labels, pending, where = None, [], {}, [], None
    for raw in listing.splitlines():
        if raw.startswith(".text.") or raw.lstrip().startswith(".section"):  # a kernel's code ends at any section
            if name:
                yield name, ins, labels
            name, ins, labels, pending, where = None, [], {}, [], None
            if raw.startswith(".text."):
                name = raw[len(".text."):].rstrip(":")
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


def loops(ins, labels):
    """The natural loops' instruction index sets: a branch to an earlier address whose target dominates it."""
    target = {}
    for i, (addr, _, text) in enumerate(ins):
        m = re.search(r"\bBRA\b.*?\((\.L_x_\d+)\)", text)
        if m and m.group(1) in labels:
            target[i] = labels[m.group(1)]
    index = {addr: i for i, (addr, _, _) in enumerate(ins)}
    preds, succs = collections.defaultdict(list), collections.defaultdict(list)
    for i, (addr, _, text) in enumerate(ins):
        ends = re.match(r"(BRA|EXIT|RET)\b", text) is not None  # unpredicated: no fall-through
        if i + 1 < len(ins) and not ends:
            preds[i + 1].append(i), succs[i].append(i + 1)
        if i in target and target[i] in index:
            preds[index[target[i]]].append(i), succs[i].append(index[target[i]])
    reached, todo = {0}, [0]  # from the entry (the padding after the last EXIT is not)
    while todo:
        for j in succs[todo.pop()]:
            if j not in reached:
                reached.add(j)
                todo.append(j)
    found = []
    for i, t in target.items():
        if t > ins[i][0] or t not in index or i not in reached:
            continue
        head, body, todo = index[t], {index[t], i}, [i]
        while todo:  # everything that reaches the back edge without passing the head
            for p in preds[todo.pop()]:
                if p not in body:
                    body.add(p)
                    todo.append(p)
        if head == 0 or 0 not in body:  # else the head does not dominate the edge (a slow path's return): no loop
            found.append(frozenset(body))
    return set(found)


def opcodes(ins):
    """Counter of the opcodes (predicate and modifiers dropped) of (address, line, text) instructions."""
    return collections.Counter(re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_]+)", t).group(2) for _, _, t in ins)


def outer_loops(ins, labels, min_kb):
    """The outermost loops of at least min_kb of code, in address order."""
    big = [b for b in loops(ins, labels) if 16 * len(b) >= min_kb * 1024]
    return sorted((b for b in big if not any(b < o for o in big)), key=min)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubin")
    ap.add_argument("--kernel", default="", help="only kernels whose mangled name contains this")
    ap.add_argument("--min-kb", type=float, default=4.0, help="loops of at least this much code (default 4 KB)")
    ap.add_argument("--lines", type=int, default=0, help="top source lines per loop (needs -lineinfo)")
    ap.add_argument("--against", metavar="BEFORE", help="print the opcode counts' changes against this cubin")
    args = ap.parse_args()
    nvdisasm = find_tool("nvdisasm")
    if not nvdisasm:
        ap.error("nvdisasm not found (PATH, $CUDA_HOME/bin, Triton's bundled copy)")
    def listing(cubin):
        return subprocess.run([nvdisasm, "-g", cubin], check=True, capture_output=True, text=True).stdout

    before = {}  # name -> (whole kernel's opcodes, [each outermost loop's opcodes, in address order])
    if args.against:
        for name, ins, labels in kernels(listing(args.against)):
            body = outer_loops(ins, labels, args.min_kb)
            before[name] = (opcodes(ins), [opcodes([ins[i] for i in sorted(b)]) for b in body])

    def changes(now, then):
        d = {op: now[op] - then[op] for op in set(now) | set(then) if now[op] != then[op]}
        return " ".join(f"{op} {n:+d}" for op, n in sorted(d.items(), key=lambda x: (-abs(x[1]), x[0]))) or "none"

    for name, ins, labels in kernels(listing(args.cubin)):
        if args.kernel not in name or not ins:
            continue
        if args.against:
            if name in before:
                print(f"{name}\n  {len(ins)} instructions ({sum(before[name][0].values())} before): "
                      f"{changes(opcodes(ins), before[name][0])}")
                now_loops = [opcodes([ins[i] for i in sorted(b)]) for b in outer_loops(ins, labels, args.min_kb)]
                for k, (now, then) in enumerate(zip(now_loops, before[name][1])):
                    print(f"  loop {k}: {sum(now.values())} ({sum(then.values())} before): {changes(now, then)}")
            continue
        ops = opcodes(ins)
        print(f"{name}\n  code {(ins[-1][0] + 16) / 1024:.1f} KB, {len(ins)} instructions, HGMMA {ops['HGMMA']}, "
              f"HMMA {ops['HMMA']}")
        for body in outer_loops(ins, labels, args.min_kb):
            sel = [ins[i] for i in sorted(body)]
            ops = opcodes(sel)
            print(f"  loop at 0x{sel[0][0]:x}: {16 * len(sel) / 1024:.1f} KB, {len(sel)} instructions, "
                  f"HGMMA {ops['HGMMA']}, HMMA {ops['HMMA']}, BAR {ops['BAR']}")
            for (f, line), n in collections.Counter(w for _, w, _ in sel if w).most_common(args.lines):
                print(f"    {n:6d}  {f}:{line}")


if __name__ == "__main__":
    main()
