// Host emulation of the CUDA features the chunk kernels use: one std::thread per CUDA thread, blocks one at a time,
// __syncthreads and named barriers (bar.sync id, count) as emu::Barrier (threads that return drop out), __shfl_*_sync
// and __all_sync as exchanges within the warp (every lane of the warp reaches them), mma.sync m16n8k16 (bf16 / fp16,
// fp32 accumulation) and ldmatrix as exchanges within the warp, mma16_f32 in fp32, cp.async landing at the wait that
// completes it (below; gen.py
// points the kernels' calls of mma_m16n8k16, cp_async* etc. at the emu_* functions here), and the Hopper features of
// cuda/common/{wgmma,mbarrier,tma}.cuh as the asynchronous models of emu_sm90.hpp. It checks the kernels' index math,
// layouts, barriers and numerics against the CPU oracle on a machine without a GPU. Built with -fsanitize=thread
// (run.sh --tsan), ThreadSanitizer reports the shared-memory (g_smem) accesses of two threads that no barrier orders,
// in the source's order; the exchanges within a warp synchronize its lanes, so races between lanes of one warp across
// them stay unseen, as do reorderings below the source (the compiler, the device) and the device's shared-memory
// limit.
#pragma once
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)
#define __forceinline__ inline
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bit>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "common/dtype.hpp"

#define __grid_constant__
// The CTA's shared memory (one CTA runs at a time); a shared-memory address is the offset into it.
alignas(1024) inline unsigned char g_smem[240000];
inline thread_local dim3 threadIdx, blockIdx, gridDim;
inline unsigned __cvta_generic_to_shared(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  if (b < g_smem || b >= g_smem + sizeof(g_smem)) {
    std::fprintf(stderr, "emulation: a shared-memory address of %p, outside the CTA's shared memory\n", p);
    std::abort();
  }
  return unsigned(b - g_smem);
}
// Blocking without an ordering that ThreadSanitizer would see (the orderings come from the atomics around it).
namespace emu {
inline void futex_wait(std::atomic<uint32_t>& w, uint32_t v) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&w), FUTEX_WAIT_PRIVATE, v, nullptr, nullptr, 0);
}
inline void futex_wake(std::atomic<uint32_t>& w) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&w), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}
// A barrier of `count` threads (arrive_and_drop: a thread leaves it for good) that orders exactly its participants:
// every arrival is a release-acquire on the barrier's own word, the last one of a phase publishes the phase by a
// release, and the waiters acquire it. (std::barrier waits through libstdc++'s address-hashed waiter pool, whose
// shared seq_cst counters order unrelated barriers' waiters after each other: ThreadSanitizer then misses races.)
class Barrier {
 public:
  explicit Barrier(uint32_t count) : st_(uint64_t(count) << 32) {}
  void arrive_and_wait() {
    const uint32_t g = gen_.load(std::memory_order_relaxed);
    if (arrive(0)) return;
    while (gen_.load(std::memory_order_acquire) == g) futex_wait(gen_, g);
  }
  void arrive_and_drop() { arrive(1); }

