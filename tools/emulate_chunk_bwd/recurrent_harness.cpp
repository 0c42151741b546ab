// The CUDA recurrent kernels of multi-token rows run in the host emulation of emu.hpp against the CPU oracle (the
// public API on fp64 copies, exec.cpu_fp64, CpuAlgo::recurrent): the wy kernel (src/cuda/recurrent/wy_kernel.cuh,
// through cuda::recurrent and its plan, the kernel forced to wy) and, where the branch has it, the wy kernel on
// mma.sync (wy_mma_kernel.cuh, launch_recurrent_wy_mma called directly: the harness compiles without it), and on
// single-token rows the direct and direct_pipe kernels (direct_kernel.cuh, direct_pipe_kernel.cuh). Inputs as
// the GPU suite builds them (tests/cuda/test_recurrent.cpp): a K-major pool of 0.1 N(0, 1), 1-D state_indices in
// reverse order and 3 slots no row addresses, commit, l2norm on, o poisoned with NaN. Bounds as that suite holds
// them: relative Frobenius error of o 3e-3 (bf16), 1e-3 (f16), doubled with a 16-bit pool, of the pool 1e-5 (fp32),
// 1e-2 (bf16), 2e-3 (f16); the worst head (o: value head; pool: (slot, head) block) within 3 times that. The pool
// slots the oracle left unchanged (no row addresses them, an invalid row's, a length-0 row's) must be bitwise
// unchanged, and an invalid row's o exact +0.
// Two emulated SMs: the wy kernel's persistent CTAs (4 per SM, 3 at 64 columns; wy_mma 2 per SM) then walk several
// tiles each, grouped by row, so the next tile's prefetch and a row's shared staging across its V-tiles run too
// (wy_mma's case 6 on three SMs: its ungrouped walk). Usage: recurrent_harness
// <case 0-38> [mma | direct | pipe] (direct, pipe: the plan forced to the direct or direct_pipe kernel; 0: Hqk = 2, Hv
// = 4, K = V = 128, bf16, fixed T = 12, N = 3, fp32 pool; 1: varlen {12, 0, 1, 17, 33} with slot -1 for the 17-token
// row, fused gate (A_log, dt_bias) and beta sigmoid; 2: a bf16 pool; 3: f16 activations; 4: K = 64, V = 128; 5: case 1
// on 16-column tiles (the wy kernel's choice; the mma kernel has one width); 6: one row of T = 160; 7: an f16 pool; 8:
// 2-D state_indices [4, 12] with num_accepted_tokens, one row's 0 (invalid), commit off (o only); 9: no state_indices
// (row n on slot n) with null_slot_is_invalid (row 0 invalid), MHA 4 heads, V = 64, g and beta absent; verify, the
// walk: 10: case 1 with bf16 intermediate states, commit off, row 0's buffer -1, T_buf cut to 20 in the mma kernel's
// arguments; 11: fp32 intermediate states with the 1-D commit, T = 20, row 1's buffer out of range; 12: protocol A (2-D
// slots, commit) with bf16 intermediate states on a bf16 pool, row 2 invalid, row 1's slot of token 5 -1; 13: protocol
// A alone, f16 activations and pool, K = 64, varlen {16, 3, 0, 9} on T_max = 16, row 0's slot of token 15 -1; 14: 2-D
// slots, commit off, f16 intermediate states, MHA, V = 64, no g, row 1 invalid; 15: protocol A on an fp32 pool with
// fp32 intermediate states, T = 20 on T_max = 24, slot 0 under null_slot_is_invalid for token 7 of row 0). Intermediate
// states: the oracle's where it wrote, the NaN poison where it did not (skipped rows and buffers, tokens past a row or
// the cut T_buf), bounds of the pool's dtype; protocol A with entries of the pool's dtype: each written slot equals its
// entry bit for bit. 16-20: cases 10, 12, 1, 15 and 14 on 64-column tiles.
#include "emu.hpp"

// The kernels see the emulation above.
#include "cuda/recurrent/recurrent_args.hpp"
namespace flashgdn::cuda {
// recurrent_args.hpp defines udiv for device code only (__CUDACC__): its multiply-high form here.
inline uint32_t udiv(uint32_t x, const DivU32& q) {
  return (__umulhi(x, q.m) + x) >> q.l;
}
}  // namespace flashgdn::cuda
#include "direct_kernel.cuh"
#include "direct_pipe_kernel.cuh"
#include "wy_kernel.cuh"
#if __has_include("wy_mma_kernel.cuh")
#include "wy_mma_kernel.cuh"
#define EMU_HAVE_WY_MMA 1
#else
#define EMU_HAVE_WY_MMA 0
#endif
// recurrent.cu's other launcher: not part of this harness (the plan is forced to wy, direct or direct_pipe).
namespace flashgdn::cuda {
template <StateLayout L, class ST, int K, int BV>
cudaError_t launch_recurrent(const RecurrentArgs&, int, cudaStream_t) {
  return cudaErrorNotSupported;
}
}  // namespace flashgdn::cuda
#include "api/plan.hpp"
#include "cuda/common/tma.cu"  // the tensor maps the wy launcher encodes (the emulated cuTensorMapEncodeTiled)
#include "cuda/recurrent/recurrent.cu"
#include "test_util.hpp"

#include <functional>
#include <string>

using namespace flashgdn;
using namespace flashgdn::test;

constexpr int32_t kSms = 2;  // emulated SMs (the plan's and direct_pipe's grid)

