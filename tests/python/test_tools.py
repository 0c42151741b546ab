"""tools/sass_profile.py on a kernel whose loops are known: one loop of 8 mma.sync a trip, with an inner spin loop
of its own, and code outside it; its --stalls mode on a synthetic ncu export of that kernel. Needs nvcc and nvdisasm
(skips without them)."""

import csv
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))

import sass_profile  # noqa: E402

KERNEL = r"""
#include <cstdint>
#ifndef EXTRA
#define EXTRA 0
#endif
__global__ void walk(const uint32_t* a, float* out, int n, volatile int* flag) {
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  uint32_t x[4] = {a[threadIdx.x], a[threadIdx.x + 32], a[threadIdx.x + 64], a[threadIdx.x + 96]};
#pragma unroll 1
  for (int i = 0; i < n; ++i) {
#pragma unroll
    for (int j = 0; j < 8 + EXTRA; ++j)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                   "{%0,%1,%2,%3};"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                   : "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3]), "r"(x[j & 3]), "r"(x[(j + 1) & 3]));
    while (flag[i & 7] == 0) {
    }
  }
  out[threadIdx.x] = d[0] + d[1] + d[2] + d[3];
}
"""


NVCC, NVDISASM = sass_profile.find_tool("nvcc"), sass_profile.find_tool("nvdisasm")


@pytest.mark.skipif(NVCC is None or NVDISASM is None, reason="needs nvcc, nvdisasm")
def test_sass_profile_finds_the_loops(tmp_path):
    src, cubin = tmp_path / "k.cu", tmp_path / "k.cubin"
    src.write_text(KERNEL)
    subprocess.run([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-lineinfo", "-cubin", "-o", str(cubin),
                    str(src)], check=True)
    listing = subprocess.run([NVDISASM, "-g", str(cubin)], check=True, capture_output=True, text=True).stdout
    (name, ins, labels), = [k for k in sass_profile.kernels(listing) if "walk" in k[0]]
    loops = sorted(sass_profile.loops(ins, labels), key=len)
    hmma = [sum("HMMA" in ins[i][2] for i in body) for body in loops]
    assert len(loops) == 2 and hmma == [0, 8], (len(loops), hmma)  # the spin loop, then the walk that holds it
    assert loops[0] < loops[1] and len(loops[1]) < len(ins)
    assert all(ins[i][1] is not None for i in loops[1])  # -lineinfo: every instruction has its source line


@pytest.mark.skipif(NVCC is None or NVDISASM is None, reason="needs nvcc, nvdisasm")
def test_sass_profile_against_names_what_a_change_adds(tmp_path):
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    for name, extra in (("before", 0), ("after", 4)):
        subprocess.run([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-O3", f"-DEXTRA={extra}", "-cubin", "-o",
                        str(tmp_path / f"{name}.cubin"), str(src)], check=True)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "sass_profile.py"), str(tmp_path / "after.cubin"),
                          "--against", str(tmp_path / "before.cubin"), "--min-kb", "0"],
                         check=True, capture_output=True, text=True).stdout
    loop = [line for line in out.splitlines() if line.startswith("  loop 0:")]
    assert len(loop) == 1 and "HMMA +4" in loop[0], out  # the walk's four more mma.sync a trip, in its loop


@pytest.mark.skipif(NVCC is None or NVDISASM is None, reason="needs nvcc, nvdisasm")
def test_sass_profile_stalls_name_the_waited_load(tmp_path):
    """--stalls on a synthetic ncu export: the samples put on the first instruction that waits for the kernel's
    global loads are reported on its source line, with the loads' scoreboard (control bits decoded from nvdisasm -hex)
    and LDG among the opcodes that set it."""
    src, cubin, csv_path = tmp_path / "k.cu", tmp_path / "k.cubin", tmp_path / "k.csv"
    src.write_text(KERNEL)
    subprocess.run([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-lineinfo", "-cubin", "-o", str(cubin),
                    str(src)], check=True)
    listing = subprocess.run([NVDISASM, "-g", str(cubin)], check=True, capture_output=True, text=True).stdout
    (name, ins, _), = [k for k in sass_profile.kernels(listing) if "walk" in k[0]]
    hexl = subprocess.run([NVDISASM, "-hex", str(cubin)], check=True, capture_output=True, text=True).stdout
    ctl = sass_profile.controls(hexl)[name]
    assert set(ctl) == {addr for addr, _, _ in ins}
    ldg = [addr for addr, _, text in ins if text.split()[0].startswith("LDG")]
    sbs = {ctl[a][1] for a in ldg} - {None}
    assert ldg and sbs, (ldg, sbs)
    waiter = next(addr for addr, _, _ in ins if addr > min(ldg) and set(ctl[addr][3]) & sbs)
    base = 0x7F0000001000
    rows = [["Kernel Name", name], ["Address", "Source", "Warp Stall Sampling (All Samples)", "stall_long_sb",
                                     "stall_barrier", "stall_long_sb (Not Issued)"]]
    for addr, _, text in ins:
        n = 90 if addr == waiter else 1
        rows.append([hex(base + addr), text, str(n + 1), str(n), "1", "0"])
    with open(csv_path, "w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "sass_profile.py"), str(cubin), "--kernel",
                          "walk", "--stalls", str(csv_path), "--top", "3"],
                         check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    first = lines[lines.index("by instruction (scoreboards waited on: the opcodes that set them in this kernel):") + 1]
    where = dict((a, w) for a, w, _ in ins)[waiter]
    assert f"{waiter:x}" in first and f"{where[0]}:{where[1]}" in first, out
    assert any(f"SB{b}: " in first and "LDG" in first.split(f"SB{b}: ")[1] for b in sbs), out
    assert lines[1].startswith(f"{sum(91 if a == waiter else 2 for a, _, _ in ins)} samples: long_sb"), out


@pytest.mark.skipif(NVCC is None or NVDISASM is None, reason="needs nvcc, nvdisasm")
def test_sass_profile_sections_split_a_loop(tmp_path):
    """--sections: the walk's loop split by two marker comments, the mma.sync block (8 HMMA) in the first, the spin
    loop (no HMMA) in the second."""
    src, cubin = tmp_path / "k.cu", tmp_path / "k.cubin"
    marked = KERNEL.replace("#pragma unroll\n    for (int j", "    // ---- mma\n#pragma unroll\n    for (int j")
    marked = marked.replace("    while (flag", "    // ---- spin\n    while (flag")
    assert marked.count("// ----") == 2
    src.write_text(marked)
    subprocess.run([NVCC, "-gencode=arch=compute_90a,code=sm_90a", "-O3", "-lineinfo", "-cubin", "-o", str(cubin),
                    str(src)], check=True)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "sass_profile.py"), str(cubin), "--kernel",
                          "walk", "--min-kb", "0", "--sections", "// ----"],
                         check=True, capture_output=True, text=True).stdout
    mma = [line for line in out.splitlines() if "// ---- mma" in line]
    spin = [line for line in out.splitlines() if "// ---- spin" in line]
    assert mma and "(HGMMA 0, HMMA 8, BAR 0;" in mma[0], out
    assert spin and "(HGMMA 0, HMMA 0, BAR 0;" in spin[0], out
