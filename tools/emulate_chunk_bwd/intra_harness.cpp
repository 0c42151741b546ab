// The prefill's intra-chunk kernel (src/cuda/chunk_fwd/chunk_fwd_intra.cuh) run in the host emulation of emu.hpp,
// launched directly on varlen batches with GQA groups (bf16, l2norm, decay table on), its records' A diag(beta)
// blocks checked against (I + L)^-1 in fp64. Built with -fsanitize=thread (run.sh tsan), ThreadSanitizer reports
// every pair of shared-memory accesses of two emulated threads that no barrier of the kernel orders.
// Usage: intra_harness <case 0-4> (0: K = 128, group 4; 1: the shape of CudaChunkFwd.GqaGroupOfFourVarlen, fused
// gate and beta sigmoid; 2: K = 64, group 4; 3, 4: 127 and 128 short sequences, K = 64, one head)
#include "emu.hpp"

// The kernel sees the emulation above.
#include <cstdio>
#include <random>

#include "chunk_fwd_intra.cuh"
#include "common/dtype.hpp"

using namespace flashgdn;
using namespace flashgdn::cuda;
using namespace flashgdn::cuda::chunk_detail;

template <int K>
int run(const std::vector<int32_t>& cu, int64_t Hqk, int64_t Hv, bool gate) {
  const int64_t N = int64_t(cu.size()) - 1, T = cu.back();
  std::mt19937 gen(7);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.f, 1.f);
  std::vector<uint16_t> q(T * Hqk * K), k(T * Hqk * K);
  for (auto& x : q) x = detail::float_to_bf16(nd(gen));
  for (auto& x : k) x = detail::float_to_bf16(nd(gen));
  std::vector<float> g(T * Hv), beta(T * Hv);
  for (auto& x : g) x = gate ? nd(gen) : -0.1f * ud(gen);
  for (auto& x : beta) x = gate ? nd(gen) : ud(gen);
  std::vector<float> alog(Hv), dtb(Hv);
  for (int64_t h = 0; h < Hv; ++h) alog[h] = std::log(0.5f + 4.f * ud(gen)), dtb[h] = 0.5f * nd(gen);
  // the gate and beta the kernel forms from the raw values (gdn-math §4): -exp(A_log) softplus(a + dt_bias),
  // sigmoid(b)
  const auto g_of = [&](int64_t t, int64_t h) {
    const double x = g[t * Hv + h];
    return gate ? -std::exp(double(alog[h])) * std::log1p(std::exp(x + dtb[h])) : x;
  };
  const auto b_of = [&](int64_t t, int64_t h) {
    const double x = beta[t * Hv + h];
    return gate ? 1.0 / (1.0 + std::exp(-x)) : x;
  };

  ChunkKernelArgs a{};
  a.q = q.data(), a.k = k.data();
  a.q_sb = a.k_sb = T * Hqk * K, a.q_st = a.k_st = Hqk * K, a.q_sh = a.k_sh = K;
  a.g = g.data(), a.beta = beta.data();
  a.g_sb = a.b_sb = T * Hv, a.g_st = a.b_st = Hv, a.g_sh = a.b_sh = 1;
  a.g_dtype = a.b_dtype = 0;
  a.cu_seqlens = cu.data();
  a.B = 1, a.T = T, a.N = N, a.Hqk = Hqk, a.Hv = Hv, a.V = 64;
  a.group = int32_t(Hv / Hqk);
  a.scale = 1.f / std::sqrt(float(K));
  a.l2norm = 1;
  a.gate_in_kernel = a.beta_sigmoid = gate;
  a.A_log = alog.data(), a.dt_bias = dtb.data(), a.alog_s = a.dtb_s = 1, a.alog_dtype = a.dtb_dtype = 0;
  a.beta_mult = 1.f, a.sp_beta = 1.f, a.sp_threshold = 20.f;
  a.rec_slots = N + (T + kC - 1) / kC;
  std::vector<unsigned char> rec(a.rec_slots * Hv * kRecBytes, 0xff);
  std::vector<float> dec(Hv * a.rec_slots, NAN);
  a.rec = rec.data(), a.dec = dec.data();
  // launch_chunk_intra's grid and instance (no chunk_bwd records)
  emu_launch(chunk_fwd_intra_kernel<K, true, false>, dim3(unsigned(a.rec_slots * Hqk)), 128, a);

  // A diag(beta) of every (chunk, head) from its record (hi + lo fragments, store_afrag's layout) against fp64
  double num = 0, den = 0;
  int chunks = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t0 = cu[n], c = 0; t0 + kC * c < cu[n + 1]; ++c) {
      const int64_t tok = t0 + kC * c, slot = n + tok / kC;  // chunk_slot
      const int nv = int(std::min<int64_t>(kC, cu[n + 1] - tok));
      ++chunks;
      for (int64_t h = 0; h < Hv; ++h) {
        std::vector<double> kn(kC * K, 0.0), gam(kC, 0.0), b(kC, 0.0), L(kC * kC, 0.0), A(kC * kC, 0.0);
        double sum = 0;
        for (int r = 0; r < nv; ++r) {
          double ss = 0;
          const uint16_t* kr = &k[((tok + r) * Hqk + h / a.group) * K];
          for (int i = 0; i < K; ++i) ss += std::pow(detail::bf16_to_float(kr[i]), 2);
          for (int i = 0; i < K; ++i) kn[r * K + i] = detail::bf16_to_float(kr[i]) / std::sqrt(ss + 1e-6);
          gam[r] = sum += g_of(tok + r, h);
          b[r] = b_of(tok + r, h);
        }
        for (int r = 0; r < nv; ++r)
          for (int s = 0; s < r; ++s) {
            double d = 0;
            for (int i = 0; i < K; ++i) d += kn[r * K + i] * kn[s * K + i];
            L[r * kC + s] = b[r] * d * std::exp(gam[r] - gam[s]);
          }
        for (int j = 0; j < kC; ++j)  // column j of (I + L)^-1 by forward substitution
          for (int r = 0; r < kC; ++r) {
            double x = r == j;
            for (int s = 0; s < r; ++s) x -= L[r * kC + s] * A[s * kC + j];
            A[r * kC + j] = x;
          }
        const unsigned char* blocks = rec.data() + (slot * Hv + h) * kRecBytes + kRecHdrBytes;
        for (int idx = 0; idx < 10; ++idx) {
          int bi, bj;
          causal_block(idx, &bi, &bj);
          const uint32_t* f = reinterpret_cast<const uint32_t*>(blocks + idx * kRecBlockBytes);
          for (int lane = 0; lane < 32; ++lane)
            for (int q2 = 0; q2 < 4; ++q2)
              for (int e = 0; e < 2; ++e) {
                const int r = 16 * bi + lane / 4 + 8 * (q2 & 1), s = 16 * bj + 2 * (lane % 4) + 8 * (q2 >> 1) + e;
                const uint32_t hi = f[4 * lane + q2], lo = f[4 * (32 + lane) + q2];
                const double got = detail::bf16_to_float(uint16_t(e ? hi >> 16 : hi)) +
                                   detail::bf16_to_float(uint16_t(e ? lo >> 16 : lo)),
                             want = A[r * kC + s] * b[s];
                num += (got - want) * (got - want), den += want * want;
              }
        }
      }
    }
  const double err = std::sqrt(num / den);
  const bool ok = std::isfinite(err) && err < 1e-4;
  printf("intra K %d: %d chunks x %ld heads (group %d), A diag(beta) rel %.3e%s\n", K, chunks, long(Hv), a.group, err,
         ok ? "" : "  FAIL");
  return ok ? 0 : 1;
}

// N short sequences (0 to 89 tokens, every seventh empty): the record slots of many sequences (chunk_of_slot's
// one-round search over N < 128 probes, its fallback to the binary search from N = 128).
std::vector<int32_t> many_sequences(int N) {
  std::vector<int32_t> cu{0};
  for (int n = 0; n < N; ++n) cu.push_back(cu.back() + (n % 7 == 3 ? 0 : (37 * n + 11) % 90));
  return cu;
}

int main(int argc, char** argv) {
  const int which = argc > 1 ? atoi(argv[1]) : 0;
  if (which == 3) return run<64>(many_sequences(127), 1, 1, false);
  if (which == 4) return run<64>(many_sequences(128), 1, 1, false);
  if (which == 1) return run<128>({0, 129, 129, 193, 194, 394, 457}, 2, 8, true);
  if (which == 2) return run<64>({0, 65, 195, 195, 202}, 1, 4, false);
  return run<128>({0, 70, 70, 200}, 1, 4, false);  // sequences of 70, 0 and 130 tokens
}
