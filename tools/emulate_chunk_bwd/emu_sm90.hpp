// Host models of the Hopper (sm_90a) features of cuda/common/wgmma.cuh, mbarrier.cuh and tma.cuh, for the emulation
// of emu.hpp (gen.py points those headers' PTX functions here: emu::wg::, emu::mbar::, emu::tma::).
//
// Asynchrony: what the device does asynchronously runs on a helper thread of its own, started where the instruction
// is issued and awaited where the kernel waits for it, so that ThreadSanitizer (run.sh --tsan) sees exactly the
// ordering the PTX ISA promises:
//   * wgmma: the ops of one commit group of a warp run on one thread, started at the commit and awaited by the
//     wait_group that covers the group (groups of a warp complete in order). It reads the shared-memory operands and
//     reads and writes the warp's accumulator registers (the lanes' arrays) there, so a write to an operand tile, or
//     an access to the accumulators, that no wait orders after the group is reported (PTX: the operands are read
//     asynchronously until the wait). The A register fragments are taken at issue.
//   * TMA loads (cp.async.bulk.tensor, cp.async.bulk): one thread per copy, which writes shared memory and then
//     completes its bytes on the mbarrier; a reader is ordered after the copy only through that mbarrier's phase.
//   * TMA stores: one thread per bulk async-group, started at its commit and awaited by wait_group(.read).
//   * mbarriers: arrivals are release operations and a completed try_wait.parity an acquire one (std::atomic), with
//     phases, the expected arrival count and the transaction count; blocking by futex, which ThreadSanitizer does not
//     take for an ordering, so a wait orders exactly what its phase's arrivals released.
// Not modeled: the proxies (fence.proxy.async and wgmma.fence are no-ops: a missing fence goes unseen), timing and
// the hardware's freedom below the source order, descriptor base offsets, TMA element strides, interleave, im2col
// and multicast, and the shared-memory size limit of the device.
#pragma once

#include <atomic>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include <cuda.h>

namespace emu {

// An emulated kernel did what the hardware does not allow (or what this model does not know): the run stops.
[[noreturn]] inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "emulation: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, " (thread %u, block %u %u %u)\n", threadIdx.x, blockIdx.x, blockIdx.y, blockIdx.z);
  va_end(ap);
  std::abort();
}

inline unsigned char* smem_at(uint32_t addr, size_t bytes) {
  if (size_t(addr) + bytes > sizeof(g_smem)) fail("shared-memory access [%u, +%zu) past the buffer", addr, bytes);
  return g_smem + addr;
}

// Work of the async units on a detached thread: its start is ordered after everything before the issue, its
// finish (a release) before whoever awaits it (an acquire).
struct Job {
  std::atomic<uint32_t> done{0};
};
inline void await(Job& j) {
  while (!j.done.load(std::memory_order_acquire)) futex_wait(j.done, 0);
}
template <class F>
std::shared_ptr<Job> run_async(F f) {
  auto j = std::make_shared<Job>();
  std::thread([j, f = std::move(f)]() mutable {
    f();
    j->done.store(1, std::memory_order_release);
    futex_wake(j->done);
  }).detach();
  return j;
}

// One element of 1, 2, 4 or 8 bytes as a plain access of its size (ThreadSanitizer checks it as such; a libc memcpy
// of a runtime size is only recorded by its interceptor).
inline void copy_elem(void* dst, const void* src, int size) {
  switch (size) {
    case 1:
      std::memcpy(dst, src, 1);
      break;
    case 2:
      std::memcpy(dst, src, 2);
      break;
    case 4:
      std::memcpy(dst, src, 4);
      break;
    default:
      std::memcpy(dst, src, 8);
  }
}
// 16-bit operand elements as fp32.
inline float elem16(const unsigned char* p, bool bf16) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return bf16 ? flashgdn::detail::bf16_to_float(h) : flashgdn::detail::f16_to_float(h);
}
inline float half16(uint32_t u, int hi, bool bf16) {
  return bf16 ? lo_hi16<true>(u, hi) : lo_hi16<false>(u, hi);
}