// direct_pipe's launcher sizes its persistent grid as resident CTAs per SM (the occupancy query) times SMs: one CTA
// per emulated SM, so that each CTA walks several tiles through its ring (both stages refilled, phases reused).
namespace flashgdn::cuda {
int device_sm_count(int) {
  return kSms;
}
}  // namespace flashgdn::cuda
extern "C" cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* n, const void*, int,
                                                                                        size_t, unsigned) {
  *n = 1;
  return cudaSuccess;
}

namespace {

struct Spec {
  int64_t N = 3, T = 12;         // fixed length: N rows of T tokens
  std::vector<int64_t> seqlens;  // non-empty: varlen
  int64_t Hqk = 2, Hv = 4, K = 128, V = 128;
  DType act = DType::bf16, pool_dt = DType::f32;
  bool raw_gate = false;  // use_gate_in_kernel (A_log, dt_bias) and use_beta_sigmoid_in_kernel
  bool has_g = true, has_beta = true;
  std::vector<int64_t> invalid;  // invalid rows: slot -1 (1-D), num_accepted_tokens 0 (2-D), slot 0 (no indices)
  bool has_si = true;            // false: row n starts from slot n
  int64_t T_max = 0;             // > 0: 2-D state_indices [N, T_max] with num_accepted_tokens (1 + 3 n % T_max)
  bool commit = true, null_invalid = false;
  bool vmajor = false;      // a V-major pool ([V, K] per head)
  int64_t extra_slots = 3;  // slots no row addresses
  int64_t pool_pad = 0;     // > 0: the kernels see the pool with rows of V + pool_pad elements (a strided pool)
  int32_t bv = 0;           // 0: the plan's tile width
  uint64_t seed = 1;
  // intermediate states [N + 1, T_buf, Hv, K, V] of inter_dt (entry 0 unused: row n on entry N - n, buf_set
  // overrides it: {row, value}); tbuf_cut > 0: the kernel's T_buf cut to it (the tensor as it was: entries of tokens
  // >= tbuf_cut must stay unwritten; the API rejects rows longer than T_buf, so only the arguments can say it)
  bool inter = false;
  DType inter_dt = DType::f32;
  std::vector<std::array<int64_t, 2>> buf_set;
  int64_t tbuf_cut = 0;
  std::vector<std::array<int64_t, 3>> slot_set;  // 2-D state_indices overrides {row, token, slot}
  // SMs the wy_mma launch is told of (grid = min(tiles, 2 x SMs)): at 2 (4 CTAs) every case with V = 128 has a row for
  // each CTA, the grouped walk; more CTAs than rows take the ungrouped one
  int32_t mma_sms = 2;
  // allow_neg_eigval's extreme (the chunked kernels' worst case, docs/chunk_fwd.md "Numerics"): 1 every token of a
  // q/k head with the same key, beta = 2, g = 0; 2 nearly parallel keys (k_0 + 0.05 noise), beta in [1.95, 2], g in
  // [-0.01, 0]; 3 as 1 with beta = 1.999
  int extreme = 0;
  // > 0: a walk of `calls` consecutive launches of T tokens each on row 0's slot (N = 1, 1-D slot, commit), the pool
  // carried from call to call, against the oracle and the CPU backend in fp32 (walk())
  int64_t calls = 0;
};

struct Inputs {
  HostTensor q, k, v, g, beta, A_log, dt_bias, cu, o, pool, si, na, inter, ii;
  int64_t N = 0;
};

// As test_recurrent.cpp's make(): q, k, v ~ N(0, 1); g ~ -U(0, 1) and beta ~ U(0, 1), or raw N(0, 1) with the fused
// gate; A_log ~ U(-1.5, -0.5), dt_bias ~ N(0, 1); distinct slots in reverse order, never slot 0.
Inputs make(const Spec& s) {
  Rng rng(s.seed);
  Inputs in;
  const bool varlen = !s.seqlens.empty();
  in.N = varlen ? int64_t(s.seqlens.size()) : s.N;
  const int64_t B = varlen ? 1 : in.N;
  int64_t T = s.T;
  if (varlen) {
    T = 0;
    for (auto l : s.seqlens) T += l;
  }
  in.q = HostTensor(s.act, {B, T, s.Hqk, s.K});
  in.k = HostTensor(s.act, {B, T, s.Hqk, s.K});
  in.v = HostTensor(s.act, {B, T, s.Hv, s.V});
  in.o = HostTensor(s.act, {B, T, s.Hv, s.V});
  for (HostTensor* t : {&in.q, &in.k, &in.v})
    for (int64_t i = 0; i < t->numel(); ++i) t->set(i, rng.normal());
  if (s.has_g) {
    in.g = HostTensor(DType::f32, {B, T, s.Hv});
    for (int64_t i = 0; i < in.g.numel(); ++i) in.g.set(i, s.raw_gate ? rng.normal() : -rng.uniform());
  }
  if (s.has_beta) {
    in.beta = HostTensor(DType::f32, {B, T, s.Hv});
    for (int64_t i = 0; i < in.beta.numel(); ++i) in.beta.set(i, s.raw_gate ? rng.normal() : rng.uniform());
  }
  if (s.extreme) {
    const int64_t rows = B * T;
    for (int64_t r = 1; r < rows; ++r)
      for (int64_t hk = 0; hk < s.Hqk; ++hk)
        for (int64_t i = 0; i < s.K; ++i)
          in.k.set((r * s.Hqk + hk) * s.K + i, in.k.get(hk * s.K + i) + (s.extreme == 2 ? 0.05 * rng.normal() : 0.0));
    for (int64_t i = 0; i < in.beta.numel(); ++i)
      in.beta.set(i, s.extreme == 1 ? 2.0 : s.extreme == 3 ? 1.999 : 2.0 - 0.05 * rng.uniform());
    for (int64_t i = 0; i < in.g.numel(); ++i) in.g.set(i, s.extreme == 2 ? -0.01 * rng.uniform() : 0.0);
  }
  if (s.raw_gate) {
    in.A_log = HostTensor(DType::f32, {s.Hv});
    in.dt_bias = HostTensor(DType::f32, {s.Hv});
    for (int64_t h = 0; h < s.Hv; ++h) in.A_log.set(h, rng.uniform(-1.5, -0.5)), in.dt_bias.set(h, rng.normal());
  }
  if (varlen) {
    in.cu = HostTensor(DType::i32, {in.N + 1});
    int64_t acc = 0;
    in.cu.set(0, 0);
    for (int64_t n = 0; n < in.N; ++n) acc += s.seqlens[size_t(n)], in.cu.set(n + 1, double(acc));
  }
  const int64_t cols = s.T_max > 0 ? s.T_max : 1, slots = in.N * cols + s.extra_slots;
  in.pool = HostTensor(s.pool_dt, {slots, s.Hv, s.K, s.V});
  for (int64_t i = 0; i < in.pool.numel(); ++i) in.pool.set(i, 0.1 * rng.normal());
  if (s.T_max > 0) {
    in.si = HostTensor(DType::i32, {in.N, s.T_max});
    for (int64_t i = 0; i < in.si.numel(); ++i) in.si.set(i, double(slots - 1 - i));
    in.na = HostTensor(DType::i32, {in.N});
    for (int64_t n = 0; n < in.N; ++n) in.na.set(n, double(1 + 3 * n % s.T_max));
    for (int64_t n : s.invalid) in.na.set(n, 0.0);
    for (auto& o : s.slot_set) in.si.set(o[0] * s.T_max + o[1], double(o[2]));
  } else if (s.has_si) {
    in.si = HostTensor(DType::i32, {in.N});
    for (int64_t n = 0; n < in.N; ++n) in.si.set(n, double(slots - 1 - n));
    for (int64_t n : s.invalid) in.si.set(n, -1.0);
  }
  if (s.inter) {
    int64_t tb = varlen ? 0 : T;
    for (auto l : s.seqlens) tb = std::max(tb, l);
    in.inter = HostTensor(s.inter_dt, {in.N + 1, tb, s.Hv, s.K, s.V});
    in.inter.fill_nan();
    in.ii = HostTensor(DType::i32, {in.N});
    for (int64_t n = 0; n < in.N; ++n) in.ii.set(n, double(in.N - n));
    for (auto& o : s.buf_set) in.ii.set(o[0], double(o[1]));
  }
  in.o.fill_nan();
  return in;
}

TensorView view_or_absent(const HostTensor& t) {
  return t.empty_shape() ? TensorView{} : t.view();
}
// The oracle's fp64 copy of a float tensor (indices keep their dtype).
HostTensor f64(const HostTensor& t) {
  return t.empty_shape() || t.dtype == DType::i32 || t.dtype == DType::i64 ? t : t.cast(DType::f64);
}

RecurrentParams params(const Spec& s) {
  RecurrentParams p;
  p.commit = s.commit;
  p.null_slot_is_invalid = s.null_invalid;
  p.use_qk_l2norm_in_kernel = true;
  p.gate.use_gate_in_kernel = s.raw_gate;
  p.gate.use_beta_sigmoid_in_kernel = s.raw_gate;
  p.state_layout = s.vmajor ? StateLayout::v_major : StateLayout::k_major;
  return p;
}

// Fills p's tensors from x (o and pool written in place).
void bind(RecurrentParams& p, Inputs& x) {
  p.q = x.q.view(), p.k = x.k.view(), p.v = x.v.view(), p.g = view_or_absent(x.g), p.beta = view_or_absent(x.beta);
  p.A_log = view_or_absent(x.A_log), p.dt_bias = view_or_absent(x.dt_bias), p.cu_seqlens = view_or_absent(x.cu);
  p.o = x.o.view(), p.state_pool = x.pool.view(), p.state_indices = view_or_absent(x.si);
  p.num_accepted_tokens = view_or_absent(x.na);
  p.intermediate_states = view_or_absent(x.inter), p.intermediate_indices = view_or_absent(x.ii);
}

bool run_oracle(const Spec& s, Inputs& x) {
  RecurrentParams p = params(s);
  bind(p, x);
  p.exec.cpu_fp64 = true;
  p.exec.cpu_algo = CpuAlgo::recurrent;
  const Status st = recurrent(p);
  if (!st.ok()) printf("oracle: %s\n", st.message().c_str());
  return st.ok();
}

#if EMU_HAVE_WY_MMA
template <class ST>
cudaError_t launch_mma(const cuda::RecurrentArgs& a, int32_t sms) {
  return a.K == 64 ? cuda::launch_recurrent_wy_mma<ST, 64>(a, sms, nullptr)
                   : cuda::launch_recurrent_wy_mma<ST, 128>(a, sms, nullptr);
}
#endif

// The emulated run on x (storage dtypes as the case says).
bool run_emulated(const Spec& s, Inputs& x, bool mma, RecurrentKernel kernel, const char* tag, bool quiet = false) {
  RecurrentParams p = params(s);
  bind(p, x);
  p.exec.recurrent_kernel = kernel;
  // A strided pool: x.pool's rows in a buffer of rows of V + pool_pad elements, the padding a sentinel that must stay
  // bitwise; copied back into x.pool after the run.
  HostTensor padded;
  const int64_t rows = x.pool.numel() / s.V, vp = s.V + s.pool_pad;
  if (s.pool_pad > 0) {
    padded = HostTensor(x.pool.dtype, {rows, vp});
    padded.fill(7.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < s.V; ++j) padded.set(r * vp + j, x.pool.get(r * s.V + j));
    p.state_pool.data = padded.data();
    for (int i = 3; i >= 0; --i)
      p.state_pool.strides[i] = i == 3 ? 1 : i == 2 ? vp : p.state_pool.strides[i + 1] * p.state_pool.shape[i + 1];
  }
  const auto unpad = [&] {
    if (s.pool_pad == 0) return true;
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < s.V; ++j) x.pool.set(r * s.V + j, padded.get(r * vp + j));
      for (int64_t j = s.V; j < vp; ++j) bad += padded.get(r * vp + j) != 7.0;
    }
    printf("case %s pool padding (%ld-element rows): %ld elements changed%s\n", tag, long(vp), long(bad),
           bad ? "  FAIL" : "");
    return bad == 0;
  };
  RecurrentDims d;
  Status st = validate(p, &d);
  RecurrentPlan pl;
  if (st.ok()) st = plan_recurrent(p, d, DeviceFacts{kSms}, &pl);
  if (!st.ok()) {
    printf("case %s: %s  FAIL\n", tag, st.message().c_str());
    return false;
  }
  if (!mma) {
    if (s.bv) pl.bv = s.bv;
    if (!quiet) printf("%s", describe(pl, d).c_str());
    st = cuda::recurrent(p, d, pl, nullptr);
    if (!st.ok()) printf("case %s: %s  FAIL\n", tag, st.message().c_str());
    return unpad() && st.ok();
  }
