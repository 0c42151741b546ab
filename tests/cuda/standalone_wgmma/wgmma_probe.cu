// Probe of the Hopper warpgroup MMA (wgmma) forms the next state-pass kernel of chunk_fwd needs (docs/chunk_fwd.md,
// "Known gaps / next steps"): one device call checks the operand layouts, descriptors and the accumulator layout
// this code assumes, before the library kernel is rewritten on top of them. Not built by CMake.
//
//   D[64 x 64] = A[64 x 128] B[64 x 128]^T   (bf16 in, fp32 accumulate; the state pass's K S0 with A = the k tile
//                                             [token][key] and B = the state stored transposed [value][key])
//
// Variants (each compared with a CPU reference):
//   ss: A and B from shared memory, K-major, 128-byte swizzle (a row of 64 bf16 = 128 B; 8-row atoms of 1024 B;
//       the 16-byte chunk c of row r stored at chunk c ^ (r % 8)); K = 128 is two atoms' columns, one region each.
//   rs: A from registers in the mma.m16n8k16 A-fragment layout per warp (warp w: rows 16 w ..), B as in ss.
// Assumed accumulator layout (m64nNk16, f32): warp w of the warpgroup holds rows 16 w + g and 16 w + g + 8
// (g = lane / 4); for the 8-column group j, d[4 j + 0, 1] = (row g, cols 8 j + 2 t, + 1), d[4 j + 2, 3] = (row
// g + 8, the same cols), t = lane % 4: the mma.m16n8 C layout repeated over j.
//
// Then a micro-benchmark of the state pass's phase 1 (K S0 and Q S0 of both 64-column halves: 4.2 MFLOP per chunk)
// on one 512-thread CTA per SM: the mma.sync + ldmatrix form of chunk_fwd_state.cuh against four warpgroups of
// wgmma (A and B from swizzled shared memory), cycles per chunk (clock64, median over CTAs).
//
// Build and run (H100/H200, repository root): nvcc -O2 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Isrc
//   -Iinclude --expt-relaxed-constexpr tests/cuda/standalone_wgmma/wgmma_probe.cu -o /tmp/wgmma_probe &&
//   /tmp/wgmma_probe
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "cuda/chunk_fwd/chunk_fwd_common.cuh"  // ldsm_x4, ldsm_x4_t, mma<>: the library's mma.sync wrappers
#include "wgmma_util.cuh"

constexpr int M = 64, N = 64, KD = 128;

// One warpgroup. A [64][128], B [64][128] row-major bf16 in global; D [64][64] fp32 out.
template <bool A_IN_REGS>
__global__ void __launch_bounds__(128) probe(const __nv_bfloat16* A, const __nv_bfloat16* B, float* D) {
  // two 64-column regions (keys 0..63, 64..127) per operand, 8 KB each, 1024-byte aligned
  __shared__ __align__(1024) unsigned char sa[2][M * 128];
  __shared__ __align__(1024) unsigned char sb[2][N * 128];
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  for (int i = tid; i < M * KD / 8; i += 128) {  // 16-byte vectors: row i / 16, columns 8 (i % 16) ..
    const int r = i / 16, c = (i % 16) * 8, reg = c / 64, cc = c % 64;
    *reinterpret_cast<uint4*>(&sa[reg][sw128(r, cc)]) = *reinterpret_cast<const uint4*>(A + r * KD + c);
    *reinterpret_cast<uint4*>(&sb[reg][sw128(r, cc)]) = *reinterpret_cast<const uint4*>(B + r * KD + c);
  }
  flashgdn::cuda::wg::fence_async_smem();
  __syncthreads();
  // rs: every A fragment is loaded before the first wgmma (registers read by an in-flight wgmma must not change
  // until its wait): rows 16 w + g (+ 8), k columns 16 ks + 2 t (+ 1) (+ 8) of the swizzled tile
  uint32_t afr[KD / 16][4];
  if constexpr (A_IN_REGS) {
    auto ld = [&](int r, int c) { return *reinterpret_cast<const uint32_t*>(&sa[c / 64][sw128(r, c % 64)]); };
#pragma unroll
    for (int ks = 0; ks < KD / 16; ++ks) {
      const int r0 = 16 * w + g, c0 = 16 * ks + 2 * t;
      afr[ks][0] = ld(r0, c0);
      afr[ks][1] = ld(r0 + 8, c0);
      afr[ks][2] = ld(r0, c0 + 8);
      afr[ks][3] = ld(r0 + 8, c0 + 8);
    }
  }
  float d[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) d[i] = 0.f;
  flashgdn::cuda::wg::fence();
#pragma unroll
  for (int ks = 0; ks < KD / 16; ++ks) {
    const int reg = ks / 4, koff = (ks % 4) * 32;  // +32 bytes per k16 step inside a 128-byte row
    const uint64_t db = flashgdn::cuda::wg::desc(smem_u32(&sb[reg][0]) + koff);
    if constexpr (A_IN_REGS) {
      wgmma_rs(d, afr[ks], db, ks > 0);
    } else {
      const uint64_t da = flashgdn::cuda::wg::desc(smem_u32(&sa[reg][0]) + koff);
      wgmma_ss(d, da, db, ks > 0);
    }
  }
  flashgdn::cuda::wg::commit();
  flashgdn::cuda::wg::wait0();
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int r = 16 * w + g, c = 8 * j + 2 * t;
    D[r * N + c] = d[4 * j];
    D[r * N + c + 1] = d[4 * j + 1];
    D[(r + 8) * N + c] = d[4 * j + 2];
    D[(r + 8) * N + c + 1] = d[4 * j + 3];
  }
}