// The 16-byte-chunk swizzles of shared memory (TMA and wgmma alike): bits [4, 4 + b) of the address XOR bits
// [7, 7 + b), b = 3, 2, 1 for 128, 64, 32 bytes (CUTLASS Swizzle<b, 4, 3>), on the absolute shared-memory address.
inline uint32_t swizzle(uint32_t a, int span_bytes) {
  const int b = span_bytes == 128 ? 3 : span_bytes == 64 ? 2 : span_bytes == 32 ? 1 : 0;
  return a ^ (((a >> 7) & ((1u << b) - 1)) << 4);
}

namespace wg {

// ---- the shared-memory matrix descriptor (PTX ISA "Matrix Descriptor"): start address >> 4 (bits 0-13), leading
// byte offset >> 4 (16-29), stride byte offset >> 4 (32-45), base offset (49-51), swizzle (62-63: 0 none, 1 128 B,
// 2 64 B, 3 32 B). The canonical layouts (CUTLASS's GMMA descriptors), T = 16 bytes / element size, W the swizzle
// span in bytes:
//   K-major, swizzled:   element (mn, k) at (mn % 8) W + (mn / 8) SBO + k size        (the instruction's k bytes <= W)
//   K-major, none:       (mn % 8) 16 + (mn / 8) SBO + (k % T) size + (k / T) LBO
//   MN-major, swizzled:  (mn % (W / size)) size + (mn / (W / size)) LBO + (k % 8) W + (k / 8) SBO
//   MN-major, none:      (mn % T) size + (mn / T) SBO + (k % 8) 16 + (k / 8) LBO
// then swizzled on the absolute address.
inline uint32_t operand_addr(uint64_t desc, int mn, int k, bool k_major, int size) {
  const uint32_t start = uint32_t(desc & 0x3fff) << 4, lbo = uint32_t((desc >> 16) & 0x3fff) << 4,
                 sbo = uint32_t((desc >> 32) & 0x3fff) << 4;
  if ((desc >> 49) & 7) fail("wgmma descriptor base offset %u (not modeled)", unsigned((desc >> 49) & 7));
  const int mode = int(desc >> 62), W = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 0, T = 16 / size;
  uint32_t off;
  if (k_major)
    off =
        W ? (mn % 8) * W + (mn / 8) * sbo + k * size : (mn % 8) * 16 + (mn / 8) * sbo + (k % T) * size + (k / T) * lbo;
  else
    off = W ? (mn % (W / size)) * size + (mn / (W / size)) * lbo + (k % 8) * W + (k / 8) * sbo
            : (mn % T) * size + (mn / T) * sbo + (k % 8) * 16 + (k / 8) * lbo;
  return swizzle(start + off, W);
}

// One wgmma.mma_async m64nNk16 of one lane: A from shared memory (rs = false, descriptor da; K-major unless ta) or
// this lane's A fragments (a: the mma.m16n8k16 A layout of the warp's 16 rows), B from shared memory (db; B^T
// [N][16] K-major unless tb); d = A B + (acc ? d : 0) in fp32.
struct Op {
  uint64_t da, db;
  uint32_t a[4];
  float* d;
  int n;
  bool rs, bf16, ta, tb, acc;
};
// A warp's commit group: ops[lane][i], run in order on one thread after the warp's previous group.
struct Group {
  std::vector<Op> ops[32];
  std::shared_ptr<Group> prev;
  std::shared_ptr<Job> job;
};
inline thread_local std::vector<Op> t_ops;  // this lane's wgmma since its warp's last commit
inline std::vector<Op>* g_lane_ops[1024];
inline std::deque<std::shared_ptr<Group>> g_pending[32];  // per warp, oldest first (lane 0 keeps it)

inline void run_group(Group& g, unsigned warp) {
  const unsigned wq = warp % 4;  // the warp's rows 16 wq .. of the warpgroup's 64
  for (size_t i = 0; i < g.ops[0].size(); ++i) {
    const Op& o0 = g.ops[0][i];
    for (int l = 1; l < 32; ++l) {
      const Op& o = g.ops[l][i];
      if (o.da != o0.da || o.db != o0.db || o.n != o0.n || o.rs != o0.rs || o.acc != o0.acc || o.bf16 != o0.bf16)
        fail("wgmma %zu of a group: the lanes of warp %u disagree on its operands", i, warp);
    }
    const int size = 2, N = o0.n;
    float A[16][16];
    std::vector<float> B(size_t(N) * 16);
    for (int r = 0; r < 16; ++r)
      for (int k = 0; k < 16; ++k) {
        if (o0.rs) {  // lane (g, t): a[0] (g, 2t..), a[1] (g + 8, 2t..), a[2] (g, 2t + 8..), a[3] (g + 8, 2t + 8..)
          const int lane = 4 * (r % 8) + (k % 8) / 2, reg = (r / 8) + 2 * (k / 8);
          A[r][k] = half16(g.ops[lane][i].a[reg], k % 2, o0.bf16);
        } else {
          A[r][k] = elem16(smem_at(operand_addr(o0.da, 16 * wq + r, k, !o0.ta, size), 2), o0.bf16);
        }
      }
    for (int c = 0; c < N; ++c)
      for (int k = 0; k < 16; ++k) B[c * 16 + k] = elem16(smem_at(operand_addr(o0.db, c, k, !o0.tb, size), 2), o0.bf16);
    for (int l = 0; l < 32; ++l) {
      float* d = g.ops[l][i].d;
      const int gr = l / 4, t = l % 4;
      for (int e = 0; e < N / 2; ++e) {  // d[e]: row g + 8 ((e >> 1) & 1), column 8 (e >> 2) + 2 t + (e & 1)
        const int r = gr + 8 * ((e >> 1) & 1), c = 8 * (e >> 2) + 2 * t + (e & 1);
        float acc = o0.acc ? d[e] : 0.f;
        for (int k = 0; k < 16; ++k) acc += A[r][k] * B[c * 16 + k];
        d[e] = acc;
      }
    }
  }
}

inline void issue(float* d, int n, bool bf16, const uint32_t* a, uint64_t da, uint64_t db, int acc, bool ta, bool tb) {
  if (n < 8 || n > 256 || n % 8) fail("wgmma n = %d", n);
  Op o{da, db, {0, 0, 0, 0}, d, n, a != nullptr, bf16, ta, tb, acc != 0};
  if (a) std::memcpy(o.a, a, 16);
  t_ops.push_back(o);
}
template <bool BF16>
inline void mma_ss_n64(float (&d)[32], uint64_t da, uint64_t db, int accumulate) {
  issue(d, 64, BF16, nullptr, da, db, accumulate, false, false);
}
template <bool BF16>
inline void mma_rs_n64(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  issue(d, 64, BF16, a, 0, db, accumulate, false, false);
}

inline void mma_ss_n32_bf16(float (&d)[16], uint64_t da, uint64_t db, int accumulate) {
  issue(d, 32, true, nullptr, da, db, accumulate, false, false);
}
inline void mma_rs_n32_bf16(float (&d)[16], const uint32_t (&a)[4], uint64_t db, int accumulate) {
  issue(d, 32, true, a, 0, db, accumulate, false, false);
}
template <int N, int TA, int TB>
inline void mma_ss_t(float (&d)[N / 2], uint64_t da, uint64_t db, int accumulate) {
  issue(d, N, true, nullptr, da, db, accumulate, TA != 0, TB != 0);
}
// (a new form of wgmma.cuh: one line on issue(d, N, BF16, A registers or null, A descriptor, B descriptor, scale-d,
// A transposed (MN-major), B transposed))

// wgmma.commit_group: the lanes' ops since the last commit become the warp's next group (every lane reaches it).
inline void commit() {
  const unsigned t = threadIdx.x, w = t / 32;
  g_lane_ops[t] = &t_ops;
  g_wbar[w]->arrive_and_wait();
  if (t % 32 == 0) {
    auto grp = std::make_shared<Group>();
    for (unsigned l = 0; l < 32; ++l) {
      grp->ops[l] = *g_lane_ops[32 * w + l];
      if (grp->ops[l].size() != grp->ops[0].size()) fail("wgmma: the lanes of warp %u issued different counts", w);
    }
    grp->prev = g_pending[w].empty() ? nullptr : g_pending[w].back();
    grp->job = run_async([grp, w] {
      if (grp->prev) await(*grp->prev->job);
      grp->prev.reset();
      run_group(*grp, w);
    });
    g_pending[w].push_back(grp);
  }
  g_wbar[w]->arrive_and_wait();
  t_ops.clear();
}
// wgmma.wait_group n: every group of this warp but the newest n is complete (its accumulators final, its operands
// read).
inline void wait_group(int n) {
  const unsigned t = threadIdx.x, w = t / 32;
  g_wbar[w]->arrive_and_wait();
  if (t % 32 == 0)
    while (int(g_pending[w].size()) > n) {
      await(*g_pending[w].front()->job);
      g_pending[w].pop_front();
    }
  g_wbar[w]->arrive_and_wait();
}
inline void wait0() {
  wait_group(0);
}
inline void wait1() {
  wait_group(1);
}
inline void wait2() {
  wait_group(2);
}
inline void fence() {}             // wgmma.fence: register ordering, not modeled
inline void fence_async_smem() {}  // fence.proxy.async: the proxies are not modeled
template <int N>
inline void pin(float (&)[N]) {}              // an empty asm for the scheduler: no effect here
uint64_t desc_at(uint32_t lo, uint32_t off);  // (below: it needs wgmma.cuh's constant)

// stmatrix m8n8 .x4 (b16): lane l gives the address of row l % 8 of matrix l / 8; lane (g, t) holds register i =
// matrix i's (row g, columns 2t, 2t + 1), stored as it is or (.trans) as column g of rows 2t, 2t + 1. Each lane
// writes its own elements (every lane of the warp must call it).
inline uint32_t g_stsm[1024];
template <bool TRANS>
inline void stsm(uint32_t addr, const uint32_t (&r)[4]) {
  const unsigned t = threadIdx.x, w = t / 32, g = t % 32 / 4, tt = t % 4;
  g_stsm[t] = addr;
  g_wbar[w]->arrive_and_wait();
  for (unsigned i = 0; i < 4; ++i) {
    if (TRANS) {
      std::memcpy(smem_at(g_stsm[32 * w + 8 * i + 2 * tt] + 2 * g, 2), &r[i], 2);
      const uint16_t hi = uint16_t(r[i] >> 16);
      std::memcpy(smem_at(g_stsm[32 * w + 8 * i + 2 * tt + 1] + 2 * g, 2), &hi, 2);
    } else {
      std::memcpy(smem_at(g_stsm[32 * w + 8 * i + g] + 4 * tt, 4), &r[i], 4);
    }
  }
  g_wbar[w]->arrive_and_wait();
}
inline void stsm_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  stsm<false>(addr, {r0, r1, r2, r3});
}
inline void stsm_x4_t(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  stsm<true>(addr, {r0, r1, r2, r3});
}
inline void setmaxnreg() {}  // (register reallocation: no effect here)

}  // namespace wg

