// The state pass on wgmma (src/cuda/chunk_fwd/chunk_fwd_state_wg.cuh) against the mma.sync state pass
// (chunk_fwd_state.cuh) on the same intra-pass records: one fixed-length case (B=8, T=4096, H=16, K=V=128, bf16,
// l2norm, h0, K-major states) compared (o and the final state; the same rounding points, so ~1e-6 is expected),
// then both kernels timed alone on that one-wave shape (64 chunks per CTA). Not built by CMake; the GPU suite checks
// the wgmma pass against the fp64 oracle (tests/cuda/test_chunk_fwd.cpp).
//
// Build and run (repository root, H100/H200): tests/cuda/standalone_wgmma/run.sh
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "cuda/chunk_fwd/chunk_fwd_common.cuh"
#include "wgmma_util.cuh"  // CK

namespace fc = flashgdn::cuda;
namespace cd = flashgdn::cuda::chunk_detail;

namespace {

constexpr int kK = 128;
using bf16 = __nv_bfloat16;
using P = cd::Elem<true>;

float bf2f(bf16 x) {
  return __bfloat162float(x);
}

#ifdef FGDN_CHUNK_PROFILE
// One launch with the phase counters on (a.prof): the 9 counters (8 phases, then the count they sum over) in hp;
// 1 on a CUDA error.
template <class F>
int run_profiled(fc::ChunkKernelArgs& a, F launch, unsigned long long (&hp)[16]) {
  unsigned long long* prof;
  CK(cudaMalloc(&prof, 16 * sizeof(unsigned long long)));
  CK(cudaMemset(prof, 0, 16 * sizeof(unsigned long long)));
  a.prof = prof;
  CK(cudaError_t(launch()));
  CK(cudaDeviceSynchronize());
  a.prof = nullptr;
  CK(cudaMemcpy(hp, prof, sizeof(hp), cudaMemcpyDeviceToHost));
  CK(cudaFree(prof));
  return 0;
}
#endif

int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::atoi(s) : fallback;
}

}  // namespace

