// The device side of the segment split (gdn-math §6) that the chains of both directions share: the work list of
// segments and the scan of segment start states over the summaries [M_j | N_j]. chunk_fwd runs the forward state
// chain through them (chunk_fwd.cu), chunk_bwd its two chains (chunk_bwd_kernels.cuh: the state pass forward, the
// state-gradient pass in reverse). Each including translation unit gets its own copy of the kernels.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/chunk_fwd/chunk_fwd.hpp"
#include "cuda/chunk_fwd/chunk_fwd_common.cuh"  // summary_window

namespace flashgdn::cuda {
namespace {

constexpr int64_t kSplitChunk = 64;  // the chunk size of every chunk kernel

__device__ __forceinline__ int64_t clamped_len(const void* cu, int32_t cu_i64, int64_t n, int64_t T) {
  if (cu == nullptr) return T;
  int64_t s0 = cu_i64 ? static_cast<const int64_t*>(cu)[n] : static_cast<const int32_t*>(cu)[n];
  int64_t s1 = cu_i64 ? static_cast<const int64_t*>(cu)[n + 1] : static_cast<const int32_t*>(cu)[n + 1];
  s0 = s0 < 0 ? 0 : (s0 > T ? T : s0);
  s1 = s1 < 0 ? 0 : (s1 > T ? T : s1);
  return s1 > s0 ? s1 - s0 : 0;
}

// One block: per sequence nseg = max(1, ceil(chunks / Ls)) segments, an exclusive scan gives each
// sequence's first item; the slack up to `cap` is marked empty (n = -1).
__global__ void __launch_bounds__(1024)
    chunk_index_kernel(const void* cu, int32_t cu_i64, int64_t N, int64_t T, int64_t ls, ChunkWorkItem* items,
                       int64_t cap, int32_t* seq_first) {
  __shared__ int64_t scan[1024];
  __shared__ int64_t carry;
  const int tid = threadIdx.x;
  if (tid == 0) carry = 0;
  __syncthreads();
  for (int64_t base = 0; base < N; base += 1024) {
    const int64_t n = base + tid;
    int64_t nch = 0, nseg = 0;
    if (n < N) {
      nch = (clamped_len(cu, cu_i64, n, T) + kSplitChunk - 1) / kSplitChunk;
      nseg = nch > ls ? (nch + ls - 1) / ls : 1;
    }
    scan[tid] = nseg;
    __syncthreads();
    for (int off = 1; off < 1024; off <<= 1) {
      const int64_t y = tid >= off ? scan[tid - off] : 0;
      __syncthreads();
      scan[tid] += y;
      __syncthreads();
    }
    const int64_t first = carry + scan[tid] - nseg;
    if (n < N) {
      seq_first[n] = static_cast<int32_t>(first < cap ? first : cap);
      for (int64_t s = 0; s < nseg && first + s < cap; ++s) {
        ChunkWorkItem it{};
        it.n = static_cast<int32_t>(n);
        it.seg = static_cast<int32_t>(s);
        it.nseg = static_cast<int32_t>(nseg);
        it.c_begin = static_cast<int32_t>(s * ls);
        it.c_end = static_cast<int32_t>((s + 1) * ls < nch ? (s + 1) * ls : nch);
        items[first + s] = it;
      }
    }
    __syncthreads();
    if (tid == 1023) carry += scan[1023];
    __syncthreads();
  }
  for (int64_t i = carry + tid; i < cap; i += 1024) {
    ChunkWorkItem it{};
    it.n = -1;
    items[i] = it;
  }
}

// S_start(j+1) = M_j S_start(j) + N_j for one (sequence, value head, 16 state columns), fp32 throughout (gdn-math
// §6.3); the result overwrites N_j, where the split forward reads it. `reverse` runs the same recurrence from the
// sequence's last item back (the backward's state-gradient chain, chunk_bwd): X_last = a.h0 (there: dht), then
// X(j-1) = M_j X(j) + N_j over N_j for j = last .. 1. Four threads per row: thread (i, p) holds
// keys K/4 p .. of row i of M_j in registers (loaded a whole step ahead: M and N do not depend on S) and sums them
// against S (shared memory), the four partial rows are added by two shuffles, and thread p keeps columns 4p .. 4p + 3.
// Per step only the FMAs, two shuffles and two barriers are on the chain (one thread per row, M through shared
// memory, leaves the chain latency-bound at 4 warps per SM).
template <int K, int NC>
__global__ void __launch_bounds__(4 * K)
    chunk_scan_kernel(const ChunkKernelArgs a, const int32_t* seq_first, bool reverse) {
  static_assert(NC == 16, "four threads per row keep four columns each");
  constexpr int KP = K / 4, V4 = KP / 4;  // keys per thread, as float4
  // S (K x NC) with the rows of part p shifted by 4 p floats: the four parts read rows K/4 apart in one instruction,
  // which would otherwise fall in the same banks
  __shared__ __align__(16) float S[K * NC + 16];
  const auto sidx = [](int k, int j) { return k * NC + j + (k / KP) * 4; };
  const int64_t n = blockIdx.x;
  const int h = blockIdx.y, c0 = blockIdx.z * NC, tid = threadIdx.x, i = tid >> 2, part = tid & 3;
  const int64_t first = seq_first[n];
  if (first >= a.items_cap) return;
  const int nseg = a.items[first].nseg;
  if (nseg <= 1) return;
  const int64_t width = K + a.V;
  int steps = nseg - 1;
  if (first + steps > a.items_cap) steps = static_cast<int>(a.items_cap - first);
  if (reverse && steps < nseg - 1) return;  // truncated (never with the plan's cap): nothing to start from
  // Forward: where segment s's summary ran over its decay window, M_s = 0 and S_start(s + 1) = N_s, already in place,
  // so step s has no product and leaves its item as it is (exact: the window's own definition, chunk_fwd.hpp).
  // Thread s decides step s (the summaries' own test, summary_window); the reverse chains have no decay table. Steps
  // past the table's 64 take the product (their stored M is exact either way: zeros under a window).
  constexpr int kDropSteps = 64;
  __shared__ bool drop_tab[kDropSteps];
  if (tid < kDropSteps)
    drop_tab[tid] = !reverse && tid < steps && chunk_detail::summary_window(a, a.items[first + tid], h) >= 0;
  const auto drop = [&](int s) { return s < kDropSteps && drop_tab[s]; };
  {  // S_start(0) = h0 (or 0): thread (i, p) fills columns 4p .. 4p + 3 of row i
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (a.h0) {
      const float* p = a.h0 + n * a.h0_sn + h * a.h0_sh;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = c0 + 4 * part + e;
        v[e] = a.state_vmajor ? p[int64_t(j) * a.h0_sr + i] : p[int64_t(i) * a.h0_sr + j];
      }
    }
    *reinterpret_cast<float4*>(&S[sidx(i, 4 * part)]) = make_float4(v[0], v[1], v[2], v[3]);
  }
  // row i of M_s, keys KP part ..; and columns c0 + 4 part .. of row i of N_s. With a.mt, M_s's row i is column i
  // of a.mt's M (strided loads: the scan is a small part of the split)
  const auto item_of = [&](int s) { return reverse ? first + nseg - 1 - s : first + s; };
  const auto mrow = [&](int s) { return a.mn + (item_of(s) * a.Hv + h) * int64_t(K) * width + int64_t(i) * width; };
  float4 m[V4], nv = make_float4(0.f, 0.f, 0.f, 0.f);
  const auto load = [&](int s, float4(&r)[V4], float4& nn) {
    if (!drop(s)) {
      if (a.mt) {
        const float* col = a.mt + (item_of(s) * a.Hv + h) * int64_t(K) * width + i;
#pragma unroll
        for (int e = 0; e < V4; ++e) {
          const int64_t k = KP * part + 4 * e;
          r[e] = make_float4(col[k * width], col[(k + 1) * width], col[(k + 2) * width], col[(k + 3) * width]);
        }
      } else {
        const float4* src = reinterpret_cast<const float4*>(mrow(s) + KP * part);
#pragma unroll
        for (int e = 0; e < V4; ++e) r[e] = src[e];
      }
    }
    nn = *reinterpret_cast<const float4*>(mrow(s) + K + c0 + 4 * part);
  };
  __syncthreads();  // S_start(0), drop
  if (steps > 0) load(0, m, nv);
  for (int s = 0; s < steps; ++s) {
    float4 mn[V4], nn = nv;
    if (s + 1 < steps) load(s + 1, mn, nn);
    if (drop(s)) {  // S_start(s + 1) = N_s: in place already, and the next step's S (step s - 1's reads of S
                    // are done: they precede its first barrier)
      *reinterpret_cast<float4*>(&S[sidx(i, 4 * part)]) = nv;
      __syncthreads();  // S_start(s + 1) complete
      if (s + 1 < steps) {
#pragma unroll
        for (int e = 0; e < V4; ++e) m[e] = mn[e];
        nv = nn;
      }
      continue;
    }
    float acc[NC];
#pragma unroll
    for (int j = 0; j < NC; ++j) acc[j] = 0.f;
#pragma unroll
    for (int e = 0; e < V4; ++e) {
      const float mk[4] = {m[e].x, m[e].y, m[e].z, m[e].w};
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int k = KP * part + 4 * e + c;
#pragma unroll
        for (int j4 = 0; j4 < NC / 4; ++j4) {
          const float4 s4 = *reinterpret_cast<const float4*>(&S[sidx(k, 4 * j4)]);
          acc[4 * j4] = fmaf(mk[c], s4.x, acc[4 * j4]);
          acc[4 * j4 + 1] = fmaf(mk[c], s4.y, acc[4 * j4 + 1]);
          acc[4 * j4 + 2] = fmaf(mk[c], s4.z, acc[4 * j4 + 2]);
          acc[4 * j4 + 3] = fmaf(mk[c], s4.w, acc[4 * j4 + 3]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < NC; ++j) {  // the four parts of row i are lanes 4 (i % 8) .. + 3 of one warp
      acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], 1);
      acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], 2);
    }
    float4 out = nv;  // + N_s
#pragma unroll
    for (int q = 0; q < 4; ++q)
      if (q == part) out.x += acc[4 * q], out.y += acc[4 * q + 1], out.z += acc[4 * q + 2], out.w += acc[4 * q + 3];
    __syncthreads();  // every read of S for this step is done
    *reinterpret_cast<float4*>(&S[sidx(i, 4 * part)]) = out;
    *reinterpret_cast<float4*>(mrow(s) + K + c0 + 4 * part) = out;
    __syncthreads();  // S_start(s + 1) complete
    if (s + 1 < steps) {
#pragma unroll
      for (int e = 0; e < V4; ++e) m[e] = mn[e];
      nv = nn;
    }
  }
}