#if EMU_HAVE_WY_MMA
  cuda::RecurrentArgs a = cuda::make_recurrent_args(p, d);
  a.vt = cuda::DivU32::of(uint32_t(a.V / 64));  // as cuda::recurrent sets it for the plan's 64-column tiles
  if (s.tbuf_cut > 0) a.T_buf = s.tbuf_cut;
  cudaError_t e = cudaErrorInvalidValue;
  switch (a.pool_dtype) {
    case DType::bf16:
      e = launch_mma<__nv_bfloat16>(a, s.mma_sms);
      break;
    case DType::f16:
      e = launch_mma<__half>(a, s.mma_sms);
      break;
    default:
      e = launch_mma<float>(a, s.mma_sms);
      break;
  }
  // the kernel's choice of walk, as it makes it from the grid (launch_recurrent_wy_mma)
  const int64_t tiles = a.N * a.Hv * (a.V / 64), grid = std::min<int64_t>(tiles, 2 * s.mma_sms);
  const bool grouped = a.V / 64 > 1 && a.N * a.Hv >= grid;
  if (!quiet)
    printf("wy_mma: launch_recurrent_wy_mma<%s, %d>, %lld tiles on %lld CTAs, %s walk\n", dtype_name(a.pool_dtype), a.K,
           (long long)tiles, (long long)grid, grouped ? "grouped" : "ungrouped");
  if (e != cudaSuccess) printf("case %s: launch_recurrent_wy_mma returned %d  FAIL\n", tag, int(e));
  return e == cudaSuccess;