int main() {
  // B sequences of T tokens, H heads (Hqk = Hv), K = V = 128, bf16, l2norm, random gates, h0, K-major states.
  // WG_B, WG_T, WG_H override the shape (small ones for compute-sanitizer); WG_NOTIME=1 skips the timing.
  const int B = env_int("WG_B", 8), T = env_int("WG_T", 4096), H = env_int("WG_H", 16);
  const size_t nq = size_t(B) * T * H * kK, ng = size_t(B) * T * H, ns = size_t(B) * H * kK * kK;
  std::vector<bf16> hq(nq), hk(nq), hv(nq);
  std::vector<float> hg(ng), hb(ng), h0(ns);
  uint32_t x = 7u;
  auto rnd = [&]() {
    x = x * 1664525u + 1013904223u;
    return float((x >> 8) & 0xffff) / 65536.f - 0.5f;
  };
  for (size_t i = 0; i < nq; ++i)
    hq[i] = __float2bfloat16(rnd()), hk[i] = __float2bfloat16(rnd()), hv[i] = __float2bfloat16(rnd());
  for (size_t i = 0; i < ng; ++i) hg[i] = -0.05f * (1.f + rnd()), hb[i] = 0.5f + rnd();
  for (size_t i = 0; i < ns; ++i) h0[i] = 0.1f * rnd();
  bf16 *q, *k, *v, *o;
  float *g, *be, *s0, *ht;
  unsigned char* rec;
  const int64_t nchunk = (T + 63) / 64, slots = int64_t(B) * nchunk;
  CK(cudaMalloc(&q, nq * 2));
  CK(cudaMalloc(&k, nq * 2));
  CK(cudaMalloc(&v, nq * 2));
  CK(cudaMalloc(&o, nq * 2));
  CK(cudaMalloc(&g, ng * 4));
  CK(cudaMalloc(&be, ng * 4));
  CK(cudaMalloc(&s0, ns * 4));
  CK(cudaMalloc(&ht, ns * 4));
  CK(cudaMalloc(&rec, size_t(slots) * H * fc::kRecBytes));
  CK(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(k, hk.data(), nq * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(v, hv.data(), nq * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(g, hg.data(), ng * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(be, hb.data(), ng * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(s0, h0.data(), ns * 4, cudaMemcpyHostToDevice));

  fc::ChunkKernelArgs a{};
  a.q = q, a.k = k, a.v = v, a.o = o;
  a.q_sb = a.k_sb = a.v_sb = a.o_sb = int64_t(T) * H * kK;
  a.q_st = a.k_st = a.v_st = a.o_st = int64_t(H) * kK;
  a.q_sh = a.k_sh = a.v_sh = a.o_sh = kK;
  a.g = g, a.g_sb = int64_t(T) * H, a.g_st = H, a.g_sh = 1, a.g_dtype = 0;
  a.beta = be, a.b_sb = int64_t(T) * H, a.b_st = H, a.b_sh = 1, a.b_dtype = 0;
  a.h0 = s0, a.h0_sn = int64_t(H) * kK * kK, a.h0_sh = int64_t(kK) * kK, a.h0_sr = kK;
  a.ht = ht, a.ht_sn = a.h0_sn, a.ht_sh = a.h0_sh, a.ht_sr = kK;
  a.B = B, a.T = T, a.N = B, a.Hqk = H, a.Hv = H, a.V = kK, a.group = 1;
  a.scale = 1.f / std::sqrt(float(kK));
  a.l2norm = 1, a.beta_mult = 1.f, a.sp_beta = 1.f, a.sp_threshold = 20.f;
  a.mode = fc::kModeForward;
  a.rec = rec, a.rec_slots = slots, a.nchunk_b = nchunk;

  CK(cudaError_t(fc::launch_chunk_intra_bf16(a, kK, nullptr)));
#ifdef FGDN_CHUNK_PROFILE  // the intra pass's phase cycles (thread 0 of every CTA, summed), then without profiling
  {
    unsigned long long hp[16];
    run_profiled(
        a, [&] { return fc::launch_chunk_intra_bf16(a, kK, nullptr); }, hp);
    const double nc = hp[8] > 0 ? double(hp[8]) : 1.0;
    std::printf(
        "PROF intra pass, %llu CTAs, cycles per CTA: load %.0f | norms %.0f | KK,QK %.0f | gates %.0f | L,P %.0f"
        " | diag inverse %.0f | merges %.0f | A frags %.0f\n",
        hp[8], hp[0] / nc, hp[1] / nc, hp[2] / nc, hp[3] / nc, hp[4] / nc, hp[5] / nc, hp[6] / nc, hp[7] / nc);
  }
#endif
  CK(cudaError_t(fc::launch_chunk_state_bf16(a, kK, B, 2, nullptr)));  // the library's state kernel: reference
  CK(cudaDeviceSynchronize());
  std::vector<bf16> oref(nq), ores(nq);
  std::vector<float> sref(ns), sres(ns);
  CK(cudaMemcpy(oref.data(), o, nq * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(sref.data(), ht, ns * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemset(o, 0xff, nq * 2));  // NaN poison
  CK(cudaMemset(ht, 0xff, ns * 4));
  CK(cudaError_t(fc::launch_chunk_state_wg_bf16(a, B, 2, nullptr)));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(ores.data(), o, nq * 2, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(sres.data(), ht, ns * 4, cudaMemcpyDeviceToHost));
  double on = 0, od = 0, sn = 0, sd = 0;
  for (size_t i = 0; i < nq; ++i) {
    const double r = bf2f(oref[i]), y = bf2f(ores[i]);
    on += (y - r) * (y - r), od += r * r;
  }
  for (size_t i = 0; i < ns; ++i)
    sn += (sres[i] - sref[i]) * double(sres[i] - sref[i]), sd += double(sref[i]) * sref[i];
  const double eo = std::sqrt(on / od), es = std::sqrt(sn / sd);
  const bool ok = eo < 3e-3 && es < 3e-3;  // NaN fails
  std::printf("wgmma vs mma.sync state kernel (B=%d T=%d H=%d): o rel diff %.2e, final state rel diff %.2e: %s\n", B, T,
              H, eo, es, ok ? "PASS" : "FAIL");

#ifdef FGDN_CHUNK_PROFILE  // the wgmma state pass's phase cycles (thread 0 of every CTA, summed)
  {
    unsigned long long hp[16];
    run_profiled(
        a, [&] { return fc::launch_chunk_state_wg_bf16(a, B, 2, nullptr); }, hp);
    const double nc = hp[8] > 0 ? double(hp[8]) : 1.0;
    std::printf(
        "PROF wgmma state pass, %llu chunks, cycles per chunk: full wait %.0f | refill %.0f | K S0 %.0f | R %.0f"
        " | U %.0f | update, P U %.0f | o, S0 %.0f\n",
        hp[8], hp[0] / nc, hp[1] / nc, hp[2] / nc, hp[3] / nc, hp[4] / nc, hp[5] / nc, hp[6] / nc);
  }
#endif
  if (env_int("WG_NOTIME", 0)) return ok ? 0 : 1;
  // timing: the two state kernels alone, B x H = 128 CTAs (one wave), T / 64 chunks each
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int which = 0; which < 3; ++which) {
    std::vector<float> ms;
    for (int rep = 0; rep < 7; ++rep) {
      CK(cudaEventRecord(e0));
      if (which == 0)
        CK(cudaError_t(fc::launch_chunk_state_bf16(a, kK, B, 2, nullptr)));
      else if (which == 1)
        CK(cudaError_t(fc::launch_chunk_state_wg_bf16(a, B, 2, nullptr)));
      else
        CK(cudaError_t(fc::launch_chunk_intra_bf16(a, kK, nullptr)));
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      float t = 0;
      CK(cudaEventElapsedTime(&t, e0, e1));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const char* names[3] = {"library mma.sync state kernel", "library wgmma state kernel", "library intra pass"};
    std::printf("%s: %.3f ms, %.2f us per chunk\n", names[which], ms[3], 1e3 * ms[3] / double(nchunk));
  }
  return ok ? 0 : 1;
}
