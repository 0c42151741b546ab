"""Rewrites the CUDA chunk_bwd sources and the prefill's intra-chunk kernel for the host emulation (emu.hpp): kernel
launches `k<<<grid, block, smem, stream>>>(args)` become `emu_launch(k, grid, block, args)`, the dynamic shared memory
becomes one host buffer and the tensor-core products, ldmatrix, the cp.async copies (cuda/common/ptx.cuh), the warp
vote, __expf and the ex2 asm become emu_*.
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
        k, angle = j, 0  # back to the start of the kernel's name, its template arguments (spaces there) included
        while k > 0 and (angle > 0 or s[k - 1] not in " \n\t;{}("):
            angle += (s[k - 1] == ">") - (s[k - 1] == "<")
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
                  ("chunk_fwd/chunk_split.cuh", "chunk_split.cuh"),
                  ("chunk_fwd/chunk_fwd_intra.cuh", "chunk_fwd_intra.cuh")):
    s = open(os.path.join(src, name)).read()
    s = s.replace("extern __shared__ __align__(16) unsigned char smem_raw[];", "unsigned char* smem_raw = g_smem;")
    s = s.replace('#include "cuda/chunk_bwd/chunk_bwd_kernels.cuh"', '#include "chunk_bwd_kernels.cuh"')
    s = s.replace('#include "cuda/chunk_bwd/chunk_bwd_mma.cuh"', '#include "chunk_bwd_mma.cuh"')
    s = s.replace('#include "cuda/chunk_fwd/chunk_split.cuh"', '#include "chunk_split.cuh"')
    # exp_ftz (chunk_fwd_intra.cuh): e^x as ex2.approx.ftz(x log2 e)
    s = s.replace('asm("ex2.approx.ftz.f32 %0, %1;\\n" : "=f"(y) : "f"(x * 1.4426950408889634f));', "y = std::exp(x);")
    # mma_m16n8k16<BF16>: the intra-chunk kernel's bf16 instantiation (emu_mma reads bf16 fragments)
    for f, e in (("mma_m16n8k16<true>", "mma"), ("mma_m16n8k16<BF16>", "mma"), ("chunk_detail::mma16_f32", "mma16_f32"),
                 ("mma16_f32<false>", "mma16_f32"), ("__all_sync", "all_sync"), ("__expf", "expf"),
                 ("cp_async<16>", "cp_async16"),
                 ("cp_async16_zfill", "cp_async16_zfill"), ("cp_async_commit", "cp_async_commit"),
                 ("cp_async_wait_all", "cp_async_wait_all"), ("cp_async_wait<1>", "cp_async_wait_all"),
                 ("ldsm_x4_t", "ldsm_x4_t"), ("ldsm_x4", "ldsm_x4"), ("st_global_v4", "st_global_v4"),
                 ("named_barrier<128>", "named_barrier<128>"), ("named_barrier<64>", "named_barrier<64>")):
        s = s.replace(f + "(", "emu_%s(" % e)
    open(os.path.join(dst, out), "w").write(rewrite_launches(s))
