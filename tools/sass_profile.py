#!/usr/bin/env python3
"""Static profile of the kernels in a cubin: code bytes, the loops and what fills them.

A loop body that does not fit the SM's instruction cache is fetched again on every trip: ncu shows it as
`no_instruction` stalls. This lists, per kernel, its code size and its outermost loops of at least --min-kb with their
instructions and bytes (a loop is the blocks that reach its back edge without passing its head, so out-of-line slow
paths such as mbarrier retries count where they loop), the tensor-core instructions in them (HGMMA: wgmma, HMMA:
mma.sync) and, for a cubin built with -lineinfo, the source lines that contribute most instructions.

  nvcc ... -lineinfo -cubin -o x.cubin src/cuda/chunk_bwd/chunk_bwd_bf16.cu
  python3 tools/sass_profile.py x.cubin --kernel chunk_bwd_fused --lines 8

With --sections REGEX (a -lineinfo cubin) it splits each loop's instructions by the sections of the kernel's source
that the lines matching REGEX open (e.g. the fused pass's phase comments): an instruction belongs to the last match at
or above the line it was inlined into (`nvdisasm -gi` names one level), so a helper's code counts where it is called;
code whose line is in a file without a match (a helper called from a helper) counts with the instruction before it.

  python3 tools/sass_profile.py x.cubin --kernel chunk_bwd_fused_kernelI13 --sections "// ---- phase"

With --against BEFORE.cubin (the same source in another tree) it prints, per kernel in both, how each opcode's count
changed, for the kernel and for its loops in order: work that a change put on a hot path shows as its instructions
(ptxas may schedule a branch's arithmetic ahead of the branch and predicate only its stores, so a branch that is
never taken can still add executed instructions to every trip; ncu's smsp__inst_executed.sum confirms it).

With --stalls CSV (ncu's per-instruction export of one kernel, collected with --section SourceCounters:
`ncu -i R.ncu-rep --page source --csv --print-source sass > CSV`) and a cubin of the same source built with the same
flags here (the addresses must match), it prints where the kernel's warps wait: the stall samples by reason, by source
line (the innermost inlined line) and by instruction, each instruction with the scoreboards its control bits wait on
(the SASS scoreboards 0-5: a variable-latency result such as a global or shared load, or a read of its operands) and
the opcodes that set them. A wait on a load's scoreboard at a branch or a loop head, far from the load's first use, is
ptxas keeping no load in flight across that control flow. A cp.async wait (DEPBAR) shows on the instruction after it.
"""
import argparse
import collections
import csv
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


def kernels(listing, outer=None):
    """Yield (name, [(address, (file, line) or None, instruction text)], {label: address}) per kernel: the innermost
    inlined line; with a dict `outer` (and a listing of `nvdisasm -gi`) also outer[address] = (path, line), the
    outermost."""
    name, ins, labels, pending, where, out = None, [], {}, [], None, None
    for raw in listing.splitlines():
        if raw.startswith(".text.") or raw.lstrip().startswith(".section"):  # a kernel's code ends at any section
            if name:
                yield name, ins, labels
                if outer is not None:  # a kernel's addresses start at 0: outer holds the kernel just yielded
                    outer.clear()
            name, ins, labels, pending, where = None, [], {}, [], None
            if raw.startswith(".text."):
                name = raw[len(".text."):].rstrip(":")
            continue
        m = re.search(r'//## File "(.*?)", line (\d+)', raw)
        if m:
            where = (m.group(1).split("/")[-1], int(m.group(2)))
            f, n = re.findall(r'"(.*?)", line (\d+)', raw)[-1]
            out = (f, int(n))
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
            if outer is not None and out:
                outer[addr] = out
    if name:
        yield name, ins, labels


