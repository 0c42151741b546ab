"""Rewrites the CUDA chunk_bwd sources, the prefill's kernels, the recurrent wy kernels (wy_kernel.cuh and, where
the branch has it, wy_mma_kernel.cuh), the direct ones (direct_kernel.cuh, direct_pipe_kernel.cuh) and mixer_decode's
pipe kernel (mixer_pipe_kernel.cuh) for the host
emulation (emu.hpp): kernel launches
`k<<<grid, block, smem, stream>>>(args)` become `emu_launch(k, grid, block, args)`, the dynamic shared memory becomes
one host buffer and the tensor-core products, ldmatrix, the cp.async copies (cuda/common/ptx.cuh), the warp
vote, __expf and the ex2 asm become emu_*; the register pins of the wy kernel (wy::opaque) become no-ops and its
%nctaid.x read gridDim.x.
The Hopper headers (cuda/common/wgmma.cuh, mbarrier.cuh, tma.cuh) are rewritten into <output dir>/cuda/common/, which
run.sh puts first on the include path: every function there whose body is inline PTX forwards to the model of the
same name in emu_sm90.hpp (emu::wg::, emu::mbar::, emu::tma::), so that the kernels' calls stay as written and a new
PTX helper fails to compile until emu_sm90.hpp models it; setmaxnreg and prefetch.tensormap become no-ops.
Usage: gen.py <repo root> <output dir>."""
import os
import re
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


def matching(s, i, open_ch, close_ch):
    """The index just past the bracket that closes the one at s[i]."""
    depth = 0
    while True:
        depth += (s[i] == open_ch) - (s[i] == close_ch)
        i += 1
        if depth == 0:
            return i


