// The CUDA prefill with its wgmma state pass (src/cuda/chunk_fwd/: the intra-chunk pass, chunk_fwd_state_wg.cuh on
// wgmma, TMA and mbarriers, and the segment split's index, summaries and scan, chunk_split.cuh) run in the host
// emulation of emu.hpp / emu_sm90.hpp through cuda::chunk_fwd and its plan, K = V = 128 (cases 9-11: K = V = 64, the
// mma.sync state pass chunk_fwd_state.cuh), against the CPU oracle (the public API, fp64 recurrence) on fresh random
// inputs with NaN-poisoned outputs and NaN slack rows. Bounds: gdn-math §10.3 as the GPU suite holds them
// (tests/cuda/test_chunk_fwd.cpp): relative Frobenius error <= 5e-3 for o and hT, 1e-2 for the worst head; in the
// bf16 wgmma cases also the state pass's STATES form (chunk_bwd's S0 records) against the same run's states. Built with
// -fsanitize=thread (run.sh --tsan), ThreadSanitizer reports every pair of shared-memory accesses that no barrier,
// mbarrier phase or async wait orders. Usage: state_wg_harness <case 0-28> (0: bf16, T = 200 (a partial last chunk),
// GQA 2, h0; 1: varlen 70, 0, 130 with slack rows (the cp.async path inside the tensor, TMA at its end), fused gate; 2:
// the split forced, 3 segments, strong decay (every summary a decay window); 3: the split forced, weak decay (full [M |
// N] summaries), varlen; 4: fp16, v-major state, checkpoints; 5: the wgmma model alone, every form against a plain
// product; 6: nearly parallel keys, k_t = k_0 + 0.05 noise (l2norm, beta in [0.95, 1], g in [-0.01, 0], full chunks):
// the update K^T diag(dk) U and P U telescope over U's rows, so the 16-bit roundings of A diag(beta) and P add up (the
// GPU test CudaChunkFwd.NearlyParallelKeys); 7: identical keys, beta = 1, g = 0, a full last chunk (the telescoping
// update, tests/cuda CudaChunkFwd.IdenticalKeysFullLastChunk); 8: the same with the split forced (3 segments: the
// summary mode); 9: the mma.sync state pass (K = V = 64), bf16, T = 200, GQA 2, h0; 10: case 6 at K = V = 64
// (mma.sync); 11: case 7 at K = V = 64, T = 64 (mma.sync); 12, 13: allow_neg_eigval's extreme, beta in [1.95, 2] with
// case 6's nearly parallel keys / beta = 2 with identical keys, g = 0, five chunks: a chunk transition with an
// eigenvalue near -1, so nothing contracts the chain's roundings); 14, 15: 12 and 13 at K = V = 64 (mma.sync); 16,
// 17: 12 and 13 with the split forced (3 segments); 18: 13 in fp16; 19: 12 at K = 128, V = 64 (mma.sync); 20, 21: 13
// on one long walk, T = 1024 / 2048, Hv = 1; 22, 23: the same with the split forced; 24, 25: the same at K = V = 64
// (mma.sync); 26-28: 21, 23, 25 with beta = 1.999: A diag(beta)'s entries are then not powers of two (at beta = 2 its
// two 16-bit parts hold them exactly), so its rest matters: the chunk transition along the key is 1 only by
// cancellation, and A diag(beta) in two parts drifted the state along the key, linearly in the chunks)
#include "emu.hpp"

// chunk_fwd's passes and host code: fwd_passes.cpp (run.sh links it)
#include "api/internal.hpp"
#include "api/plan.hpp"
#include "cuda/common/tma.cuh"
#include "test_util.hpp"

#include <functional>

using namespace flashgdn;
using namespace flashgdn::test;