namespace mbar {

// The state of the mbarrier at each 8-byte word of shared memory: phase, pending arrivals, transaction count.
struct State {
  uint32_t phase;
  int32_t pending, tx;
};
inline uint64_t pack(State s) {
  return (uint64_t(s.phase) << 41) | (uint64_t(uint32_t(s.pending) & 0xfffff) << 21) | (uint32_t(s.tx) & 0x1fffff);
}
inline State unpack(uint64_t v) {
  int32_t tx = int32_t(v & 0x1fffff);
  if (tx & 0x100000) tx -= 0x200000;
  return State{uint32_t(v >> 41), int32_t((v >> 21) & 0xfffff), tx};
}
struct Bar {
  std::atomic<uint64_t> st{0};
  std::atomic<uint32_t> seq{0};  // completed phases (the futex word)
  uint32_t expected = 0;         // the arrival count (plain: init's write must be ordered before every use)
  bool live = false;
};
inline Bar g_bars[sizeof(g_smem) / 8];
inline thread_local uint64_t t_sink;
inline Bar& bar_of(const uint64_t* b) {
  const auto off = reinterpret_cast<const unsigned char*>(b) - g_smem;
  if (off < 0 || size_t(off) >= sizeof(g_smem) || off % 8) fail("mbarrier at %p: not an 8-byte shared word", b);
  t_sink += *b;  // a plain read of the barrier word: ordered after its init, or ThreadSanitizer reports it
  Bar& m = g_bars[off / 8];
  if (!m.live) fail("mbarrier at shared offset %ld used before its init", long(off));
  return m;
}
inline void init(uint64_t* b, uint32_t count) {
  const auto off = reinterpret_cast<unsigned char*>(b) - g_smem;
  if (off < 0 || size_t(off) >= sizeof(g_smem) || off % 8) fail("mbarrier.init at %p: not an 8-byte shared word", b);
  if (count < 1 || count >= (1u << 20)) fail("mbarrier.init count %u", count);
  *b = 0;
  Bar& m = g_bars[off / 8];
  m.expected = count, m.live = true;
  m.st.store(pack(State{0, int32_t(count), 0}), std::memory_order_relaxed);
}
// `arrivals` arrivals and tx_delta transaction bytes (expect_tx +, complete_tx -), a release; the phase completes
// when both the pending arrivals and the transaction count are zero.
inline void update(uint64_t* b, int arrivals, int tx_delta) {
  Bar& m = bar_of(b);
  uint64_t v = m.st.load(std::memory_order_relaxed);
  for (;;) {
    State s = unpack(v);
    s.pending -= arrivals, s.tx += tx_delta;
    if (s.pending < 0) fail("mbarrier: more arrivals than its count %u in one phase", m.expected);
    if (s.tx >= (1 << 20) || s.tx <= -(1 << 20)) fail("mbarrier: transaction count %d out of range", s.tx);
    const bool done = s.pending == 0 && s.tx == 0;
    if (done) s = State{s.phase + 1, int32_t(m.expected), 0};
    if (m.st.compare_exchange_weak(v, pack(s), std::memory_order_release, std::memory_order_relaxed)) {
      if (done) m.seq.fetch_add(1, std::memory_order_relaxed), futex_wake(m.seq);
      return;
    }
  }
}
inline void arrive(uint64_t* b) {
  update(b, 1, 0);
}
// cp.async.mbarrier.arrive.noinc: the arrival triggers once every cp.async this thread issued before it has landed;
// here they land now (emu.hpp: copies land at what completes them), and the arrival is immediate.
inline void arrive_cp_async(uint64_t* b) {
  cp_land_all();
  update(b, 1, 0);
}
// try_wait.parity in a loop: returns once the phase of parity `parity` has completed (the current phase's parity
// differs), an acquire of what the arrivals released.
inline void wait(uint64_t* b, uint32_t parity) {
  Bar& m = bar_of(b);
  for (;;) {
    const uint32_t q = m.seq.load(std::memory_order_relaxed);
    if ((unpack(m.st.load(std::memory_order_acquire)).phase & 1) != (parity & 1)) return;
    futex_wait(m.seq, q);
  }
}

}  // namespace mbar