#else
  printf("case %s: this branch has no src/cuda/recurrent/wy_mma_kernel.cuh  FAIL\n", tag);
  return false;
#endif
}

// Relative error where the oracle wrote; where it left the NaN poison, the emulated run must have too.
double err_written(const HostTensor& x, const HostTensor& ref, std::string* why) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double a = x.get(i), b = ref.get(i);
    if (std::isnan(b)) {
      if (!std::isnan(a)) {
        *why = "element " + std::to_string(i) + " written where the oracle wrote nothing";
        return INFINITY;
      }
      continue;
    }
    if (!std::isfinite(a)) {
      *why = "element " + std::to_string(i) + " non-finite";
      return INFINITY;
    }
    num += (a - b) * (a - b), den += b * b;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

Spec spec_of(int which) {
  Spec s;
  if (which == 1 || which == 5) {
    s.seqlens = {12, 0, 1, 17, 33};
    s.invalid = {3};
    s.raw_gate = true;
    if (which == 5) s.bv = 16;
  }
  if (which == 2) s.pool_dt = DType::bf16;
  if (which == 3) s.act = DType::f16;
  if (which == 4) s.K = 64;
  // 10 chunks of wy_mma, 20 of wy: the state's error must not grow with them; wy_mma on 6 CTAs for its 4 rows (8
  // tiles): the ungrouped walk (as at N = 1 on the H200), CTAs 0 and 1 two tiles each
  if (which == 6) s.T = 160, s.N = 1, s.mma_sms = 3;
  if (which == 7) s.pool_dt = DType::f16;
  if (which == 8) s.N = 4, s.T_max = 12, s.commit = false, s.invalid = {2};  // o only: the pool stays as it was
  if (which == 9) {  // row n on slot n, row 0 invalid (slot 0); no g (0) and no beta (1)
    s.Hqk = s.Hv = 4, s.V = 64, s.has_si = false, s.null_invalid = true, s.invalid = {0};
    s.has_g = s.has_beta = false;
  }
  if (which == 10) {  // verify, protocol B: bf16 entries, commit off, row 0's buffer invalid, T_buf cut to 20
    s.seqlens = {12, 0, 1, 17, 33};
    s.invalid = {3};
    s.raw_gate = true;
    s.inter = true, s.inter_dt = DType::bf16, s.commit = false, s.buf_set = {{0, -1}}, s.tbuf_cut = 20;
  }
  if (which == 11) {  // fp32 entries with the 1-D commit (the walk's last state committed), 2 chunks; row 1's buffer
                      // out of range (its final state by the closed form)
    s.N = 3, s.T = 20, s.inter = true, s.inter_dt = DType::f32, s.buf_set = {{1, 4}};
  }
  if (which == 12) {  // protocol A with bf16 entries on a bf16 pool: 2-D slots, num_accepted_tokens, row 2 invalid
                      // (count 0), row 1's slot of token 5 invalid
    s.N = 4, s.T_max = 12, s.invalid = {2}, s.slot_set = {{1, 5, -1}}, s.pool_dt = DType::bf16;
    s.inter = true, s.inter_dt = DType::bf16;
  }
  if (which == 13) {  // protocol A alone: f16 activations and pool, K = 64, varlen rows of 16, 3, 0, 9 tokens on
                      // T_max = 16, row 0's slot of token 15 invalid
    s.seqlens = {16, 3, 0, 9}, s.T_max = 16, s.act = DType::f16, s.pool_dt = DType::f16, s.K = 64;
    s.slot_set = {{0, 15, -1}};
  }
  if (which == 14) {  // verify, commit off, 2-D slots: f16 entries, V = 64, MHA, no g, row 1 invalid (count 0)
    s.N = 4, s.T_max = 12, s.commit = false, s.invalid = {1}, s.inter = true, s.inter_dt = DType::f16;
    s.Hqk = s.Hv = 4, s.V = 64, s.has_g = false;
  }
  if (which == 15) {  // protocol A on an fp32 pool with fp32 entries, 2 chunks (T = 20 on T_max = 24), slot 0 invalid
                      // (null_slot_is_invalid) for token 7 of row 0
    s.N = 3, s.T = 20, s.T_max = 24, s.null_invalid = true, s.slot_set = {{0, 7, 0}};
    s.inter = true, s.inter_dt = DType::f32;
  }
  s.seed = 100 + uint64_t(which);
  return s;
}