// ---- case 5: the wgmma model alone against a plain product, its operands landed by TMA (the maps' 128-byte
// swizzle, independent of the descriptor decode): A [64][16] K-major (a box of 64 rows x 64 columns, the first 16
// used) or A from registers (the fragments built from the global A), B^T [N][16] K-major or B [16][N] MN-major (LBO
// between 64-column blocks, SBO between 8-row groups); d = A B (scale-d 0 over NaN), then d += A B: d = 2 A B.
struct SelfTestArgs {
  CUtensorMap ma, mb;
  const uint16_t* a;  // [64][64]
  float* d;           // [64][n]
  int n;
  bool bf16, mn_major, rs;
};
void wgmma_selftest_kernel(const SelfTestArgs t) {
  unsigned char *sa = g_smem, *sb = g_smem + 8192;
  auto* bar = reinterpret_cast<uint64_t*>(g_smem + 65536);
  const int tid = threadIdx.x, w = tid / 32, g = tid % 32 / 4, q = tid % 4;
  if (tid == 0) emu::mbar::init(bar, 128);
  __syncthreads();
  if (tid == 0) {
    emu::tma::arrive_expect_tx(bar, 8192 + (t.mn_major ? 16 * 2 * t.n : 128 * t.n));
    emu::tma::load_4d(sa, &t.ma, 0, 0, 0, 0, bar);
    if (t.mn_major)
      for (int nb = 0; nb < t.n / 64; ++nb) emu::tma::load_4d(sb + 2048 * nb, &t.mb, 64 * nb, 0, 0, 0, bar);
    else
      emu::tma::load_4d(sb, &t.mb, 0, 0, 0, 0, bar);
  } else {
    emu::mbar::arrive(bar);
  }
  emu::mbar::wait(bar, 0);
  const auto desc = [](const unsigned char* p, uint32_t lbo, uint32_t sbo) {
    return uint64_t(__cvta_generic_to_shared(p) >> 4) | uint64_t(lbo >> 4) << 16 | uint64_t(sbo >> 4) << 32 |
           uint64_t(1) << 62;
  };
  uint32_t a[4];  // lane (g, q): (g, 2q..), (g + 8, 2q..), (g, 2q + 8..), (g + 8, 2q + 8..) of the warp's rows
  for (int r = 0; r < 4; ++r) {
    const int row = 16 * w + g + 8 * (r & 1), col = 2 * q + 8 * (r >> 1);
    a[r] = uint32_t(t.a[row * 64 + col]) | uint32_t(t.a[row * 64 + col + 1]) << 16;
  }
  float d[64];
  for (float& x : d) x = NAN;
  const uint64_t da = desc(sa, 16, 1024), db = t.mn_major ? desc(sb, 2048, 1024) : desc(sb, 16, 1024);
  for (int acc = 0; acc < 2; ++acc) emu::wg::issue(d, t.n, t.bf16, t.rs ? a : nullptr, da, db, acc, false, t.mn_major);
  emu::wg::commit();
  emu::wg::wait0();
  for (int e = 0; e < t.n / 2; ++e)
    t.d[(16 * w + g + 8 * ((e >> 1) & 1)) * t.n + 8 * (e >> 2) + 2 * q + (e & 1)] = d[e];
}
int wgmma_selftest() {
  Rng rng(5);
  int fails = 0;
  for (bool bf16 : {true, false})
    for (int n : {32, 64, 128})
      for (bool mn : {false, true})
        for (bool rs : {false, true}) {
          if (mn && n < 64) continue;  // (an MN-major box row is the 128-byte swizzle span: 64 columns)
          const auto to16 = [&](double x) {
            return bf16 ? detail::float_to_bf16(float(x)) : detail::float_to_f16(float(x));
          };
          const auto from16 = [&](uint16_t h) { return bf16 ? detail::bf16_to_float(h) : detail::f16_to_float(h); };
          std::vector<uint16_t> A(64 * 64), B(16 * n), Bt(n * 64, 0);  // B [k][n]; Bt [n][64] (k < 16 used)
          for (auto& x : A) x = to16(rng.normal());
          for (auto& x : B) x = to16(rng.normal());
          for (int k = 0; k < 16; ++k)
            for (int j = 0; j < n; ++j) Bt[j * 64 + k] = B[k * n + j];
          std::vector<float> D(64 * n, NAN);
          SelfTestArgs t{};
          t.a = A.data(), t.d = D.data(), t.n = n, t.bf16 = bf16, t.mn_major = mn, t.rs = rs;
          const uint32_t abox[4] = {64, 64, 1, 1}, bbox[4] = {64, uint32_t(mn ? 16 : n), 1, 1};
          bool ok = cuda::tma::encode_4d_b16(&t.ma, A.data(), {64, 64, 1, 1}, {64, 4096, 4096}, abox);
          ok = ok && (mn ? cuda::tma::encode_4d_b16(&t.mb, B.data(), {n, 16, 1, 1}, {n, 16 * n, 16 * n}, bbox)
                         : cuda::tma::encode_4d_b16(&t.mb, Bt.data(), {64, n, 1, 1}, {64, 64 * n, 64 * n}, bbox));
          double num = 0, den = 0;
          if (ok) {
            emu_launch(wgmma_selftest_kernel, dim3(1), 128, t);
            for (int i = 0; i < 64; ++i)
              for (int j = 0; j < n; ++j) {
                double want = 0;
                for (int k = 0; k < 16; ++k) want += 2.0 * from16(A[i * 64 + k]) * from16(B[k * n + j]);
                num += (D[i * n + j] - want) * (D[i * n + j] - want), den += want * want;
              }
          }
          const double err = ok ? std::sqrt(num / den) : INFINITY;
          const bool pass = std::isfinite(err) && err < 1e-6;
          fails += !pass;
          printf("wgmma m64n%dk16 %s, A %s, B %s: rel %.2e%s\n", n, bf16 ? "bf16" : "f16", rs ? "registers" : "K-major",
                 mn ? "MN-major" : "K-major", err, pass ? "" : "  FAIL");
        }
  return fails ? 1 : 0;
}