def split_top(s):
    """s split at its commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in s:
        depth += (ch in "([{<") - (ch in ")]}>")
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in parts + [cur] if p.strip()]


def param_name(p):
    """The name a parameter declares: `float (&d)[32]` -> d, `uint64_t* bar` -> bar, `int n = 0` -> n."""
    p = p.split("=")[0]
    m = re.search(r"\(\s*[&*]\s*(\w+)\s*\)", p)
    return m.group(1) if m else re.findall(r"\w+", p)[-1]


NOOP_PTX = ("setmaxnreg", "prefetch.tensormap")  # register reallocation and map prefetch: no effect on the result


def emulate_header(s, ns):
    """Every `__device__ __forceinline__` function of s whose body holds inline PTX forwards to ::emu::<ns>::<name>."""
    out, i = [], 0
    for m in re.finditer(r"(template\s*<([^>]*)>\s*)?__device__\s+__forceinline__\s+[^;{]*?(\w+)\s*\(", s):
        if m.start() < i:
            continue
        args_end = matching(s, m.end() - 1, "(", ")")
        body = s.find("{", args_end)
        if s[args_end:body].strip():  # (a declaration, or something this parser does not know)
            continue
        body_end = matching(s, body, "{", "}")
        if "asm" not in s[body:body_end]:
            continue
        names = [param_name(p) for p in split_top(s[m.end():args_end - 1])]
        targs = "<%s>" % ", ".join(param_name(p) for p in split_top(m.group(2))) if m.group(2) else ""
        if any(x in s[body:body_end] for x in NOOP_PTX):
            fwd = "{}"
        else:
            fwd = "{ return ::emu::%s::%s%s(%s); }" % (ns, m.group(3), targs, ", ".join(names))
        out.append(s[i:body] + fwd)
        i = body_end
    out.append(s[i:])
    return "".join(out)


root, dst = sys.argv[1], sys.argv[2]
src = os.path.join(root, "src/cuda")
# (source, generated name); sources a branch does not have are skipped. The generated files include each other.
SOURCES = (("chunk_bwd/chunk_bwd_kernels.cuh", "chunk_bwd_kernels.cuh"), ("chunk_bwd/chunk_bwd_mma.cuh", "chunk_bwd_mma.cuh"),
           ("chunk_bwd/chunk_bwd_state_wg.cuh", "chunk_bwd_state_wg.cuh"),
           ("chunk_bwd/chunk_bwd_dstate_wg.cuh", "chunk_bwd_dstate_wg.cuh"),
           ("chunk_bwd/chunk_bwd_grads_wg.cuh", "chunk_bwd_grads_wg.cuh"),
           ("chunk_bwd/chunk_bwd_fused.cuh", "chunk_bwd_fused.cuh"), ("chunk_bwd/chunk_bwd.cu", "chunk_bwd_host.inc"),
           ("chunk_fwd/chunk_fwd_common.cuh", "chunk_fwd_common.cuh"), ("chunk_fwd/chunk_split.cuh", "chunk_split.cuh"),
           ("chunk_fwd/chunk_fwd_intra.cuh", "chunk_fwd_intra.cuh"),
           ("chunk_fwd/chunk_fwd_state_wg.cuh", "chunk_fwd_state_wg.cuh"), ("chunk_fwd/chunk_fwd_state.cuh", "chunk_fwd_state.cuh"),
           ("chunk_fwd/chunk_fwd.cu", "chunk_fwd_host.inc"), ("recurrent/wy_kernel.cuh", "wy_kernel.cuh"),
           ("recurrent/wy_mma_kernel.cuh", "wy_mma_kernel.cuh"), ("recurrent/direct_kernel.cuh", "direct_kernel.cuh"),
           ("recurrent/direct_pipe_kernel.cuh", "direct_pipe_kernel.cuh"),
           ("mixer_decode/mixer_pipe_kernel.cuh", "mixer_pipe_kernel.cuh"))
for name, out in SOURCES:
    if not os.path.exists(os.path.join(src, name)):
        continue
    s = open(os.path.join(src, name)).read()
    # the dynamic shared memory (extern __shared__ unsigned char x[]): the host buffer
    s = re.sub(r"extern __shared__\s+(?:__align__\(\d+\)\s+)?unsigned char\s+(\w+)\[\];",
               r"unsigned char* \1 = g_smem;", s)
    # direct_pipe's stage mbarriers (a static __shared__ array): at the end of the host shared memory, where the
    # mbarrier model of emu_sm90.hpp finds them (its ring of stages starts at offset 0)
    s = s.replace("__shared__ uint64_t s_full[S];",
                  "uint64_t* s_full = reinterpret_cast<uint64_t*>(g_smem + sizeof(g_smem) - 8 * S);")
    # an mma.sync m16n8k16 written inline (16-bit operands, fp32 accumulators d[0..3] += a[0..3] b0 b1; the string may
    # be split into several literals): emu_mma
    s = re.sub(r'asm(?:\s+volatile)?\s*\(\s*"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.(bf16|f16)\.\1\.f32[^"]*"'
               r'(?:\s*"[^"]*")*\s*:\s*"\+f"\((\w+)\[0\]\)(?:\s*,\s*"\+f"\(\2\[\d\]\))*\s*'
               r':\s*"r"\((\w+)\[0\]\)(?:\s*,\s*"r"\(\3\[\d\]\))*\s*,\s*"r"\((\w+)\)\s*,\s*"r"\((\w+)\)\s*\);',
               lambda m: "emu_mma<%s>(%s, %s, %s, %s);" % ("true" if m.group(1) == "bf16" else "false", m.group(2),
                                                         m.group(3), m.group(4), m.group(5)), s)
    for other, gen in SOURCES:
        if other.endswith(".cuh"):
            s = s.replace('#include "cuda/%s"' % other, '#include "%s"' % gen)
    # empty asm statements that pin a value for the scheduler (asm volatile("" : "+f"(x))): no effect here
    s = re.sub(r'asm volatile\(""\s*:[^;]*\);', ";", s)
    # wy::opaque: a register pin (mov x, x) that hides a value's origin from the compiler; wy::grid_ctas: %nctaid.x
    s = re.sub(r'asm volatile\("mov\.b32 %0, %0;"\s*:[^;]*\);', ";", s)
    s = re.sub(r'asm volatile\("mov\.u32 %0, %%nctaid\.x;"\s*:\s*"=r"\((\w+)\)\);', r"\1 = int32_t(gridDim.x);", s)
    # direct::unpack (direct_kernel.cuh): the packed 16-bit state element e widened (bf16: its 16 bits moved into the
    # high half; f16: cvt.f32.f16 of the low or high half), whichever instruction the device form uses
    s = re.sub(r"  float f;\n  if constexpr \(std::is_same_v<H2, __nv_bfloat162>\) \{  // bf16 -> fp32.*?\n  return f;",
               "  if constexpr (std::is_same_v<H2, __nv_bfloat162>) return __uint_as_float((e & 1) ? w & 0xffff0000u : w << 16);\n"
               "  __half_raw r;\n  r.x = uint16_t((e & 1) ? w >> 16 : w);\n  return __half2float(__half(r));", s, flags=re.S)
    # programmatic dependent launch (griddepcontrol): nothing to wait for or trigger in a host emulation
    s = s.replace("pdl_start();", ";").replace("pdl_wait();", ";").replace("pdl_trigger();", ";")
    # the flags between CTAs (ptx.cuh): host atomics (emu.hpp)
    for f in ("ld_acquire_gpu", "st_release_gpu", "atom_add_acq_rel_gpu"):
        s = re.sub(r"(?<![\w:])%s\(" % f, "emu_%s(" % f, s)
    s = re.sub(r"(?<![\w:])launch_pdl\(", "emu_launch_pdl(", s)
    # exp_ftz (chunk_fwd_intra.cuh): e^x as ex2.approx.ftz(x log2 e)
    s = s.replace('asm("ex2.approx.ftz.f32 %0, %1;\\n" : "=f"(y) : "f"(x * 1.4426950408889634f));', "y = std::exp(x);")
    # mma_m16n8k16<BF16>: bf16 or fp16 fragments, as the kernel's instantiation says
    for f, e in (("mma_m16n8k16<true>", "mma<true>"), ("mma_m16n8k16<BF16>", "mma<BF16>"), ("chunk_detail::mma16_f32", "mma16_f32"),
                 ("mma16_f32<false>", "mma16_f32"), ("__all_sync", "all_sync"), ("__expf", "expf"),
                 ("cp_async<16>", "cp_async16"),
                 ("cp_async16_zfill", "cp_async16_zfill"), ("cp_async_commit", "cp_async_commit"),
                 ("cp_async_wait_all", "cp_async_wait_all"), ("cp_async_wait<1>", "cp_async_wait<1>"),
                 ("cp_async_wait<0>", "cp_async_wait<0>"), ("cp_async_wait<2>", "cp_async_wait<2>"),
                 ("ldsm_x4_t", "ldsm_x4_t"), ("ldsm_x4", "ldsm_x4"), ("st_global_v4", "st_global_v4"),
                 ("st_global_v2", "st_global_v2"),
                 ("named_barrier<128>", "named_barrier<128>"), ("named_barrier<64>", "named_barrier<64>")):
        s = s.replace(f + "(", "emu_%s(" % e)
    # cp.async of any other width (the wy kernel's 4 sizeof(ST) bytes): emu_cp_async<BYTES>
    s = re.sub(r"(?<![\w])cp_async<", "emu_cp_async<", s)
    open(os.path.join(dst, out), "w").write(rewrite_launches(s))
os.makedirs(os.path.join(dst, "cuda/common"), exist_ok=True)
for name, ns in (("wgmma.cuh", "wg"), ("mbarrier.cuh", "mbar"), ("tma.cuh", "tma")):
    s = open(os.path.join(src, "common", name)).read()
    open(os.path.join(dst, "cuda/common", name), "w").write(emulate_header(s, ns))