// ---- phase-1 micro-benchmark --------------------------------------------------------------------------------
// mma.sync form (as chunk_fwd_state.cuh): warp (hf, ch, rg) computes rows 16 rg.. x columns 32 ch.. of K S0 and
// Q S0 of half hf from padded row-major tiles. wgmma form: warpgroup (hf, which) computes all 64 x 64 of K S0 or
// Q S0 of half hf, A = the k or q tile and B = the half's state stored [value][key], both swizzled.
template <bool WG>
__global__ void __launch_bounds__(512, 1) phase1_bench(int iters, float* out, long long* cycles) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
  for (int i = tid; i < 200 * 1024 / 4; i += 512)  // small finite values everywhere (a bf16 pair per word)
    reinterpret_cast<uint32_t*>(smem)[i] = 0x3c003c00u ^ uint32_t((i * 2654435761u) & 0x00ff00ffu);
  flashgdn::cuda::wg::fence_async_smem();
  __syncthreads();
  float keep = 0.f;
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    if constexpr (!WG) {
      constexpr int LDQ = KD + 8, LDV = 64 + 8;
      const __nv_bfloat16* q = reinterpret_cast<const __nv_bfloat16*>(smem);
      const __nv_bfloat16* k = q + 64 * LDQ;
      const int hf = w >> 3, ch = (w >> 2) & 1, rg = (w + (w >> 2)) & 3, cb = 32 * ch;
      const __nv_bfloat16* st = k + 64 * LDQ + hf * KD * LDV;
      float racc[4][4] = {}, oacc[4][4] = {};
#pragma unroll 4
      for (int kd = 0; kd < KD / 16; ++kd) {
        uint32_t ak[4], aq[4];
        flashgdn::cuda::chunk_detail::ldsm_x4(ak, &k[(16 * rg + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8]);
        flashgdn::cuda::chunk_detail::ldsm_x4(aq, &q[(16 * rg + (lane & 15)) * LDQ + kd * 16 + (lane >> 4) * 8]);
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t b[4];
          flashgdn::cuda::chunk_detail::ldsm_x4_t(
              b, &st[(16 * kd + (lane & 7) + ((lane >> 3) & 1) * 8) * LDV + cb + 16 * np + (lane >> 4) * 8]);
          flashgdn::cuda::chunk_detail::mma<true>(racc[2 * np], ak, b[0], b[1]);
          flashgdn::cuda::chunk_detail::mma<true>(racc[2 * np + 1], ak, b[2], b[3]);
          flashgdn::cuda::chunk_detail::mma<true>(oacc[2 * np], aq, b[0], b[1]);
          flashgdn::cuda::chunk_detail::mma<true>(oacc[2 * np + 1], aq, b[2], b[3]);
        }
      }
#pragma unroll
      for (int i = 0; i < 16; ++i) keep += racc[i / 4][i % 4] + oacc[i / 4][i % 4];  // every mma result is used
    } else {
      // regions of 8 KB (64 rows x 128 B): q 0-1, k 2-3, state^T of half 0: 4-5, half 1: 6-7
      const int wg = w >> 2, hf = wg >> 1, which = wg & 1;
      const uint32_t base = smem_u32(smem);
      const uint32_t abase = base + (which ? 0 : 2) * 8192, bbase = base + (4 + 2 * hf) * 8192;
      float d[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) d[i] = 0.f;
      flashgdn::cuda::wg::fence();
#pragma unroll
      for (int ks = 0; ks < KD / 16; ++ks) {
        const uint32_t off = (ks / 4) * 8192 + (ks % 4) * 32;
        wgmma_ss(d, flashgdn::cuda::wg::desc(abase + off), flashgdn::cuda::wg::desc(bbase + off), ks > 0);
      }
      flashgdn::cuda::wg::commit();
      flashgdn::cuda::wg::wait0();
#pragma unroll
      for (int i = 0; i < 32; ++i) keep += d[i];
    }
    __syncthreads();  // the state pass has a barrier after phase 1
  }
  const long long t1 = clock64();
  if (tid == 0) cycles[blockIdx.x] = t1 - t0;
  out[blockIdx.x * 512 + tid] = keep;
}

