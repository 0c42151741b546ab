"""tools/sass_profile.py on a kernel whose loops are known: one loop of 8 mma.sync a trip, with an inner spin loop
of its own, and code outside it. Needs nvcc and nvdisasm (skips without them)."""

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