// The launches (no host sync; graph-safe): the work list into items[cap] and seq_first[N] (segments of `ls` chunks),
// then the scan over the summaries in a.mn (a.items, a.items_cap, a.Hv, a.V, a.h0: the start of the recurrence).
inline cudaError_t launch_chunk_index(const void* cu, int32_t cu_i64, int64_t N, int64_t T, int64_t ls,
                                      ChunkWorkItem* items, int64_t cap, int32_t* seq_first, cudaStream_t st) {
  chunk_index_kernel<<<1, 1024, 0, st>>>(cu, cu_i64, N, T, ls, items, cap, seq_first);
  return cudaGetLastError();
}
inline cudaError_t launch_chunk_scan(const ChunkKernelArgs& a, const int32_t* seq_first, int64_t K, bool reverse,
                                     cudaStream_t st) {
  constexpr int kScanCols = 16;  // 4 threads per row, 4 columns each
  if (a.N == 0 || a.Hv == 0) return cudaSuccess;
  const dim3 grid(unsigned(a.N), unsigned(a.Hv), unsigned(a.V / kScanCols));
  auto* const scan = K == 64 ? chunk_scan_kernel<64, kScanCols> : chunk_scan_kernel<128, kScanCols>;
  scan<<<grid, unsigned(4 * K), 0, st>>>(a, seq_first, reverse);
  return cudaGetLastError();
}

}  // namespace
}  // namespace flashgdn::cuda