// Cases 21-30: single-token decode (T = 1 a row), the direct kernel's 64-register instantiation (run them with
// "direct"; the plan's tile width unless the case sets one: 64 columns on the 2 emulated SMs, 128 on a 16-bit pool)
// and, with "pipe", the direct_pipe kernel where it applies (K-major 16-bit pools, 1-D slots: 23, 27-30; one
// persistent CTA per emulated SM walks 10-12 tiles through its 2-stage ring):
// 21: N = 5, GQA 2, the fused gate and beta sigmoid, row 3 invalid (slot -1); 22: case 21 on 16-column tiles (the
// plan's at N = 1, Hv = 32); 23: a bf16 pool (the packed state); 24: 2-D slots (T_max = 4, num_accepted_tokens) with
// protocol A and fp32 intermediate states, row 2 invalid (count 0); 25: no state_indices (row n on slot n) with
// null_slot_is_invalid (row 0 invalid), MHA, V = 64, no g and beta; 26: case 21 on a V-major pool; 27: f16
// activations and pool (direct_pipe's f16 instance, its late refill); 28: a bf16 pool, K = 64, g and beta as given (the
// benchmark's gates), no state_indices with null_slot_is_invalid (row 0 invalid); 29: the benchmark's decode on a small
// batch: a bf16 pool, K = V = 128, g and beta as given, N = 6, row 4 invalid; 30: case 29 on a strided pool (rows of
// 136 elements: direct_pipe's per-row copies and runtime row stride).
Spec spec_decode(int which) {
  Spec s;
  s.N = 5, s.T = 1, s.raw_gate = true, s.invalid = {3};
  if (which == 22) s.bv = 16;
  if (which == 23) s.pool_dt = DType::bf16;
  if (which == 27) s.act = DType::f16, s.pool_dt = DType::f16;
  if (which == 28) {
    s.pool_dt = DType::bf16, s.K = 64, s.raw_gate = false;
    s.has_si = false, s.null_invalid = true, s.invalid = {0};
  }
  if (which == 29 || which == 30) s.pool_dt = DType::bf16, s.raw_gate = false, s.N = 6, s.invalid = {4};
  if (which == 30) s.pool_pad = 8;
  if (which == 24) s.T_max = 4, s.invalid = {2}, s.inter = true, s.inter_dt = DType::f32;
  if (which == 25) {
    s.Hqk = s.Hv = 4, s.V = 64, s.has_si = false, s.null_invalid = true, s.invalid = {0};
    s.has_g = s.has_beta = false, s.raw_gate = false;
  }
  if (which == 26) s.vmajor = true;
  s.seed = 100 + uint64_t(which);
  return s;
}