 private:
  // One arrival (drop: and the expected count falls by one); true when it completes the phase.
  bool arrive(uint32_t drop) {
    uint64_t v = st_.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t expected = uint32_t(v >> 32) - drop, arrived = uint32_t(v) + 1 - drop;
      const bool last = arrived >= expected;
      const uint64_t nv = uint64_t(expected) << 32 | (last ? 0 : arrived);
      if (st_.compare_exchange_weak(v, nv, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        if (last) gen_.fetch_add(1, std::memory_order_release), futex_wake(gen_);
        return last;
      }
    }
  }
  std::atomic<uint64_t> st_;  // expected << 32 | arrived
  std::atomic<uint32_t> gen_{0};
};
}  // namespace emu
inline emu::Barrier* g_bar = nullptr;
inline std::vector<emu::Barrier*> g_wbar;  // one per warp
inline void __syncthreads() {
  g_bar->arrive_and_wait();
}
inline uint32_t g_xch[1024];
inline uint32_t emu_shfl_xor(uint32_t x, int m) {
  emu::Barrier& wb = *g_wbar[threadIdx.x / 32];
  g_xch[threadIdx.x] = x;
  wb.arrive_and_wait();
  const uint32_t y = g_xch[threadIdx.x ^ unsigned(m)];
  wb.arrive_and_wait();
  return y;
}
inline float __shfl_xor_sync(unsigned, float x, int m) {
  return std::bit_cast<float>(emu_shfl_xor(std::bit_cast<uint32_t>(x), m));
}
inline unsigned __shfl_xor_sync(unsigned, unsigned x, int m) {
  return emu_shfl_xor(x, m);
}
inline uint32_t emu_shfl_idx(uint32_t x, int src) {
  emu::Barrier& wb = *g_wbar[threadIdx.x / 32];
  g_xch[threadIdx.x] = x;
  wb.arrive_and_wait();
  const uint32_t y = g_xch[threadIdx.x / 32 * 32 + unsigned(src) % 32];
  wb.arrive_and_wait();
  return y;
}
// One overload per 32-bit type the kernels shuffle (an exact match each: a float through the int form would be
// converted to an integer).
inline int __shfl_sync(unsigned, int x, int src) {
  return int(emu_shfl_idx(uint32_t(x), src));
}
inline unsigned __shfl_sync(unsigned, unsigned x, int src) {
  return emu_shfl_idx(x, src);
}
inline float __shfl_sync(unsigned, float x, int src) {
  return std::bit_cast<float>(emu_shfl_idx(std::bit_cast<uint32_t>(x), src));
}
inline int64_t __shfl_sync(unsigned, int64_t x, int src) {  // CUDA's 64-bit overload: two 32-bit exchanges
  const uint32_t lo = emu_shfl_idx(uint32_t(uint64_t(x)), src);
  const uint32_t hi = emu_shfl_idx(uint32_t(uint64_t(x) >> 32), src);
  return int64_t((uint64_t(hi) << 32) | lo);
}
inline float __shfl_down_sync(unsigned, float x, int d) {
  emu::Barrier& wb = *g_wbar[threadIdx.x / 32];
  std::memcpy(&g_xch[threadIdx.x], &x, 4);
  wb.arrive_and_wait();
  float y = x;
  if (threadIdx.x % 32 + unsigned(d) < 32) std::memcpy(&y, &g_xch[threadIdx.x + d], 4);
  wb.arrive_and_wait();
  return y;
}
inline float __shfl_up_sync(unsigned, float x, int d) {
  emu::Barrier& wb = *g_wbar[threadIdx.x / 32];
  std::memcpy(&g_xch[threadIdx.x], &x, 4);
  wb.arrive_and_wait();
  float y = x;
  if (threadIdx.x % 32 >= unsigned(d)) std::memcpy(&y, &g_xch[threadIdx.x - d], 4);
  wb.arrive_and_wait();
  return y;
}
// __all_sync over the whole warp (every lane reaches it).
inline bool emu_all_sync(unsigned, bool p) {
  const unsigned w = threadIdx.x / 32;
  g_xch[threadIdx.x] = p;
  g_wbar[w]->arrive_and_wait();
  bool all = true;
  for (unsigned l = 0; l < 32; ++l) all = all && g_xch[32 * w + l] != 0;
  g_wbar[w]->arrive_and_wait();
  return all;
}
// __ballot_sync over the whole warp (every lane reaches it): bit l set where lane l's predicate holds.
inline unsigned __ballot_sync(unsigned, bool p) {
  const unsigned w = threadIdx.x / 32;
  g_xch[threadIdx.x] = p;
  g_wbar[w]->arrive_and_wait();
  unsigned bits = 0;
  for (unsigned l = 0; l < 32; ++l) bits |= (g_xch[32 * w + l] != 0 ? 1u : 0u) << l;
  g_wbar[w]->arrive_and_wait();
  return bits;
}
// __any_sync over the whole warp (every lane reaches it).
inline bool __any_sync(unsigned m, bool p) {
  return __ballot_sync(m, p) != 0u;
}
inline int __popc(unsigned x) {
  return std::popcount(x);
}
inline float emu_expf(float x) {
  return std::exp(x);
}
// bar.sync id, COUNT (a named barrier over the first COUNT threads to reach it: the kernels' groups of warps).
// The barrier of an id is made by the first thread to reach it and published by a CAS (no lock: a mutex taken by
// every caller would order every caller after every earlier one, of any id, and hide races from ThreadSanitizer).
inline std::atomic<emu::Barrier*> g_nbar[16];
template <int COUNT>
inline void emu_named_barrier(int id) {
  emu::Barrier* b = g_nbar[id].load(std::memory_order_acquire);
  if (b == nullptr) {
    auto* nb = new emu::Barrier(COUNT);
    if (g_nbar[id].compare_exchange_strong(b, nb, std::memory_order_acq_rel))
      b = nb;
    else
      delete nb;
  }
  b->arrive_and_wait();
}
// st.global.v4.b32 as a plain 16-byte store.
inline void emu_st_global_v4(void* p, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  const uint32_t v[4] = {x, y, z, w};
  std::memcpy(p, v, 16);
}
// st.global.v2.b32 as a plain 8-byte store.
inline void emu_st_global_v2(void* p, uint32_t x, uint32_t y) {
  const uint32_t v[2] = {x, y};
  std::memcpy(p, v, 8);
}
inline float __uint_as_float(unsigned u) {
  return flashgdn::detail::bits_float(u);
}
inline unsigned __float_as_uint(float x) {
  unsigned u;
  std::memcpy(&u, &x, 4);
  return u;
}
inline unsigned __umulhi(unsigned x, unsigned y) {
  return unsigned(uint64_t(x) * y >> 32);
}
// ld.global.cg (the direct kernel's state loads) as a plain load; __trap as abort.
template <class T>
inline T __ldcg(const T* p) {
  return *p;
}
[[noreturn]] inline void __trap() {
  std::abort();
}
inline float rsqrtf(float x) {
  return 1.f / std::sqrt(x);
}
// d += a b for one warp's m16n8k16 fragments, bf16 (BF16) or fp16 (PTX ISA layout, g = lane / 4, t = lane % 4): a[0] =
// A(g, 2t..2t+1), a[1] = A(g+8, 2t..), a[2] = A(g, 2t+8..), a[3] = A(g+8, 2t+8..); b0 = B(2t..2t+1, g), b1 = B(2t+8..,
// g); d = D(g, 2t..2t+1), D(g+8, 2t..2t+1). Every lane of the warp must call it (as for the real instruction).
struct MmaFrag {
  uint32_t a[4], b[2];
};
inline MmaFrag g_mma[1024];
template <bool BF16>
inline float lo_hi16(uint32_t u, int half) {  // element `half` of a packed bf16 (fp16) pair
  const uint16_t h = uint16_t(half ? u >> 16 : u);
  return BF16 ? flashgdn::detail::bf16_to_float(h) : flashgdn::detail::f16_to_float(h);
}
template <bool BF16>
inline void emu_mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const unsigned t = threadIdx.x, w = t / 32, lane = t % 32;
  g_mma[t] = MmaFrag{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  g_wbar[w]->arrive_and_wait();
  float A[16][16], B[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const MmaFrag& f = g_mma[32 * w + l];
    const unsigned g = l / 4, tt = l % 4;
    for (int h = 0; h < 2; ++h) {
      A[g][2 * tt + h] = lo_hi16<BF16>(f.a[0], h);
      A[g + 8][2 * tt + h] = lo_hi16<BF16>(f.a[1], h);
      A[g][2 * tt + 8 + h] = lo_hi16<BF16>(f.a[2], h);
      A[g + 8][2 * tt + 8 + h] = lo_hi16<BF16>(f.a[3], h);
      B[2 * tt + h][g] = lo_hi16<BF16>(f.b[0], h);
      B[2 * tt + 8 + h][g] = lo_hi16<BF16>(f.b[1], h);
    }
  }
  const unsigned g = lane / 4, tt = lane % 4;
  for (int e = 0; e < 4; ++e) {
    const unsigned r = g + 8 * (e / 2), c = 2 * tt + e % 2;
    float acc = d[e];
    for (int k = 0; k < 16; ++k) acc += A[r][k] * B[k][c];
    d[e] = acc;
  }
  g_wbar[w]->arrive_and_wait();
}
// ldmatrix .x4 (b16): lane l supplies the address of row l % 8 of matrix l / 8 (16 bytes); lane (g, t) = (l / 4,
// l % 4) receives r[j] = matrix j's (row g, columns 2t, 2t + 1) or, transposed, (rows 2t, 2t + 1, column g), the
// lower address in the low half. Every lane of the warp must call it.
inline const void* g_ldsm[1024];
template <bool TRANS>
inline void emu_ldsm(uint32_t (&r)[4], const void* p) {
  const unsigned t = threadIdx.x, w = t / 32, g = t % 32 / 4, tt = t % 4;
  g_ldsm[t] = p;
  g_wbar[w]->arrive_and_wait();
  auto row = [&](unsigned l) { return static_cast<const uint16_t*>(g_ldsm[32 * w + l]); };
  for (unsigned j = 0; j < 4; ++j) {
    const uint16_t x0 = TRANS ? row(8 * j + 2 * tt)[g] : row(8 * j + g)[2 * tt];
    const uint16_t x1 = TRANS ? row(8 * j + 2 * tt + 1)[g] : row(8 * j + g)[2 * tt + 1];
    r[j] = uint32_t(x0) | uint32_t(x1) << 16;
  }
  g_wbar[w]->arrive_and_wait();
}
inline void emu_ldsm_x4(uint32_t (&r)[4], const void* p) {
  emu_ldsm<false>(r, p);
}
inline void emu_ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  emu_ldsm<true>(r, p);
}
// d (16 x 16 as two m16n8 tiles) += X Y from shared memory (chunk_detail::mma16_f32, 3xTF32 there) in fp32.
inline void emu_mma16_f32(float (&d)[2][4], const float* x, int ldx, const float* y, int ldy, int g, int t) {
  for (int nt = 0; nt < 2; ++nt)
    for (int e = 0; e < 4; ++e) {
      const int r = g + 8 * (e / 2), c = 8 * nt + 2 * t + e % 2;
      float acc = d[nt][e];
      for (int k = 0; k < 16; ++k) acc += x[r * ldx + k] * y[k * ldy + c];
      d[nt][e] = acc;
    }
}
inline void __syncwarp(unsigned = 0xffffffffu) {
  g_wbar[threadIdx.x / 32]->arrive_and_wait();
}
// cp.async lands at the latest moment the PTX allows: a copy is read and written when the issuing thread's
// cp.async.wait_group completes its group (or a cp.async.mbarrier.arrive covers it), not at the issue. So a read of
// the destination before that wait sees the old bytes (a missing or too-short wait shows as wrong results), a rewrite
// of the source before it is what the copy takes, and under --tsan the copy is a write of the issuing thread at its
// wait, which ThreadSanitizer orders against other threads' reads by the barriers between them.
namespace emu {
struct CpCopy {
  void* dst;
  const void* src;
  int bytes;
  bool valid;  // false: zero fill (src-size 0)
};
inline thread_local std::vector<CpCopy> t_cp_open;                 // issued, not yet committed
inline thread_local std::vector<std::vector<CpCopy>> t_cp_groups;  // committed, oldest first
inline void cp_land(std::vector<CpCopy>& g) {
  for (const CpCopy& c : g) {
    if (c.valid)
      std::memcpy(c.dst, c.src, size_t(c.bytes));
    else
      std::memset(c.dst, 0, size_t(c.bytes));
  }
  g.clear();
}
// every copy this thread has issued (cp.async.mbarrier.arrive: the arrival waits for all of them; the groups stay,
// emptied, for wait_group's count)
inline void cp_land_all() {
  for (auto& g : t_cp_groups) cp_land(g);
  cp_land(t_cp_open);
}
}  // namespace emu
inline void emu_cp_async16(void* dst, const void* src) {
  emu::t_cp_open.push_back({dst, src, 16, true});
}
inline void emu_cp_async16_zfill(void* dst, const void* src, bool valid) {
  emu::t_cp_open.push_back({dst, src, 16, valid});
}
template <int BYTES>
inline void emu_cp_async(void* dst, const void* src) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async of 4, 8 or 16 bytes");
  emu::t_cp_open.push_back({dst, src, BYTES, true});
}
inline void emu_cp_async_commit() {
  emu::t_cp_groups.push_back(std::move(emu::t_cp_open));
  emu::t_cp_open.clear();
}
// cp.async.wait_group N: every committed group but the N newest has landed
template <int N>
inline void emu_cp_async_wait() {
  auto& gs = emu::t_cp_groups;
  if (gs.size() <= size_t(N)) return;
  const size_t done = gs.size() - size_t(N);
  for (size_t i = 0; i < done; ++i) emu::cp_land(gs[i]);
  gs.erase(gs.begin(), gs.begin() + std::ptrdiff_t(done));
}
inline void emu_cp_async_wait_all() {
  emu_cp_async_wait<0>();
}
#include "emu_sm90.hpp"
// The flags between CTAs (ptx.cuh) as host atomics. The emulation runs one launch after another and a launch's CTAs in
// ticket order, so a CTA that waits for a flag finds it set by an earlier launch or an earlier ticket's CTA.
inline int32_t emu_ld_acquire_gpu(const int32_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
inline void emu_st_release_gpu(int32_t* p, int32_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
inline int32_t emu_atom_add_acq_rel_gpu(int32_t* p, int32_t v) {
  return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
}
inline void __threadfence() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
}
inline void __nanosleep(unsigned) {}
template <class Kern, class... Args>
void emu_launch(Kern kernel, dim3 grid, unsigned block, Args... args);
// launch_pdl (cuda_check.cuh): programmatic dependent launch orders nothing on the host, a plain launch here.
template <class Kern, class... Args>
cudaError_t emu_launch_pdl(Kern kernel, dim3 grid, dim3 block, size_t, cudaStream_t, Args&&... args) {
  emu_launch(kernel, grid, block.x, args...);
  return cudaSuccess;
}
template <class Kern, class... Args>
void emu_launch(Kern kernel, dim3 grid, unsigned block, Args... args) {
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        emu::Barrier bar(block);
        g_bar = &bar;
        std::vector<std::unique_ptr<emu::Barrier>> wb;
        g_wbar.clear();
        for (unsigned w = 0; w < (block + 31) / 32; ++w) {
          wb.push_back(std::make_unique<emu::Barrier>(std::min(32u, block - 32 * w)));
          g_wbar.push_back(wb.back().get());
        }
        for (auto& nb : g_nbar) delete nb.exchange(nullptr);
        emu::reset_cta();
        std::vector<std::thread> th;
        for (unsigned t = 0; t < block; ++t)
          th.emplace_back([&, t] {
            threadIdx = dim3(t, 0, 0);
            blockIdx = dim3(x, y, z);
            gridDim = grid;
            kernel(args...);
            emu::thread_exit();
            bar.arrive_and_drop();
            g_wbar[t / 32]->arrive_and_drop();
          });
        for (auto& t : th) t.join();
      }
}
// The runtime calls of the launch paths (inline: a harness of two translation units links them once).
extern "C" {
inline cudaError_t cudaGetLastError() {
  return cudaSuccess;
}
inline cudaError_t CUDARTAPI cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
// A launch with attributes (a cluster): not emulated, the emulation runs the forms launched with <<<>>>.
inline cudaError_t CUDARTAPI cudaLaunchKernelExC(const cudaLaunchConfig_t*, const void*, void**) {
  std::fprintf(stderr, "cudaLaunchKernelEx: launches with attributes (clusters) are not emulated\n");
  return cudaErrorNotSupported;
}
inline const char* CUDARTAPI cudaGetErrorString(cudaError_t) {
  return "emulated";
}
inline cudaError_t CUDARTAPI cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) {
  std::memset(p, v, n);
  return cudaSuccess;
}
}
template <class T>
cudaError_t cudaFuncSetAttribute(T, enum cudaFuncAttribute, int) {
  return cudaSuccess;
}