def controls(hex_listing):
    """{kernel: {address: (stall cycles, write scoreboard or None, read scoreboard or None, waited scoreboards)}} from
    `nvdisasm -hex`: sm_70+ control bits, the top 23 bits of an instruction's second 64-bit word."""
    out, name, addr = {}, None, None
    for raw in hex_listing.splitlines():
        if raw.startswith(".text."):
            name = raw[len(".text."):].rstrip(":")
            out[name] = {}
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+.*;\s*/\* 0x[0-9a-f]+ \*/", raw)
        if m:
            addr = int(m.group(1), 16)
            continue
        m = re.match(r"\s+/\* (0x[0-9a-f]{16}) \*/\s*$", raw)
        if m and name and addr is not None:
            ctl = int(m.group(1), 16) >> 41
            wbar, rbar, wait = (ctl >> 5) & 7, (ctl >> 8) & 7, (ctl >> 11) & 0x3F
            out[name][addr] = (ctl & 15, None if wbar == 7 else wbar, None if rbar == 7 else rbar,
                               tuple(b for b in range(6) if wait >> b & 1))
            addr = None
    return out


def stalls(csv_path, ins, ctl, top):
    """Print ncu's per-instruction stall samples (csv_path) by reason, source line and instruction (see the module
    docstring); ins: the kernel's (address, line, text) list, ctl: its controls()."""
    with open(csv_path, newline="") as f:
        rows = [r for r in csv.reader(f)]
    head = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    cols = {c: i for i, c in enumerate(rows[head])}
    reasons = [c for c in rows[head] if c.startswith("stall_") and "Not Issued" not in c]
    data = [r for r in rows[head + 1:] if len(r) == len(rows[head])]
    base = int(data[0][0], 16)
    line_of = {addr: where for addr, where, _ in ins}
    text_of = {addr: text for addr, _, text in ins}
    total, by_line, by_ins = collections.Counter(), collections.defaultdict(collections.Counter), []
    for r in data:
        addr = int(r[0], 16) - base
        c = collections.Counter({x[6:]: int(r[cols[x]] or 0) for x in reasons})
        total.update(c)
        where = line_of.get(addr)
        by_line["%s:%d" % where if where else "?"].update(c)
        by_ins.append((sum(c.values()), addr, c))
    n = sum(total.values()) or 1
    print(f"{n} samples: " + ", ".join(f"{k} {100 * v / n:.1f}%" for k, v in total.most_common(8) if v))
    print("by source line:")
    for where, c in sorted(by_line.items(), key=lambda kv: -sum(kv[1].values()))[:top]:
        print(f"  {100 * sum(c.values()) / n:5.1f}%  {where:36s} " +
              ", ".join(f"{k} {v}" for k, v in c.most_common(3) if v))
    setters = collections.defaultdict(collections.Counter)  # scoreboard -> opcodes that set it (write or read)
    for addr, (_, wb, rb, _) in ctl.items():
        for sb in ({wb, rb} - {None}) if addr in text_of else ():
            setters[sb][opcode(text_of[addr])] += 1
    print("by instruction (scoreboards waited on: the opcodes that set them in this kernel):")
    for s_, addr, c in sorted(by_ins, key=lambda x: -x[0])[:top]:
        waits = ctl.get(addr, (0, None, None, ()))[3]
        sb = "; ".join(f"SB{b}: " + " ".join(f"{o} {k}" for o, k in setters[b].most_common(3)) for b in waits)
        where = line_of.get(addr)
        print(f"  {100 * s_ / n:5.1f}%  {addr:6x}  {text_of.get(addr, '?')[:48]:48s} "
              f"{'%s:%d' % where if where else '?'}  [{', '.join(f'{k} {v}' for k, v in c.most_common(2) if v)}]"
              + (f"  waits {sb}" if sb else ""))


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


def opcode(text):
    """An instruction's opcode, its predicate and modifiers dropped ("@!P1 LDG.E.64 R2, ..." -> "LDG")."""
    return re.match(r"(@!?U?P\w+\s+)?([A-Z0-9_]+)", text).group(2)


def opcodes(ins):
    """Counter of the opcodes of (address, line, text) instructions."""
    return collections.Counter(opcode(t) for _, _, t in ins)


