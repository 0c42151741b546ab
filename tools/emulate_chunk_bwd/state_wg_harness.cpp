// The CUDA prefill with its wgmma state pass (src/cuda/chunk_fwd/: the intra-chunk pass, chunk_fwd_state_wg.cuh on
// wgmma, TMA and mbarriers, and the segment split's index, summaries and scan, chunk_split.cuh) run in the host
// emulation of emu.hpp / emu_sm90.hpp through cuda::chunk_fwd and its plan, K = V = 128, against the CPU oracle (the
// public API, fp64 recurrence) on fresh random inputs with NaN-poisoned outputs and NaN slack rows. Bounds: gdn-math
// §10.3 as the GPU suite holds them (tests/cuda/test_chunk_fwd.cpp): relative Frobenius error <= 5e-3 for o and hT,
// 1e-2 for the worst head. Built with -fsanitize=thread (run.sh --tsan), ThreadSanitizer reports every pair of
// shared-memory accesses that no barrier, mbarrier phase or async wait orders.
// Usage: state_wg_harness <case 0-4> (0: bf16, T = 200 (a partial last chunk), GQA 2, h0; 1: varlen 70, 0, 130
// with slack rows (the cp.async path inside the tensor, TMA at its end), fused gate; 2: the split forced, 3 segments,
// strong decay (every summary a decay window); 3: the split forced, weak decay (full [M | N] summaries), varlen; 4:
// fp16, v-major state, checkpoints)
#include "emu.hpp"

// The kernels see the emulation above.
#include "chunk_fwd_intra.cuh"
#include "chunk_fwd_state_wg.cuh"
namespace flashgdn::cuda {
int launch_chunk_intra_bf16(const ChunkKernelArgs& a, int64_t K, void* s) {
  return K == 64 ? chunk_detail::launch_chunk_intra<64, true>(a, s) : chunk_detail::launch_chunk_intra<128, true>(a, s);
}
int launch_chunk_intra_f16(const ChunkKernelArgs& a, int64_t K, void* s) {
  return K == 64 ? chunk_detail::launch_chunk_intra<64, false>(a, s)
                 : chunk_detail::launch_chunk_intra<128, false>(a, s);
}
int launch_chunk_state_wg_bf16(const ChunkKernelArgs& a, const ChunkStateMaps& m, int64_t items, int64_t tiles,
                               void* s) {
  return chunk_detail::launch_chunk_state_wg<true>(a, m, items, tiles, s);
}
int launch_chunk_state_wg_f16(const ChunkKernelArgs& a, const ChunkStateMaps& m, int64_t items, int64_t tiles,
                              void* s) {
  return chunk_detail::launch_chunk_state_wg<false>(a, m, items, tiles, s);
}
// The mma.sync state pass (K or V = 64) is not part of this harness.
int launch_chunk_state_bf16(const ChunkKernelArgs&, int64_t, int64_t, int64_t, void*) {
  return static_cast<int>(cudaErrorNotSupported);
}
int launch_chunk_state_f16(const ChunkKernelArgs&, int64_t, int64_t, int64_t, void*) {
  return static_cast<int>(cudaErrorNotSupported);
}
}  // namespace flashgdn::cuda
#include "api/plan.hpp"
#include "chunk_fwd_host.inc"
#include "cuda/common/tma.cu"
#include "test_util.hpp"

#include <functional>

using namespace flashgdn;
using namespace flashgdn::test;

int main(int argc, char** argv) {
  const int which = argc > 1 ? atoi(argv[1]) : 0;
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
  GdnInputs in = make_inputs(c);
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
      if (!s.ok()) printf("oracle: %s\n", s.message());
      return s.ok();
    }
    p.exec.chunk_fwd_segments = segments;
    ChunkDims d;
    Status s = validate(p, &d);
    ChunkFwdPlan pl;
    if (s.ok()) s = plan_chunk_fwd(p, d, DeviceFacts{132}, &pl);
    if (!s.ok()) {
      printf("emu: %s\n", s.message());
      return false;
    }
    printf("%s", describe(pl, d).c_str());
    if (pl.state_pass != ChunkStatePass::wgmma || pl.split != (segments > 1)) {
      printf("case %d: not the wgmma state pass with the split %s  FAIL\n", which, segments > 1 ? "on" : "off");
      return false;
    }
    std::vector<unsigned char> ws(pl.workspace_bytes, 0xff);
    s = cuda::chunk_fwd(p, d, pl, ws.data(), ws.size(), nullptr);
    if (!s.ok()) printf("emu: %s\n", s.message());
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