namespace tma {

// The emulated CUtensorMap: cuTensorMapEncodeTiled's parameters, kept in the map's 128 bytes.
struct Map {
  uint32_t magic;
  uint8_t rank, esize, swizzle, oob_nan;
  const unsigned char* base;
  uint64_t dims[5];
  uint64_t strides[4];  // bytes, of dims 1 .. rank - 1
  uint16_t box[5];
};
static_assert(sizeof(Map) <= sizeof(CUtensorMap));
constexpr uint32_t kMagic = 0x746d6170;
inline const Map& map_of(const CUtensorMap* p) {
  const Map* m = reinterpret_cast<const Map*>(p);
  if (m->magic != kMagic) fail("TMA with a tensor map the emulated cuTensorMapEncodeTiled did not encode");
  return *m;
}

inline int dtype_size(CUtensorMapDataType t) {
  switch (t) {
    case CU_TENSOR_MAP_DATA_TYPE_UINT8:
      return 1;
    case CU_TENSOR_MAP_DATA_TYPE_UINT16:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT16:
    case CU_TENSOR_MAP_DATA_TYPE_BFLOAT16:
      return 2;
    case CU_TENSOR_MAP_DATA_TYPE_UINT32:
    case CU_TENSOR_MAP_DATA_TYPE_INT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32:
    case CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ:
      return 4;
    case CU_TENSOR_MAP_DATA_TYPE_UINT64:
    case CU_TENSOR_MAP_DATA_TYPE_INT64:
    case CU_TENSOR_MAP_DATA_TYPE_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

// cuTensorMapEncodeTiled with the driver's rules (CUDA driver API reference) for what is modeled; interleave and
// element strides other than 1 are not.
inline CUresult CUDAAPI encode_tiled(CUtensorMap* map, CUtensorMapDataType dt, cuuint32_t rank, void* base,
                                     const cuuint64_t* gdim, const cuuint64_t* gstride, const cuuint32_t* box,
                                     const cuuint32_t* estride, CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                     CUtensorMapL2promotion, CUtensorMapFloatOOBfill oob) {
  Map m{};
  m.magic = kMagic;
  m.esize = uint8_t(dtype_size(dt));
  if (m.esize == 0 || rank < 1 || rank > 5 || reinterpret_cast<uintptr_t>(base) % 16) return CUDA_ERROR_INVALID_VALUE;
  if (il != CU_TENSOR_MAP_INTERLEAVE_NONE) fail("cuTensorMapEncodeTiled: interleave (not modeled)");
  m.swizzle = sw == CU_TENSOR_MAP_SWIZZLE_NONE  ? 0
              : sw == CU_TENSOR_MAP_SWIZZLE_32B ? 32
              : sw == CU_TENSOR_MAP_SWIZZLE_64B ? 64
              : sw == CU_TENSOR_MAP_SWIZZLE_128B
                  ? 128
                  : (fail("cuTensorMapEncodeTiled: swizzle mode %d (not modeled)", int(sw)), 0);
  m.oob_nan = oob == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA;
  m.rank = uint8_t(rank);
  m.base = static_cast<const unsigned char*>(base);
  for (cuuint32_t i = 0; i < rank; ++i) {
    if (gdim[i] < 1 || gdim[i] > (uint64_t(1) << 32) || box[i] < 1 || box[i] > 256) return CUDA_ERROR_INVALID_VALUE;
    if (estride[i] != 1) fail("cuTensorMapEncodeTiled: element stride %u (not modeled)", unsigned(estride[i]));
    m.dims[i] = gdim[i], m.box[i] = uint16_t(box[i]);
    if (i > 0) {
      if (gstride[i - 1] % 16 || gstride[i - 1] >= (uint64_t(1) << 40)) return CUDA_ERROR_INVALID_VALUE;
      m.strides[i - 1] = gstride[i - 1];
    }
  }
  const uint32_t inner = box[0] * m.esize;
  if (inner % 16) return CUDA_ERROR_INVALID_VALUE;
  if (m.swizzle && inner > m.swizzle) return CUDA_ERROR_INVALID_VALUE;
  if (m.swizzle && inner != m.swizzle)
    fail("cuTensorMapEncodeTiled: a box row of %u bytes under a %d-byte swizzle (not modeled)", inner, m.swizzle);
  std::memset(map, 0, sizeof(*map));
  std::memcpy(map, &m, sizeof(m));
  return CUDA_SUCCESS;
}

inline thread_local std::vector<std::shared_ptr<Job>> t_loads;  // this thread's copies (awaited at its exit)

// Visit the box of `m` at coordinates c: f(byte offset in the box, global address or null when out of bounds).
template <class F>
void for_box(const Map& m, const int (&c)[5], F&& f) {
  int64_t count = 1;
  for (int d = 0; d < m.rank; ++d) count *= m.box[d];
  for (int64_t L = 0; L < count; ++L) {
    int64_t rest = L, off = 0;
    bool in = true;
    for (int d = 0; d < m.rank; ++d) {
      const int64_t x = int64_t(c[d]) + rest % m.box[d];
      rest /= m.box[d];
      in = in && x >= 0 && uint64_t(x) < m.dims[d];
      off += d == 0 ? x * m.esize : x * int64_t(m.strides[d - 1]);
    }
    f(L * m.esize, in ? m.base + off : nullptr);
  }
}
inline uint32_t box_bytes(const Map& m) {
  uint32_t n = m.esize;
  for (int d = 0; d < m.rank; ++d) n *= m.box[d];
  return n;
}
inline uint32_t tile_addr(const Map& m, const void* smem) {
  const uint32_t a = __cvta_generic_to_shared(smem), align = m.swizzle ? 8 * m.swizzle : 128;
  if (a % align) fail("TMA shared-memory tile at %u: expected %u-byte alignment", a, align);
  smem_at(a, box_bytes(m));
  return a;
}

// The phase of bar also waits for `bytes` more bytes; this thread's arrival.
inline void arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  mbar::update(bar, 1, int(bytes));
}
// cp.async.bulk.tensor (tile) global -> shared, completing its bytes on bar; out-of-bounds elements land as zeros
// (or NaN with the NaN fill).
inline void load_tile(void* dst, const CUtensorMap* map, const int (&c)[5], uint64_t* bar, int rank) {
  const Map m = map_of(map);
  if (rank != m.rank) fail("a %d-d TMA load with a %d-d tensor map", rank, int(m.rank));
  const uint32_t a = tile_addr(m, dst);
  mbar::bar_of(bar);
  t_loads.push_back(run_async([m, c, a, bar] {
    for_box(m, c, [&](int64_t off, const unsigned char* src) {
      unsigned char* p = smem_at(swizzle(a + uint32_t(off), m.swizzle), m.esize);
      if (src)
        copy_elem(p, src, m.esize);
      else
        std::memset(p, m.oob_nan ? 0xff : 0, m.esize);
    });
    mbar::update(bar, 0, -int(box_bytes(m)));
  }));
}
inline void load_2d(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  load_tile(dst, map, {c0, c1, 0, 0, 0}, bar, 2);
}
inline void load_3d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, uint64_t* bar) {
  load_tile(dst, map, {c0, c1, c2, 0, 0}, bar, 3);
}
inline void load_4d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3, uint64_t* bar) {
  load_tile(dst, map, {c0, c1, c2, c3, 0}, bar, 4);
}
inline void load_5d(void* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3, int c4, uint64_t* bar) {
  load_tile(dst, map, {c0, c1, c2, c3, c4}, bar, 5);
}
// cp.async.bulk global -> shared, `bytes` contiguous bytes, completing on bar.
inline void load_bulk(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  const uint32_t a = __cvta_generic_to_shared(dst);
  if (bytes % 16 || a % 16 || reinterpret_cast<uintptr_t>(src) % 16)
    fail("cp.async.bulk of %u bytes: alignment", bytes);
  smem_at(a, bytes);
  mbar::bar_of(bar);
  t_loads.push_back(run_async([a, src, bytes, bar] {
    for (uint32_t i = 0; i < bytes; i += 8) copy_elem(smem_at(a + i, 8), static_cast<const unsigned char*>(src) + i, 8);
    mbar::update(bar, 0, -int(bytes));
  }));
}