def outer_loops(ins, labels, min_kb):
    """The outermost loops of at least min_kb of code, in address order."""
    big = [b for b in loops(ins, labels) if 16 * len(b) >= min_kb * 1024]
    return sorted((b for b in big if not any(b < o for o in big)), key=min)


def sections(sel, outer, pattern):
    """{(file, line, label): Counter of opcodes} per section: the last line matching pattern at or above each
    instruction's outermost line (in that line's file), or "(above the first)"; where that file has no match, the
    section of the instruction before."""
    marks, per, name = {}, collections.defaultdict(collections.Counter), ("", 0, "(above the first)")
    for addr, _, text in sel:
        f, n = outer.get(addr, ("?", 0))
        if f not in marks:
            try:
                with open(f) as src:
                    marks[f] = [(i + 1, ln.strip()) for i, ln in enumerate(src) if re.search(pattern, ln)]
            except OSError:
                marks[f] = []
        if marks[f]:  # else (a helper's file: nvdisasm names one inlining level) the section of the code before
            name = ("", 0, "(above the first)")
            for i, ln in marks[f]:
                if i <= n:
                    name = (f, i, f"{os.path.basename(f)}:{i} {ln[:60]}")
        per[name][opcode(text)] += 1
    return per


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cubin")
    ap.add_argument("--kernel", default="", help="only kernels whose mangled name contains this")
    ap.add_argument("--min-kb", type=float, default=4.0, help="loops of at least this much code (default 4 KB)")
    ap.add_argument("--lines", type=int, default=0, help="top source lines per loop (needs -lineinfo)")
    ap.add_argument("--against", metavar="BEFORE", help="print the opcode counts' changes against this cubin")
    ap.add_argument("--stalls", metavar="CSV", help="ncu's per-instruction stall samples of --kernel (see above)")
    ap.add_argument("--top", type=int, default=20, help="--stalls: lines and instructions to print (default 20)")
    ap.add_argument("--sections", metavar="REGEX", help="each loop by the source sections REGEX opens (-lineinfo)")
    args = ap.parse_args()
    nvdisasm = find_tool("nvdisasm")
    if not nvdisasm:
        ap.error("nvdisasm not found (PATH, $CUDA_HOME/bin, Triton's bundled copy)")
    def listing(cubin):
        flag = "-gi" if args.sections else "-g"
        return subprocess.run([nvdisasm, flag, cubin], check=True, capture_output=True, text=True).stdout

    before = {}  # name -> (whole kernel's opcodes, [each outermost loop's opcodes, in address order])
    if args.against:
        for name, ins, labels in kernels(listing(args.against)):
            body = outer_loops(ins, labels, args.min_kb)
            before[name] = (opcodes(ins), [opcodes([ins[i] for i in sorted(b)]) for b in body])

    def changes(now, then):
        d = {op: now[op] - then[op] for op in set(now) | set(then) if now[op] != then[op]}
        return " ".join(f"{op} {n:+d}" for op, n in sorted(d.items(), key=lambda x: (-abs(x[1]), x[0]))) or "none"

    if args.stalls:
        ks = [k for k in kernels(listing(args.cubin)) if args.kernel in k[0] and k[1]]
        if len(ks) != 1:
            ap.error(f"--stalls needs --kernel to name one kernel of the cubin ({len(ks)} match)")
        name, ins, _ = ks[0]
        hexl = subprocess.run([nvdisasm, "-hex", args.cubin], check=True, capture_output=True, text=True).stdout
        print(name)
        stalls(args.stalls, ins, controls(hexl).get(name, {}), args.top)
        return

    outer = {}
    for name, ins, labels in kernels(listing(args.cubin), outer):
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
            if args.sections:
                for (_, _, sec), ops in sorted(sections(sel, outer, args.sections).items()):
                    top = ", ".join(f"{op} {n}" for op, n in ops.most_common(5))
                    print(f"    {sum(ops.values()):6d}  {sec}  (HGMMA {ops['HGMMA']}, HMMA {ops['HMMA']}, "
                          f"BAR {ops['BAR']}; {top})")


if __name__ == "__main__":
    main()