// Cases 16-20 rerun a case on the wy kernel's 64-column tiles (the plan's for 16-bit per-token stores on large
// batches; the small ones here get 32): 16: case 10, 17: case 12 (protocol A, bf16 pool and entries), 18: case 1
// (final state only: the closed form, the grouped walk), 19: case 15 (fp32 stores), 20: case 14 (V = 64: one tile
// a head).
// Cases 34-36 run case 6 (34: identical keys, beta = 2, g = 0; 35: nearly parallel keys, beta near 2) and case 10 (36:
// verify, identical keys, beta = 2) at allow_neg_eigval's extreme (Spec::extreme).
// Cases 31-33 rerun a verify case on 16-column tiles (the plan's for N <= 2 at Hv = 32: the verify N = 1 bench
// case's width): 31: case 10 (bf16 entries), 32: case 12 (protocol A, bf16 pool and entries), 33: case 15 (fp32
// entries, protocol A on an fp32 pool).
Spec spec_of_case(int which) {
  struct Rerun {
    int which, base, bv;  // case `which` is case `base` on `bv`-column tiles
  };
  constexpr Rerun kReruns[] = {{16, 10, 64}, {17, 12, 64}, {18, 1, 64},  {19, 15, 64},
                               {20, 14, 64}, {31, 10, 16}, {32, 12, 16}, {33, 15, 16}};
  for (const Rerun& r : kReruns)
    if (r.which == which) {
      Spec s = spec_of(r.base);
      s.bv = r.bv;
      return s;
    }
  if (which >= 34 && which <= 36) {  // case 6 (one row of 160 tokens) and case 10 (verify) at beta = 2
    Spec s = spec_of(which == 36 ? 10 : 6);
    s.extreme = which == 35 ? 2 : 1;
    if (which == 36) s.raw_gate = false;  // (the fused gate would take beta and g from raw values)
    return s;
  }
  if (which == 37 || which == 38) {  // walks: 150 calls of T = 12 (MTP), identical keys, g = 0, beta = 2 / 1.999
    Spec s;
    s.N = 1, s.T = 12, s.calls = 150, s.Hqk = 1, s.Hv = 2, s.extreme = which == 37 ? 1 : 3;
    s.seed = 100 + uint64_t(which);
    return s;
  }
  return which >= 21 ? spec_decode(which) : spec_of(which);
}

// The CPU backend in fp32 (exec.cpu_fp64 off) on x as stored.
bool run_cpu32(const Spec& s, Inputs& x) {
  RecurrentParams p = params(s);
  bind(p, x);
  p.exec.cpu_algo = CpuAlgo::recurrent;
  const Status st = recurrent(p);
  if (!st.ok()) printf("cpu fp32: %s\n", st.message().c_str());
  return st.ok();
}

// Tokens [t0, t0 + n) of a [1, T, ...] tensor (absent stays absent).
HostTensor tokens(const HostTensor& t, int64_t t0, int64_t n) {
  if (t.empty_shape()) return t;
  std::vector<int64_t> shp = t.shape;
  const size_t row = size_t(t.numel() / shp[1] * dtype_size(t.dtype));
  shp[1] = n;
  HostTensor r(t.dtype, shp);
  std::memcpy(r.bytes.data(), t.bytes.data() + size_t(t0) * row, size_t(n) * row);
  return r;
}