int bench_phase1() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int iters = 4000, smem = 200 * 1024;
  float* out;
  long long* cyc;
  CK(cudaMalloc(&out, size_t(sms) * 512 * 4));
  CK(cudaMalloc(&cyc, size_t(sms) * 8));
  CK(cudaFuncSetAttribute(phase1_bench<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(phase1_bench<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  for (int v = 0; v < 2; ++v) {
    for (int rep = 0; rep < 2; ++rep) {  // the first launch warms up
      if (v == 0)
        phase1_bench<false><<<sms, 512, smem>>>(iters, out, cyc);
      else
        phase1_bench<true><<<sms, 512, smem>>>(iters, out, cyc);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
    }
    std::vector<long long> h(sms);
    CK(cudaMemcpy(h.data(), cyc, size_t(sms) * 8, cudaMemcpyDeviceToHost));
    std::sort(h.begin(), h.end());
    const double per = double(h[sms / 2]) / iters;
    std::printf("phase 1 (K S0 + Q S0, both halves, 4.2 MFLOP) %s: %.0f cycles per chunk, %.0f FLOP per cycle per SM\n",
                v ? "wgmma (4 warpgroups, ss)" : "mma.sync + ldmatrix (16 warps)", per, 4.194304e6 / per);
  }
  return 0;
}

int main() {
  std::vector<__nv_bfloat16> ha(M * KD), hb(N * KD);
  std::vector<float> fa(M * KD), fb(N * KD);
  uint32_t x = 12345u;
  auto rnd = [&]() {
    x = x * 1664525u + 1013904223u;
    return float((x >> 8) & 0xffff) / 65536.f - 0.5f;
  };
  for (int i = 0; i < M * KD; ++i) ha[i] = __float2bfloat16(rnd()), fa[i] = __bfloat162float(ha[i]);
  for (int i = 0; i < N * KD; ++i) hb[i] = __float2bfloat16(rnd()), fb[i] = __bfloat162float(hb[i]);
  std::vector<double> ref(M * N, 0.0);
  for (int r = 0; r < M; ++r)
    for (int c = 0; c < N; ++c)
      for (int k = 0; k < KD; ++k) ref[r * N + c] += double(fa[r * KD + k]) * double(fb[c * KD + k]);
  __nv_bfloat16 *da, *db;
  float* dd;
  CK(cudaMalloc(&da, ha.size() * 2));
  CK(cudaMalloc(&db, hb.size() * 2));
  CK(cudaMalloc(&dd, M * N * 4));
  CK(cudaMemcpy(da, ha.data(), ha.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, hb.data(), hb.size() * 2, cudaMemcpyHostToDevice));
  int fails = 0;
  for (int v = 0; v < 2; ++v) {
    CK(cudaMemset(dd, 0xff, M * N * 4));  // NaN poison
    if (v == 0)
      probe<false><<<1, 128>>>(da, db, dd);
    else
      probe<true><<<1, 128>>>(da, db, dd);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> hd(M * N);
    CK(cudaMemcpy(hd.data(), dd, M * N * 4, cudaMemcpyDeviceToHost));
    double err = 0, nrm = 0;
    int shown = 0;
    for (int i = 0; i < M * N; ++i) {
      const double e = std::fabs(double(hd[i]) - ref[i]);
      err = std::isnan(hd[i]) ? INFINITY : std::fmax(err, e);
      nrm = std::fmax(nrm, std::fabs(ref[i]));
      if (!(e <= 1e-3 * (1 + std::fabs(ref[i]))) && shown < 4) {
        std::printf("  %s: D[%d][%d] = %g, want %g\n", v ? "rs" : "ss", i / N, i % N, hd[i], ref[i]);
        ++shown;
      }
    }
    const bool ok = err <= 1e-3 * (1 + nrm);
    fails += !ok;
    std::printf("wgmma %s (A %s, B smem, 128B swizzle, K-major): max abs err %.3e (max |ref| %.3e): %s\n",
                v ? "rs" : "ss", v ? "registers" : "smem", err, nrm, ok ? "PASS" : "FAIL");
  }
  std::printf("%s\n", fails ? "FAIL" : "PASS");
  if (bench_phase1() != 0) return 1;
  return fails ? 1 : 0;
}
