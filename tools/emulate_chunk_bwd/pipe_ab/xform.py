# Rewrites a direct_pipe_kernel.cuh (or direct_kernel.cuh) for the host emulation of pab.cpp: the kernel in
# namespace flashgdn::cuda::<ns> without its launcher, PDL and cp.async on the emulation, s_full in the host shared
# memory, the packed widening (direct::unpack) in C++. Usage: xform.py <source> <output> <ns>
import re, sys
src, dst, ns = sys.argv[1], sys.argv[2], sys.argv[3]
s = open(src).read()
if src.endswith("direct_kernel.cuh"):
    i = s.index("template <class H2, int USE>\n__device__ __forceinline__ float unpack")
    j = s.index("  return f;\n}\n", i) + len("  return f;\n}\n")
    s = s[:i] + """template <class H2, int USE>
inline float unpack(const uint4& v, int e) {
  const uint32_t w = e < 2 ? v.x : (e < 4 ? v.y : (e < 6 ? v.z : v.w));
  const uint16_t hb = (e & 1) ? uint16_t(w >> 16) : uint16_t(w & 0xffffu);
  if constexpr (std::is_same_v<H2, __nv_bfloat162>) return __uint_as_float(uint32_t(hb) << 16);
  else return flashgdn::detail::f16_to_float(hb);
}
""" + s[j:]
    s = s.replace("__ldcg(reinterpret_cast<const uint4*>(p))", "*reinterpret_cast<const uint4*>(p)")
    s = s.replace("__ldcg(reinterpret_cast<const float4*>(p))", "*reinterpret_cast<const float4*>(p)")
    s = s.replace("__trap();", "std::abort();")
else:
    s = s.replace('#include "cuda/recurrent/direct_kernel.cuh"', '#include "direct_kernel.cuh"')
    s = re.sub(r"extern __shared__\s+(?:__align__\(\d+\)\s+)?unsigned char\s+(\w+)\[\];", r"unsigned char* \1 = g_smem;", s)
    s = s.replace("__shared__ uint64_t s_full[S];", "uint64_t* s_full = reinterpret_cast<uint64_t*>(g_smem + 230000);")
    s = s.replace("pdl_start();", ";")
    s = s.replace("cp_async<16>(", "emu_cp_async16(").replace("cp_async_commit(", "emu_cp_async_commit(")
    s = re.sub(r"cp_async_wait<[^>]*>\(", "emu_cp_async_wait_all(", s)
    # only the kernel: drop the launcher and the instantiation macro
    k = s.index("// Persistent grid:")
    s = s[:k] + "}  // namespace flashgdn::cuda\n"
    s = s.replace("namespace flashgdn::cuda {", "namespace flashgdn::cuda { namespace %s {" % ns, 1)
    s = s.replace("}  // namespace flashgdn::cuda\n", "}}  // namespace flashgdn::cuda\n")
    s = s.replace("#pragma once", "")
open(dst, "w").write(s)