// A walk (Spec::calls > 0): one row's calls x T tokens as `calls` consecutive launches of T tokens on the same pool
// slot, each call's final state committed and the next call's start, as multi-token decode runs (the kernel's per-call
// error adds up across calls where the recurrence does not damp it: at beta = 2 and identical keys the state's
// component along the key is carried with factor (1 - beta)^T = 1 from call to call). The oracle (fp64) and the CPU
// backend in fp32 walk the same calls. Printed after calls 1, 2, 5, 10, 25, 50, ...: the pool's relative error (the
// whole slot, and its component along the key, S^T k^, per head worst), the call's o; bounds gdn-math §10.3's 5e-3
// (bf16 tensor-core operands, fp32 state) for o and the pool, at every checkpoint.
int walk(const Spec& s, bool mma, RecurrentKernel kernel, const std::string& tag) {
  Spec full = s;
  full.T = s.T * s.calls;
  const Inputs in = make(full);
  Inputs ref = in, c32 = in, got = in;
  for (HostTensor* t : {&ref.q, &ref.k, &ref.v, &ref.g, &ref.beta, &ref.A_log, &ref.dt_bias, &ref.o, &ref.pool})
    *t = f64(*t);
  // k^ of each q/k head (every token's key is token 0's: Spec::extreme 1, 3)
  std::vector<double> kh(size_t(s.Hqk * s.K));
  for (int64_t hk = 0; hk < s.Hqk; ++hk) {
    double n2 = 0;
    for (int64_t i = 0; i < s.K; ++i) n2 += in.k.get(hk * s.K + i) * in.k.get(hk * s.K + i);
    for (int64_t i = 0; i < s.K; ++i) kh[size_t(hk * s.K + i)] = in.k.get(hk * s.K + i) / std::sqrt(n2);
  }
  const int64_t slot = int64_t(in.si.get(0)), blk = s.K * s.V, gqa = s.Hv / s.Hqk;
  // worst head of the relative error of S^T k^ (the slot's component along the key)
  const auto key_err = [&](const HostTensor& x, const HostTensor& r) {
    double worst = 0;
    for (int64_t h = 0; h < s.Hv; ++h) {
      double num = 0, den = 0;
      for (int64_t j = 0; j < s.V; ++j) {
        double a = 0, b = 0;
        for (int64_t i = 0; i < s.K; ++i) {
          const int64_t e = (slot * s.Hv + h) * blk + i * s.V + j;
          a += x.get(e) * kh[size_t((h / gqa) * s.K + i)], b += r.get(e) * kh[size_t((h / gqa) * s.K + i)];
        }
        num += (a - b) * (a - b), den += b * b;
      }
      worst = std::max(worst, std::sqrt(num / den));
    }
    return worst;
  };
  printf(
      "case %s: a walk of %ld calls of T = %ld (identical keys, g = 0, beta = %g), Hqk = %ld, Hv = %ld, K = %ld, V "
      "= %ld, %s pool\n",
      tag.c_str(), long(s.calls), long(s.T), in.beta.get(0), long(s.Hqk), long(s.Hv), long(s.K), long(s.V),
      dtype_name(s.pool_dt));
  int fails = 0;
  double worst_o = 0, worst_pool = 0;
  for (int64_t c = 0; c < s.calls; ++c) {
    Inputs xr, x32, xg;
    for (auto [x, src] : {std::pair{&xr, &ref}, std::pair{&x32, &c32}, std::pair{&xg, &got}}) {
      x->N = 1;
      x->q = tokens(src->q, c * s.T, s.T), x->k = tokens(src->k, c * s.T, s.T), x->v = tokens(src->v, c * s.T, s.T);
      x->g = tokens(src->g, c * s.T, s.T), x->beta = tokens(src->beta, c * s.T, s.T);
      x->A_log = src->A_log, x->dt_bias = src->dt_bias, x->si = src->si;
      x->o = tokens(src->o, c * s.T, s.T);
      x->pool = std::move(src->pool);
    }
    const bool ok = run_oracle(s, xr) && run_cpu32(s, x32) && run_emulated(s, xg, mma, kernel, tag.c_str(), true);
    for (auto [x, dst] : {std::pair{&xr, &ref}, std::pair{&x32, &c32}, std::pair{&xg, &got}})
      dst->pool = std::move(x->pool);
    if (!ok) return 1;
    const int64_t n = c + 1;
    const bool report = n == 1 || n == 2 || n == 5 || n == 10 || n % 25 == 0 || n == s.calls;
    std::string why;
    const double eo = err_written(xg.o, xr.o, &why), eo32 = err_written(x32.o, xr.o, &why);
    worst_o = std::max(worst_o, eo);
    if (!report) continue;
    const double ep = err_written(got.pool, ref.pool, &why), ep32 = err_written(c32.pool, ref.pool, &why);
    worst_pool = std::max(worst_pool, ep);
    printf("case %s call %4ld: pool rel %.3e (fp32 CPU %.3e), along the key %.3e (%.3e); o rel %.3e (%.3e)\n",
           tag.c_str(), long(n), ep, ep32, key_err(got.pool, ref.pool), key_err(c32.pool, ref.pool), eo, eo32);
  }
  const bool ok = worst_o <= 5e-3 && worst_pool <= 5e-3;
  printf("case %s worst over the walk: o %.3e, pool %.3e (bound 5e-3)%s\n", tag.c_str(), worst_o, worst_pool,
         ok ? "" : "  FAIL");
  fails += !ok;
  return fails ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int which = argc > 1 ? atoi(argv[1]) : 0;
  const std::string mode = argc > 2 ? argv[2] : "";
  const bool mma = mode == "mma", direct = mode == "direct", pipe = mode == "pipe";
  const RecurrentKernel kernel = direct ? RecurrentKernel::direct
                                 : pipe ? RecurrentKernel::direct_pipe
                                        : RecurrentKernel::wy;
  const std::string tag = "r" + std::to_string(which) + (mma ? "m" : direct ? "d" : pipe ? "p" : "");
  const Spec s = spec_of_case(which);
  if (s.calls > 0) return walk(s, mma, kernel, tag);
  const Inputs in = make(s);
  Inputs ref = in, got = in;
  for (HostTensor* t :
       {&ref.q, &ref.k, &ref.v, &ref.g, &ref.beta, &ref.A_log, &ref.dt_bias, &ref.o, &ref.pool, &ref.inter})
    *t = f64(*t);
  if (!run_oracle(s, ref) || !run_emulated(s, got, mma, kernel, tag.c_str())) return 1;

  int fails = 0;
  // floor: the error of the oracle's values rounded once to the output's storage type, the least a kernel can reach
  // (so that an error of the kernel's own far below the bound still shows as an excess over it)
  const auto line = [&](const char* name, double e, double w, double bound, double floor) {
    const bool ok = e <= bound && w <= 3 * bound;
    fails += !ok;
    printf("case %s %-4s rel %.3e worst head %.3e (bounds %.0e, %.0e; rounding alone %.3e)%s\n", tag.c_str(), name, e,
           w, bound, 3 * bound, floor, ok ? "" : "  FAIL");
  };
  const auto rounded = [](const HostTensor& ref, DType dt) {
    std::string w;
    return err_written(ref.cast(dt), ref, &w);
  };
  std::string why;
  // o: every row of a valid row's tokens is written (length-0 rows have none); invalid rows' are exact zeros
  const double tol_o = (s.act == DType::bf16 ? 3e-3 : 1e-3) * (s.pool_dt == DType::f32 ? 1 : 2);
  {
    const double e = err_written(got.o, ref.o, &why);
    HostTensor go = got.o.cast(DType::f64), ro = ref.o;
    for (int64_t i = 0; i < ro.numel(); ++i)
      if (std::isnan(ro.get(i))) ro.set(i, 0.0), go.set(i, 0.0);
    line("o", e, max_head_err(go, ro, s.Hv, [&](int64_t i) { return (i / s.V) % s.Hv; }), tol_o, rounded(ref.o, s.act));
    if (!std::isfinite(e) && !why.empty()) printf("case %s o: %s\n", tag.c_str(), why.c_str());
  }
  {
    int64_t rows = 0, bad = 0;
    for (int64_t n : s.invalid) {
      const int64_t t0 = s.seqlens.empty() ? n * s.T : int64_t(ref.cu.get(n)),
                    len = s.seqlens.empty() ? s.T : s.seqlens[size_t(n)];
      for (int64_t t = t0; t < t0 + len; ++t)
        for (int64_t h = 0; h < s.Hv; ++h, ++rows)
          for (int64_t j = 0; j < s.V; ++j) {
            const double x = got.o.get((t * s.Hv + h) * s.V + j);
            bad += x != 0.0 || std::signbit(x);
          }
    }
    if (!s.invalid.empty()) {
      printf("case %s invalid rows: %ld (token, head) rows of o, %ld elements not +0%s\n", tag.c_str(), long(rows),
             long(bad), bad ? "  FAIL" : "");
      fails += bad != 0;
    }
  }
  // the pool
  const double tol_s = s.pool_dt == DType::f32 ? 1e-5 : s.pool_dt == DType::bf16 ? 1e-2 : 2e-3;
  const int64_t blk = s.K * s.V, slots = in.pool.shape[0];
  {
    const double e = err_written(got.pool, ref.pool, &why);
    line("pool", e, max_head_err(got.pool, ref.pool, slots * s.Hv, [&](int64_t i) { return i / blk; }), tol_s,
         rounded(ref.pool, s.pool_dt));
  }
  {
    // slots the oracle left unchanged: bitwise unchanged
    const size_t bytes = size_t(s.Hv * blk * dtype_size(s.pool_dt));
    int64_t kept = 0, changed = 0;
    for (int64_t sl = 0; sl < slots; ++sl) {
      bool touched = false;
      for (int64_t i = sl * s.Hv * blk; i < (sl + 1) * s.Hv * blk && !touched; ++i)
        touched = ref.pool.get(i) != in.pool.get(i);
      if (touched) continue;
      ++kept;
      changed += std::memcmp(got.pool.bytes.data() + sl * bytes, in.pool.bytes.data() + sl * bytes, bytes) != 0;
    }
    printf("case %s untouched slots: %ld of %ld, %ld changed%s\n", tag.c_str(), long(kept), long(slots), long(changed),
           changed ? "  FAIL" : "");
    fails += changed != 0;
  }
  if (s.inter) {  // the intermediate entries: where the oracle left the NaN poison (a skipped row or buffer, tokens
                  // past a row's end or the cut T_buf) the kernel must have too
    const int64_t Tb = in.inter.shape[1];
    HostTensor ri = ref.inter;
    if (mma && s.tbuf_cut > 0)
      for (int64_t i = 0; i < ri.numel(); ++i)
        if ((i / (s.Hv * blk)) % Tb >= s.tbuf_cut) ri.set(i, NAN);
    const double e = err_written(got.inter, ri, &why);
    HostTensor gi = got.inter.cast(DType::f64);
    int64_t written = 0;
    for (int64_t i = 0; i < ri.numel(); ++i)
      if (std::isnan(ri.get(i)))
        ri.set(i, 0.0), gi.set(i, 0.0);
      else
        ++written;
    line("inter", e, max_head_err(gi, ri, ri.numel() / blk, [&](int64_t i) { return i / blk; }),
         s.inter_dt == DType::f32    ? 1e-5
         : s.inter_dt == DType::bf16 ? 1e-2
                                     : 2e-3,
         rounded(ref.inter, s.inter_dt));
    printf("case %s inter: %ld of %ld elements written by the oracle%s\n", tag.c_str(), long(written), long(ri.numel()),
           std::isfinite(e) ? "" : (" (" + why + ")").c_str());
  }
  if (s.inter && s.T_max > 0 && s.commit && s.inter_dt == s.pool_dt) {
    // protocol A with entries of the pool's dtype: slot [n, t] holds entry [buf, t] bit for bit (one fp32 state
    // rounded once, twice)
    const size_t bytes = size_t(s.Hv * blk * dtype_size(s.pool_dt));
    const int64_t Tb = in.inter.shape[1];
    int64_t pairs = 0, differ = 0;
    for (int64_t n = 0; n < in.N; ++n) {
      const int64_t len = s.seqlens.empty() ? s.T : s.seqlens[size_t(n)], buf = int64_t(in.ii.get(n));
      const int64_t acc = int64_t(in.na.get(n));
      if (acc < 1 || acc > s.T_max || buf < 0 || buf >= in.N + 1) continue;
      for (int64_t t = 0; t < len && t < s.T_max && t < Tb; ++t) {
        const int64_t sl = int64_t(in.si.get(n * s.T_max + t));
        if (sl < 0 || sl >= slots || (s.null_invalid && sl == 0)) continue;
        ++pairs;
        differ += std::memcmp(got.pool.bytes.data() + sl * bytes, got.inter.bytes.data() + (buf * Tb + t) * bytes,
                              bytes) != 0;
      }
    }
    printf("case %s protocol A: %ld (row, token) slots, %ld differ from their entry%s\n", tag.c_str(), long(pairs),
           long(differ), differ || !pairs ? "  FAIL" : "");
    fails += differ != 0 || pairs == 0;
  }
  // the outputs' bits (FNV-1a of o, the pool and the intermediate states): a change meant to keep every result
  // bitwise compares them before and after
  const auto fnv = [](const HostTensor& t) {
    uint64_t x = 0xcbf29ce484222325ull;
    for (unsigned char c : t.bytes) x = (x ^ c) * 0x100000001b3ull;
    return x;
  };
  // the wy kernel's per-token 16-bit stores at 64 columns go out as TMA boxes (one per warp and token)
  printf("case %s TMA store boxes: %llu\n", tag.c_str(),
         (unsigned long long)emu::tma::g_store_boxes.load(std::memory_order_relaxed));
  printf("case %s bits: o %016llx pool %016llx inter %016llx\n", tag.c_str(), (unsigned long long)fnv(got.o),
         (unsigned long long)fnv(got.pool), (unsigned long long)(s.inter ? fnv(got.inter) : 0));
  return fails ? 1 : 0;
}