// Bulk stores shared -> global (in-bounds elements only), tracked by this thread's bulk async-groups.
struct Store {
  Map m;
  int c[5];
  uint32_t a;
};
inline thread_local std::vector<Store> t_stores;                 // since the last commit
inline thread_local std::vector<std::shared_ptr<Job>> t_groups;  // committed, not yet waited
inline std::atomic<uint64_t> g_store_boxes{0};  // boxes stored so far (a harness checks that a TMA path ran)
inline void store_tile(const CUtensorMap* map, const int (&c)[5], const void* src, int rank) {
  const Map& m = map_of(map);
  g_store_boxes.fetch_add(1, std::memory_order_relaxed);
  if (rank != m.rank) fail("a %d-d TMA store with a %d-d tensor map", rank, int(m.rank));
  t_stores.push_back(Store{m, {c[0], c[1], c[2], c[3], c[4]}, tile_addr(m, src)});
}
inline void store_2d(const CUtensorMap* map, int c0, int c1, const void* src) {
  store_tile(map, {c0, c1, 0, 0, 0}, src, 2);
}
inline void store_3d(const CUtensorMap* map, int c0, int c1, int c2, const void* src) {
  store_tile(map, {c0, c1, c2, 0, 0}, src, 3);
}
inline void store_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3, const void* src) {
  store_tile(map, {c0, c1, c2, c3, 0}, src, 4);
}
inline void store_5d(const CUtensorMap* map, int c0, int c1, int c2, int c3, int c4, const void* src) {
  store_tile(map, {c0, c1, c2, c3, c4}, src, 5);
}
inline void commit_stores() {
  t_groups.push_back(run_async([ops = std::move(t_stores)] {
    for (const Store& s : ops)
      for_box(s.m, s.c, [&](int64_t off, const unsigned char* dst) {
        if (dst)
          copy_elem(const_cast<unsigned char*>(dst), smem_at(swizzle(s.a + uint32_t(off), s.m.swizzle), s.m.esize),
                    s.m.esize);
      });
  }));
  t_stores.clear();
}
// cp.async.bulk.wait_group(.read) 0: every committed store has read its source (and here also written).
inline void wait_stores() {
  for (auto& j : t_groups) await(*j);
  t_groups.clear();
}
inline void wait_stores_read() {
  wait_stores();
}
// cp.async.bulk.wait_group.read N: every committed store but the N most recent groups has read its source (and here
// also written); those N stay in flight.
template <int N>
inline void wait_stores_read_but() {
  if (t_groups.size() <= size_t(N)) return;
  const size_t done = t_groups.size() - size_t(N);
  for (size_t i = 0; i < done; ++i) await(*t_groups[i]);
  t_groups.erase(t_groups.begin(), t_groups.begin() + std::ptrdiff_t(done));
}
inline void prefetch() {}  // (prefetch.tensormap: no effect here)

}  // namespace tma