int main(int argc, char** argv) {
  const int which = argc > 1 ? atoi(argv[1]) : 0;
  if (which == 5) return wgmma_selftest();
  GdnCase c;
  c.name = "emu_wg";
  c.dtype = DType::bf16;
  c.B = 1, c.T = 200, c.Hqk = 1, c.Hv = 2, c.K = 128, c.V = 128;
  bool gate = false;
  int64_t slack = 0, ckpt = 0;
  int32_t segments = 1;  // exec.chunk_fwd_segments: 1 off, P > 1 forced
  if (which == 1) c.seqlens = {70, 0, 130}, slack = 3, gate = true, c.Hv = 1;
  if (which == 2) c.T = 330, c.Hv = 1, segments = 3;  // g ~ -U(0, 1): a chunk decays by ~e^-32, every window drops M
  if (which == 3) c.seqlens = {200, 0, 129}, c.Hv = 1, segments = 2, c.g_scale = 0.02;  // a chunk ~e^-0.6: full [M | N]
  if (which == 4) c.dtype = DType::f16, c.layout = StateLayout::v_major, c.B = 2, c.T = 130, c.Hv = 1, ckpt = 64;
  if (which == 6) c.T = 256, c.g_scale = 0.01;
  if (which == 7) c.T = 128, c.Hqk = 2, c.Hv = 4;                // CudaChunkFwd.IdenticalKeysFullLastChunk's shape
  if (which == 8) c.T = 192, c.Hqk = 2, c.Hv = 4, segments = 3;  // ... and identical_keys_t192_split3's
  if (which == 9) c.T = 200, c.Hqk = 1, c.Hv = 2, c.K = 64, c.V = 64;  // the mma.sync state pass (K = V = 64)
  if (which == 10) c.T = 256, c.g_scale = 0.01, c.K = 64, c.V = 64;    // case 6 on the mma.sync state pass
  if (which == 11) c.T = 64, c.Hqk = 2, c.Hv = 4, c.K = 64, c.V = 64;  // case 7 there (identical_keys_t64_k64)
  if (which >= 12 && which <= 19) c.T = 320, c.g_scale = 0.01;
  if (which >= 20) c.T = which >= 26 || which % 2 ? 2048 : 1024, c.Hv = 1;  // one long walk
  // 12 and 13 with the split forced (full summaries: weak decay); 22, 23 and 27 the long walks with it
  if (which == 16 || which == 17 || which == 22 || which == 23 || which == 27) segments = 3;
  if (which == 18) c.dtype = DType::f16;  // 13 in fp16 (R's split in fp16 parts)
  if (which == 19) c.V = 64;              // 12 at K = 128, V = 64 (the mma.sync pass, one half)
  if (which == 14 || which == 15 || which == 24 || which == 25 || which == 28) c.K = 64, c.V = 64;
  const bool mma_pass = (which >= 9 && which <= 11) || which == 14 || which == 15 || which == 19 ||
                        (which >= 24 && which != 26 && which != 27);
  GdnInputs in = make_inputs(c);
  // k_t = k_0 + 0.05 noise per q/k head (k_0: the head's first key; the op normalizes), beta near 1
  if (which == 6 || which == 10 || which == 12 || which == 14 || which == 16 || which == 19) {
    Rng kr(61);
    for (int64_t row = c.Hqk; row < in.k.numel() / c.K; ++row)
      for (int64_t i = 0; i < c.K; ++i) in.k.set(row * c.K + i, in.k.get((row % c.Hqk) * c.K + i) + 0.05 * kr.normal());
    const double b0 = which == 12 || which == 14 || which == 16 || which == 19 ? 2.0 : 1.0;
    for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta.set(i, b0 - 0.05 * kr.uniform());
  }
  const bool beta2 = which == 13 || which == 15 || which == 17 || which == 18 || which >= 20;
  if (which == 7 || which == 8 || which == 11 || beta2) {  // identical keys, beta = 1 (2, 1.999), g = 0
    for (int64_t row = 1; row < in.k.numel() / c.K; ++row)
      for (int64_t i = 0; i < c.K; ++i) in.k.set(row * c.K + i, in.k.get(i));
    in.beta.fill(which >= 26 ? 1.999 : beta2 ? 2.0 : 1.0);
    in.g.fill(0.0);
  }
  Rng rng(91);
  HostTensor alog, dtb;
  if (gate) {
    for (int64_t i = 0; i < in.g.numel(); ++i) in.g.set(i, rng.normal());
    for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta.set(i, rng.normal());
    alog = HostTensor(DType::f32, {c.Hv});
    dtb = HostTensor(DType::f32, {c.Hv});
    for (int64_t h = 0; h < c.Hv; ++h) alog.set(h, std::log(rng.uniform(0.5, 4.5))), dtb.set(h, 0.5 * rng.normal());
  }
  if (slack) {  // rows past cu_seqlens[N] (NaN for the emulated run: no kernel may read them)
    for (HostTensor* t : {&in.q, &in.k, &in.v, &in.g, &in.beta}) {
      auto s = t->shape;
      s[1] += slack;
      HostTensor o(t->dtype, s);
      for (int64_t i = 0; i < t->numel(); ++i) o.set(i, t->get(i));
      for (int64_t i = t->numel(); i < o.numel(); ++i) o.set(i, NAN);
      *t = o;
    }
  }
  const int64_t Ttot = in.v.shape[1];
  const int64_t nck =
      ckpt ? (c.seqlens.empty() ? c.T : *std::max_element(c.seqlens.begin(), c.seqlens.end())) / ckpt : 0;
  auto state = [&](DType dt) {
    return c.layout == StateLayout::k_major ? HostTensor(dt, {c.N(), c.Hv, c.K, c.V})
                                            : HostTensor(dt, {c.N(), c.Hv, c.V, c.K});
  };
  auto ckpts = [&](DType dt) {
    if (!nck) return HostTensor();
    return c.layout == StateLayout::k_major ? HostTensor(dt, {c.N(), nck, c.Hv, c.K, c.V})
                                            : HostTensor(dt, {c.N(), nck, c.Hv, c.V, c.K});
  };
  struct Out {
    HostTensor o, hT, ck;
  };
  auto run = [&](bool oracle, Out& r) -> bool {
    const DType io = oracle ? DType::f64 : c.dtype, f = oracle ? DType::f64 : DType::f32;
    auto cv = [&](const HostTensor& t, DType dt) { return t.empty_shape() ? HostTensor() : t.cast(dt); };
    HostTensor q = cv(in.q, io), k = cv(in.k, io), v = cv(in.v, io), g = cv(in.g, f), b = cv(in.beta, f),
               h0 = cv(in.h0, f), al = cv(alog, f), db = cv(dtb, f);
    r.o = HostTensor(io, v.shape), r.hT = state(f), r.ck = ckpts(f);
    r.o.fill_nan(), r.hT.fill_nan();
    if (nck) r.ck.fill_nan();
    ChunkFwdParams p;
    p.q = q.view(), p.k = k.view(), p.v = v.view(), p.g = g.view(), p.beta = b.view(), p.initial_state = h0.view();
    p.cu_seqlens = in.cu.view(), p.A_log = al.view(), p.dt_bias = db.view();
    p.o = r.o.view(), p.final_state = r.hT.view(), p.state_checkpoints = r.ck.view();
    p.use_qk_l2norm_in_kernel = c.l2norm;
    p.state_layout = c.layout;
    p.gate.use_gate_in_kernel = gate;
    p.gate.use_beta_sigmoid_in_kernel = gate;
    p.checkpoint_interval = ckpt;
    if (oracle) {
      p.exec.cpu_fp64 = true;
      p.exec.cpu_algo = CpuAlgo::recurrent;
      const Status s = chunk_fwd(p);
      if (!s.ok()) printf("oracle: %s\n", s.message().c_str());
      return s.ok();
    }
    p.exec.chunk_fwd_segments = segments;
    ChunkDims d;
    Status s = validate(p, &d);
    ChunkFwdPlan pl;
    if (s.ok()) s = plan_chunk_fwd(p, d, DeviceFacts{132}, &pl);
    if (!s.ok()) {
      printf("emu: %s\n", s.message().c_str());
      return false;
    }
    printf("%s", describe(pl, d).c_str());
    if ((pl.state_pass == ChunkStatePass::wgmma) == mma_pass || pl.split != (segments > 1)) {
      printf("case %d: not the %s state pass with the split %s  FAIL\n", which, mma_pass ? "mma.sync" : "wgmma",
             segments > 1 ? "on" : "off");
      return false;
    }
    std::vector<unsigned char> ws(pl.workspace_bytes, 0xff);
    s = cuda::chunk_fwd(p, d, pl, ws.data(), ws.size(), nullptr);
    if (!s.ok()) printf("emu: %s\n", s.message().c_str());
    return s.ok();
  };
  Out ref, got;
  if (!run(true, ref) || !run(false, got)) return 1;
  int fails = 0;
  if (slack) {  // the slack rows' o stays NaN (unwritten), then both are zeroed there
    const int64_t row = c.Hv * c.V;
    int64_t written = 0;
    for (int64_t i = (Ttot - slack) * row; i < Ttot * row; ++i) {
      written += !std::isnan(got.o.get(i));
      got.o.set(i, 0.0), ref.o.set(i, 0.0);
    }
    printf("case %d slack rows written: %ld%s\n", which, long(written), written ? "  FAIL" : "");
    fails += written != 0;
  }
  if (nck) {  // checkpoint entries past a sequence's length are not written: zero them in both
    const int64_t blk = c.Hv * c.K * c.V;
    for (int64_t n = 0; n < c.N(); ++n) {
      const int64_t len = c.seqlens.empty() ? c.T : c.seqlens[size_t(n)];
      for (int64_t e = len / ckpt; e < nck; ++e)
        for (int64_t i = 0; i < blk; ++i)
          got.ck.set((n * nck + e) * blk + i, 0.0), ref.ck.set((n * nck + e) * blk + i, 0.0);
    }
  }
  const int64_t sblk = c.K * c.V;
  struct Check {
    const char* name;
    const HostTensor *x, *r;
    int64_t heads;
    std::function<int64_t(int64_t)> head_of;
  };
  std::vector<Check> checks = {
      {"o", &got.o, &ref.o, c.Hv, [&](int64_t i) { return (i / c.V) % c.Hv; }},
      {"hT", &got.hT, &ref.hT, c.N() * c.Hv, [&](int64_t i) { return i / sblk; }},
  };
  if (nck) checks.push_back({"ckpt", &got.ck, &ref.ck, c.N() * nck * c.Hv, [&](int64_t i) { return i / sblk; }});
  for (const Check& k : checks) {
    const double e = rel_err(*k.x, *k.r), w = max_head_err(*k.x, *k.r, k.heads, k.head_of);
    const bool ok = e <= 5e-3 && w <= 1e-2;
    fails += !ok;
    printf("case %d %-5s rel %.3e worst head %.3e%s\n", which, k.name, e, w, ok ? "" : "  FAIL");
  }
  // The STATES form (chunk_fwd_states: chunk_bwd's S0 records; bf16 on wgmma): every chunk's record is bitwise the
  // bf16 rounding (nearest even) of the forward's fp32 state after the chunk before (its checkpoints at interval 64,
  // from the forward's own run) or of the start state for a sequence's first chunk; under the split a segment's first
  // chunk starts from the scan's state (the summaries' products on 16-bit operands), the walk's state to within the
  // forward's bound: relative Frobenius error <= 5e-3 per (chunk, head)
  if (!mma_pass && c.dtype == DType::bf16) {
    const int64_t maxlen = c.seqlens.empty() ? c.T : *std::max_element(c.seqlens.begin(), c.seqlens.end());
    const int64_t n64 = std::max<int64_t>(maxlen / 64, 1);
    HostTensor q = in.q.cast(c.dtype), k = in.k.cast(c.dtype), v = in.v.cast(c.dtype), g = in.g.cast(DType::f32),
               b = in.beta.cast(DType::f32);
    HostTensor h0 = in.h0.empty_shape() ? HostTensor() : in.h0.cast(DType::f32);
    HostTensor al = alog.empty_shape() ? HostTensor() : alog.cast(DType::f32),
               db = dtb.empty_shape() ? HostTensor() : dtb.cast(DType::f32);
    HostTensor o(c.dtype, v.shape), ck = c.layout == StateLayout::k_major
                                             ? HostTensor(DType::f32, {c.N(), n64, c.Hv, c.K, c.V})
                                             : HostTensor(DType::f32, {c.N(), n64, c.Hv, c.V, c.K});
    ChunkFwdParams p;
    p.q = q.view(), p.k = k.view(), p.v = v.view(), p.g = g.view(), p.beta = b.view(), p.initial_state = h0.view();
    p.cu_seqlens = in.cu.view(), p.A_log = al.view(), p.dt_bias = db.view();
    p.o = o.view(), p.state_checkpoints = ck.view(), p.checkpoint_interval = 64;
    p.use_qk_l2norm_in_kernel = c.l2norm;
    p.state_layout = c.layout;
    p.gate.use_gate_in_kernel = gate;
    p.gate.use_beta_sigmoid_in_kernel = gate;
    p.exec.chunk_fwd_segments = segments;
    ChunkDims d;
    ChunkFwdPlan pl;
    Status s = validate(p, &d);
    if (s.ok()) s = plan_chunk_fwd(p, d, DeviceFacts{132}, &pl);
    std::vector<unsigned char> ws(pl.workspace_bytes, 0xff);
    if (s.ok()) s = cuda::chunk_fwd(p, d, pl, ws.data(), ws.size(), nullptr);
    std::vector<uint16_t> s0(size_t(pl.rec_slots * c.Hv * c.K * c.V), 0xffff);  // NaN where unwritten
    if (s.ok()) s = cuda::chunk_fwd_states(p, d, pl, ws.data(), s0.data(), nullptr, nullptr, nullptr);
    if (!s.ok()) printf("emu: %s\n", s.message().c_str());
    const auto bf16 = [](double x) {  // the fp32 value's bf16 bits, rounded to nearest even
      const float f = float(x);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    };
    const int64_t nb = (c.T + 63) / 64, blk = c.K * c.V;
    int64_t bad = 0, checked = 0, starts = 0;
    double worst_start = 0.0;
    for (int64_t n = 0; n < c.N() && s.ok(); ++n) {
      const int64_t len = c.seqlens.empty() ? c.T : c.seqlens[size_t(n)];
      const int64_t t0 = c.seqlens.empty() ? 0 : int64_t(in.cu.get(n));
      for (int64_t ch = 0; ch * 64 < len; ++ch)
        for (int64_t h = 0; h < c.Hv; ++h) {
          const int64_t slot = c.seqlens.empty() ? n * nb + ch : n + (t0 + 64 * ch) / 64;
          const bool seg_start = pl.split && ch > 0 && ch % pl.seg_chunks == 0;
          double dd = 0.0, ww = 0.0;
          for (int64_t i = 0; i < c.K; ++i)
            for (int64_t j = 0; j < c.V; ++j) {
              const int64_t e = c.layout == StateLayout::k_major ? i * c.V + j : j * c.K + i;
              const double want = ch == 0 ? (h0.empty_shape() ? 0.0 : h0.get((n * c.Hv + h) * blk + e))
                                          : ck.get(((n * n64 + ch - 1) * c.Hv + h) * blk + e);
              const uint16_t got = s0[size_t((slot * c.Hv + h) * blk + i * c.V + j)];
              if (seg_start) {
                const uint32_t u = uint32_t(got) << 16;
                float x;
                std::memcpy(&x, &u, 4);
                dd += (x - want) * (x - want), ww += want * want;
              } else {
                bad += got != bf16(want);
                ++checked;
              }
            }
          if (seg_start) {
            const double e = std::sqrt(dd / std::max(ww, 1e-300));
            worst_start = std::max(worst_start, e), bad += !(e <= 5e-3), ++starts;
          }
        }
    }
    printf(
        "case %d S0 records (STATES form): %ld of %ld elements differ from the bf16 forward states; %ld segment "
        "starts, worst %.2e%s\n",
        which, long(bad), long(checked), long(starts), worst_start, bad || !s.ok() || !checked ? "  FAIL" : "");
    fails += bad != 0 || !s.ok() || !checked;
  }
  // a length-0 sequence keeps its start state exactly
  for (int64_t n = 0; n < c.N(); ++n) {
    if (c.seqlens.empty() || c.seqlens[size_t(n)] != 0) continue;
    int64_t bad = 0;
    for (int64_t i = 0; i < c.Hv * sblk; ++i) bad += got.hT.get(n * c.Hv * sblk + i) != in.h0.get(n * c.Hv * sblk + i);
    printf("case %d empty sequence %ld: %ld state elements changed%s\n", which, long(n), long(bad),
           bad ? "  FAIL" : "");
    fails += bad != 0;
  }
  return fails ? 1 : 0;
}
