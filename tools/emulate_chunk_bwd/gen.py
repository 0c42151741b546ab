"""Rewrites the CUDA chunk_bwd sources for the host emulation (emu.hpp): kernel launches `k<<<grid, block, smem,
stream>>>(args)` become `emu_launch(k, grid, block, args)`, the dynamic shared memory becomes one host buffer and
the tensor-core products, ldmatrix and the cp.async copies (cuda/common/ptx.cuh) become emu_*.
Usage: gen.py <repo root> <output dir>."""
import os
import sys


def rewrite_launches(s):
    out, i = [], 0
    while True:
        j = s.find("<<<", i)
        if j < 0:
            out.append(s[i:])
            return "".join(out)
        k = j
        while k > 0 and s[k - 1] not in " \n\t;{}(":
            k -= 1
        e = s.find(">>>", j)
        parts, depth, cur = [], 0, ""
        for ch in s[j + 3:e]:
            depth += ch in "([{"
            depth -= ch in ")]}"
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        depth, m = 0, e + 3
        while True:
            depth += s[m] == "("
            if s[m] == ")":
                depth -= 1
                if depth == 0:
                    break
            m += 1
        out.append(s[i:k] + "emu_launch(%s, %s, %s, %s)" % (s[k:j], parts[0], parts[1], s[e + 4:m]))
        i = m + 1


root, dst = sys.argv[1], sys.argv[2]
src = os.path.join(root, "src/cuda")
for name, out in (("chunk_bwd/chunk_bwd_kernels.cuh", "chunk_bwd_kernels.cuh"),
                  ("chunk_bwd/chunk_bwd_mma.cuh", "chunk_bwd_mma.cuh"), ("chunk_bwd/chunk_bwd.cu", "chunk_bwd_host.inc"),
                  ("chunk_fwd/chunk_split.cuh", "chunk_split.cuh")):
    s = open(os.path.join(src, name)).read()
    s = s.replace("extern __shared__ __align__(16) unsigned char smem_raw[];", "unsigned char* smem_raw = g_smem;")
    s = s.replace('#include "cuda/chunk_bwd/chunk_bwd_kernels.cuh"', '#include "chunk_bwd_kernels.cuh"')
    s = s.replace('#include "cuda/chunk_bwd/chunk_bwd_mma.cuh"', '#include "chunk_bwd_mma.cuh"')
    s = s.replace('#include "cuda/chunk_fwd/chunk_split.cuh"', '#include "chunk_split.cuh"')
    for f, e in (("mma_m16n8k16<true>", "mma"), ("chunk_detail::mma16_f32", "mma16_f32"), ("cp_async<16>", "cp_async16"),
                 ("cp_async16_zfill", "cp_async16_zfill"), ("cp_async_commit", "cp_async_commit"),
                 ("cp_async_wait_all", "cp_async_wait_all"), ("cp_async_wait<1>", "cp_async_wait_all"),
                 ("ldsm_x4_t", "ldsm_x4_t"), ("ldsm_x4", "ldsm_x4"), ("st_global_v4", "st_global_v4"),
                 ("named_barrier<128>", "named_barrier<128>"), ("named_barrier<64>", "named_barrier<64>")):
        s = s.replace(f + "(", "emu_%s(" % e)
    open(os.path.join(dst, out), "w").write(rewrite_launches(s))