// Every CTA starts with no barrier initialized and no async work.
inline void reset_cta() {
  for (auto& b : mbar::g_bars) b.live = false;
  for (auto& p : wg::g_pending) p.clear();
}
// A thread that returns from the kernel: no cp.async copy may be in flight (issued and not landed by a wait), no wgmma
// in flight in its warp, no bulk store uncommitted or in flight; its TMA loads are awaited (their copies must not
// outlive the CTA's shared memory).
inline void thread_exit() {
  bool cp_in_flight = !t_cp_open.empty();
  for (const auto& g : t_cp_groups) cp_in_flight |= !g.empty();
  t_cp_open.clear(), t_cp_groups.clear();
  if (cp_in_flight) fail("cp.async copies in flight at the kernel's exit (no wait_group covers them)");
  if (!wg::t_ops.empty()) fail("wgmma issued and never committed at the kernel's exit");
  if (threadIdx.x % 32 == 0 && !wg::g_pending[threadIdx.x / 32].empty())
    fail("a wgmma group in flight at the kernel's exit (no wait_group)");
  if (!tma::t_stores.empty()) fail("a TMA store never committed at the kernel's exit");
  if (!tma::t_groups.empty()) fail("a TMA store group in flight at the kernel's exit (no wait_group)");
  for (auto& j : tma::t_loads) await(*j);
  tma::t_loads.clear();
}

}  // namespace emu

// The driver entry point of the runtime (cuda/common/tma.cu asks it for cuTensorMapEncodeTiled).
extern "C" inline cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int,
                                                                         unsigned long long,
                                                                         cudaDriverEntryPointQueryResult* status) {
  const bool tiled = std::strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
  *fn = tiled ? reinterpret_cast<void*>(&emu::tma::encode_tiled) : nullptr;
  if (status) *status = tiled ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}

// The model functions that need the headers' own constants.
#include "cuda/common/wgmma.cuh"
// wg::desc_at: the descriptor of (low word + off >> 4, the constant high word)
inline uint64_t emu::wg::desc_at(uint32_t lo, uint32_t off) {
  return (uint64_t(flashgdn::cuda::wg::kDescHi) << 32) | uint32_t(lo + (off >> 4));
}
