// PROTOTYPE, not dispatched (built only by tests/cuda/standalone_wgmma): the wgmma state pass in the W R form
// (docs/chunk_fwd.md, "Next: the W R form"). It reads the records of chunk_fwd_intra_kernel<K, BF16, WR = true>:
//
//   S <- en S + W R,  W = K^T diag(dk) A diag(beta)   (W from the record, 16-bit, as register A fragments)
//   O  = diag(eq) Q S0 + P' R,  P' = P A diag(beta)   (P' hi + lo from the record)
//
// with R = V - diag(ek) K S0 as in chunk_fwd_state_wg.cuh, whose structure this copies (pipeline, warpgroups,
// phase 1, stores); U is never formed, so per chunk there are two product phases instead of three, three named
// barriers per warpgroup instead of four, and no U^T region. Not yet run on a GPU.
#pragma once

#include "cuda/chunk_fwd/chunk_fwd_state_wg.cuh"  // store_transposed, pack_acc, load_causal_frags

namespace flashgdn::cuda::chunk_detail {

struct StateWrSmem {
  static constexpr int LDV = kBV + 8;  // padded value rows: conflict-free 4-byte reads in the accumulator layout
  unsigned char q[2][2][8192];         // [buffer][key half][64 tokens x 64 keys], swizzled
  unsigned char k[2][2][8192];         // [buffer][key half][64 tokens x 64 keys], swizzled
  unsigned char st[2][2][8192];        // [value half][key half][64 values x 64 keys]: S0^T (16-bit, gdn-math §10.2)
  unsigned char rt[2][8192];           // [value half][64 values x 64 tokens]: R^T
  uint32_t rec[2][kRecBytesWR / 4];    // [buffer] the chunk's record (header | W | P')
  uint16_t v[2][2][kC * LDV];          // [buffer][value half][token][64] value tile
  uint64_t full[2];                    // [buffer] its tiles landed: 512 arrivals (one per thread, cp.async-triggered)
  uint64_t empty[2];                   // [buffer] every thread is done reading it: 512 arrivals
};

// The m16n8k16 A fragments of W for this warp's keys (key block kb = 16 keys) over the four token steps.
__device__ __forceinline__ void load_w_frags(const uint4* wfr, int kb, int lane, uint32_t (&f)[4][4]) {
#pragma unroll
  for (int kc = 0; kc < 4; ++kc) {
    const uint4 x = wfr[(kb * 4 + kc) * 32 + lane];
    f[kc][0] = x.x, f[kc][1] = x.y, f[kc][2] = x.z, f[kc][3] = x.w;
  }
}

// SUMMARY: the summary mode of the split (no q, no output, no P U); a template parameter so that no wgmma group
// has a data-dependent branch (ptxas serializes wgmma around accumulator moves at branch joins).
template <bool BF16, bool SUMMARY>
__global__ void __launch_bounds__(512, 1) chunk_fwd_state_wr_kernel(const ChunkKernelArgs a) {
  using E = typename Elem<BF16>::T;
  using P = Elem<BF16>;
  constexpr int K = 128, LDV = StateWrSmem::LDV;
  extern __shared__ unsigned char smem_raw[];
  // Aligned to 1024 bytes (the swizzle) by an offset from smem_raw, not by integer pointer arithmetic: the compiler
  // then still knows every access through `sm` is shared memory (LDS / STS, 32-bit addresses) instead of generic.
  StateWrSmem& sm = *reinterpret_cast<StateWrSmem*>(smem_raw + ((1024 - (wg::smem_u32(smem_raw) & 1023)) & 1023));

  const int tid = threadIdx.x, w = tid >> 5, lane = tid & 31, g8 = lane >> 2, t4 = lane & 3;
  // warpgroup wgi = (half hf, column slice), warp wi of it. wgi is broadcast from lane 0 so that the compiler sees a
  // warp-uniform value: the wgmma descriptors built from it then stay in uniform registers (no per-instruction R2UR)
  const int wgi = __shfl_sync(0xffffffffu, tid >> 7, 0), hf = wgi >> 1, wi = w & 3;
  const int cb = 32 * (wgi & 1);  // first column of this warpgroup's slice in the half
  const int h = blockIdx.y, tile = blockIdx.z * 2 + hf;
  const int64_t item = blockIdx.x;
  const int hk = h / a.group;

  ChunkWork wk;
  if (!resolve_work(a, item, &wk)) return;
  const int64_t n = wk.n, bidx = wk.bidx, t0 = wk.t0, len = wk.len, c_begin = wk.c_begin, c_end = wk.c_end;
  constexpr bool summary = SUMMARY, has_output = !SUMMARY;
  const int ntiles = summary ? (K + static_cast<int>(a.V)) / 64 : static_cast<int>(a.V) / 64;
  const bool active = tile < ntiles;             // the last half may have no tile (summary, odd count)
  const bool m_tile = summary && tile < K / 64;  // augmented columns of M: identity start, zero values
  const bool has_values = active && !m_tile;
  const int vcol0 = summary ? (tile - K / 64) * kBV : tile * kBV;
  const int r0 = 16 * wi + g8, r1 = r0 + 8;  // chunk rows (phases 1-3a) and key offsets (state) of this thread

  // Shared-memory rows of this warpgroup's column slice in the transposed regions (a row is 128 bytes).
  // (32-bit shared-memory addresses: the stmatrix stores and the wgmma descriptors take them as they are)
  const uint32_t st_slice = wg::smem_u32(sm.st[hf][0] + cb * 128);  // key block 1 at + 8192
  const uint32_t rt_slice = wg::smem_u32(sm.rt[hf] + cb * 128);
  // Low descriptor words (wg::desc_at adds each instruction's byte offset): this slice's S0^T (key block 1 at
  // + 8192), R^T, and buffer 0 of the k and q tiles (key half 1 at + 8192).
  const uint32_t st_lo = wg::desc_lo(st_slice), rt_lo = wg::desc_lo(rt_slice);
  const uint32_t k_lo0 = wg::desc_lo(wg::smem_u32(&sm.k[0][0][0])), q_lo0 = wg::desc_lo(wg::smem_u32(&sm.q[0][0][0]));

  // ---- start state: fp32 accumulators (key block mb: keys 64 mb + r0 (+ 8), columns cb + 8 jn + 2 t4 (+ 1)) and
  // the transposed 16-bit copy
  float sacc[2][4][4];
  {
    const StateRef src = start_state(a, wk, item, h, K);
#pragma unroll
    for (int mb = 0; mb < 2; ++mb) {
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = 64 * mb + r0 + (e >> 1) * 8, j = cb + jn * 8 + 2 * t4 + (e & 1);
          sacc[mb][jn][e] = start_value(src, m_tile, active, tile, vcol0, i, j);
        }
      uint32_t x[4][2];
      pack_acc<BF16>(sacc[mb], x);
      store_transposed(st_slice + 8192 * mb, x, wi, lane);
    }
  }

  const E* qbase = static_cast<const E*>(a.q) + bidx * a.q_sb + hk * a.q_sh;
  const E* kbase = static_cast<const E*>(a.k) + bidx * a.k_sb + hk * a.k_sh;
  const E* vbase = static_cast<const E*>(a.v) + bidx * a.v_sb + h * a.v_sh + vcol0;
  E* obase = static_cast<E*>(a.o) + bidx * a.o_sb + h * a.o_sh + vcol0 + cb;

  // Every load of chunk ck into buffer bf (rows past the sequence end zero-filled by plain stores).
  auto issue = [&](int64_t ck, int bf) {
    const int64_t nv = len - ck * kC, tok = t0 + ck * kC;
    copy_record<512, kRecBytesWR>(a, n, t0, ck, h, sm.rec[bf], has_output ? kRecBytesWR : kRecHdrBytes + kRecWBytes,
                                  tid);
#pragma unroll
    for (int p = 0; p < 2; ++p) {  // 64 rows x 16 vectors of 16 bytes per tile
      const int i = tid + 512 * p, r = i >> 4, vv = i & 15;
      unsigned char* dk = &sm.k[bf][vv >> 3][wg::swz(r, vv & 7)];
      unsigned char* dq = &sm.q[bf][vv >> 3][wg::swz(r, vv & 7)];
      const bool valid = r < nv;  // rows past the sequence end: zeros (row 0, always valid, as the unread source)
      const int64_t row = tok + (valid ? r : 0);
      cp_async16_zfill(dk, kbase + row * a.k_st + vv * 8, valid);
      if (has_output) cp_async16_zfill(dq, qbase + row * a.q_st + vv * 8, valid);
    }
    if (has_values) {  // this half's value tile over its 256 threads
      const int ht = tid & 255;
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        const int r = p * 32 + (ht >> 3), vec = ht & 7;
        const bool valid = r < nv;
        cp_async16_zfill(&sm.v[bf][hf][r * LDV + vec * 8], vbase + (tok + (valid ? r : 0)) * a.v_st + vec * 8, valid);
      }
    }
  };

  // ---- the pipeline. Buffer bf = i & 1 holds the q, k, v and record tiles of chunk i = c - c_begin: every thread
  // copies its share (cp.async) and arrives on full[bf] when its copies have landed; every thread arrives on
  // empty[bf] after its last read of the chunk. A warpgroup waits for its chunk's data, and before refilling the other
  // buffer for chunk i + 1 (at the top of chunk i), for the release of chunk i - 1 (its last user). No CTA-wide
  // barrier: the warpgroups drift apart by up to a chunk, so one's tensor-core phases overlap another's epilogues
  // instead of all four alternating in lockstep. Phase u of a barrier is awaited with parity u & 1 (buffer bf's u-th
  // chunk).
  if (tid == 0) {
    mbar::init(&sm.full[0], 512), mbar::init(&sm.full[1], 512);
    mbar::init(&sm.empty[0], 512), mbar::init(&sm.empty[1], 512);
  }
  wg::fence_async_smem();  // the start state's S0^T (stmatrix) before the first wgmma read
  __syncthreads();         // the barriers are initialized; S0^T is complete
  if (c_begin < c_end) {
    issue(c_begin, 0);
    mbar::arrive_cp_async(&sm.full[0]);
  }
#ifdef FGDN_CHUNK_PROFILE  // phase cycles of thread 0 (warpgroup 0), summed over every CTA (a.prof[8] counts chunks)
  const bool prof_on = a.prof != nullptr && tid == 0 && active;
  unsigned long long prof_acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  unsigned long long prof_last = clock64();
#endif

  for (int64_t c = c_begin; c < c_end; ++c) {
    const int i = static_cast<int>(c - c_begin), bf = i & 1;
    const int64_t tok0 = c * kC;
    const int64_t nvalid = (len - tok0) < kC ? (len - tok0) : kC;
    // fill buffer bf ^ 1 with chunk c + 1 once every warp has released chunk c - 1 (a fill per thread and chunk: the
    // full barrier counts every thread's arrival)
    auto refill = [&]() {
      if (c + 1 < c_end) {
        if (i > 0) mbar::wait(&sm.empty[bf ^ 1], ((i - 1) >> 1) & 1);
#ifndef FGDN_WG_NOLOAD  // (experiment: compute-only timing, wrong results)
        issue(c + 1, bf ^ 1);
#endif
        mbar::arrive_cp_async(&sm.full[bf ^ 1]);
      }
    };
    // this thread is done reading buffer bf (its wgmma reads included: waited). Every thread releases its own reads:
    // one release-arrive per warpgroup behind a named barrier orders the same reads (bar.sync, then a cumulative
    // release), but compute-sanitizer's racecheck does not follow that chain and reported each refill as a WAR hazard
    // (46 per run); the per-thread arrivals cost nothing measurable (4.79 vs 4.78 us per chunk, H200).
    auto release = [&]() { mbar::arrive(&sm.empty[bf]); };
    mbar::wait(&sm.full[bf], (i >> 1) & 1);
    wg::fence_async_smem();  // the landed tiles (generic proxy) before this thread's wgmma reads them (async proxy)
    if (!active) {           // (the last half of an odd summary: loads and releases only; it reads no buffer)
      refill();
      release();
      continue;
    }
    FGDN_PROF(0);  // the wait for this chunk's tiles
    refill();      // at the top: the loads get the whole chunk to land (after phase 2: 5.14 us per chunk, 3: 6.01)
    FGDN_PROF(1);  // the wait for the other buffer's release, the copies issued

    const float* hdr = reinterpret_cast<const float*>(sm.rec[bf]);
    const uint4* wfr = reinterpret_cast<const uint4*>(sm.rec[bf] + kRecHdrBytes / 4);
    const uint4* pfr = reinterpret_cast<const uint4*>(sm.rec[bf] + (kRecHdrBytes + kRecWBytes) / 4);

    // ---- phase 1: K S0 and Q S0 for this slice (64 x 32 each, over the 128 keys), one wgmma group
    float d[4][4], o[4][4];  // written by the first wgmma of each (accumulate = 0)
    float(&d16)[16] = reinterpret_cast<float(&)[16]>(d);
    float(&o16)[16] = reinterpret_cast<float(&)[16]>(o);
    {
      const uint32_t k_lo = k_lo0 + bf * (sizeof(sm.k[0]) >> 4), q_lo = q_lo0 + bf * (sizeof(sm.q[0]) >> 4);
      wg::fence();
#pragma unroll
      for (int ks = 0; ks < K / 16; ++ks) {
        const uint32_t off = (ks >> 2) * 8192 + (ks & 3) * 32;  // key half, 16-key step inside the 128-byte row
        wg::mma_ss_n32<BF16>(d16, wg::desc_at(k_lo, off), wg::desc_at(st_lo, off), ks > 0);
      }
      wg::commit();  // K S0 in its own group: R's epilogue runs while Q S0 is in flight
      if constexpr (has_output) {
#pragma unroll
        for (int ks = 0; ks < K / 16; ++ks) {
          const uint32_t off = (ks >> 2) * 8192 + (ks & 3) * 32;
          wg::mma_ss_n32<BF16>(o16, wg::desc_at(q_lo, off), wg::desc_at(st_lo, off), ks > 0);
        }
      }
      if constexpr (has_output) {
        wg::commit();
        wg::wait1();  // K S0 done, Q S0 may still run
      } else {
        wg::wait0();
      }
    }
    FGDN_PROF(2);  // K S0

    // R = V - diag(ek) K S0 -> R^T;  O = diag(eq) Q S0
    {
      const uint16_t* vt = sm.v[bf][hf];
      const float ek0 = hdr[r0], ek1 = hdr[r1], eq0 = hdr[64 + r0], eq1 = hdr[64 + r1];
      uint32_t x[4][2];
#pragma unroll
      for (int jn = 0; jn < 4; ++jn) {
        const int j = cb + 8 * jn + 2 * t4;
        float2 v0 = make_float2(0.f, 0.f), v1 = v0;
        if (has_values)  // M tiles of the summary: zero values
          v0 = P::unpack(*reinterpret_cast<const uint32_t*>(&vt[r0 * LDV + j])),
          v1 = P::unpack(*reinterpret_cast<const uint32_t*>(&vt[r1 * LDV + j]));
        x[jn][0] = P::pack(v0.x - ek0 * d[jn][0], v0.y - ek0 * d[jn][1]);
        x[jn][1] = P::pack(v1.x - ek1 * d[jn][2], v1.y - ek1 * d[jn][3]);
      }
      store_transposed(rt_slice, x, wi, lane);
      wg::fence_async_smem();
      if constexpr (has_output) {
        wg::wait0();  // Q S0
#pragma unroll
        for (int jn = 0; jn < 4; ++jn) o[jn][0] *= eq0, o[jn][1] *= eq0, o[jn][2] *= eq1, o[jn][3] *= eq1;
      }
    }
    named_barrier<128>(1 + wgi);  // R^T of this slice complete (its only reader is this warpgroup's wgmma)
    FGDN_PROF(3);                 // R, Q S0's wait, the barrier

    // ---- phase 2: S <- en S + W R per key block, O += P'_hi R + P'_lo R (W, P' from registers, B = R^T)
    {
      const float en = hdr[192];
#pragma unroll
      for (int mb = 0; mb < 2; ++mb)
#pragma unroll
        for (int jn = 0; jn < 4; ++jn)
#pragma unroll
          for (int e = 0; e < 4; ++e) sacc[mb][jn][e] *= en;
      float(&s0)[16] = reinterpret_cast<float(&)[16]>(sacc[0]);
      float(&s1)[16] = reinterpret_cast<float(&)[16]>(sacc[1]);
      uint32_t f0[4][4], f1[4][4];
      load_w_frags(wfr, wi, lane, f0);  // keys 16 wi .. (block 0)
      wg::fence();
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32<BF16>(s0, f0[kc], wg::desc_at(rt_lo, kc * 32), 1);
      if constexpr (has_output) {
        load_causal_frags(pfr, wi, lane, f1);  // P' hi
        wg::fence();
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32<BF16>(o16, f1[kc], wg::desc_at(rt_lo, kc * 32), 1);
      }
      wg::commit();
      wg::wait0();
      load_w_frags(wfr, 4 + wi, lane, f0);  // keys 64 + 16 wi .. (block 1)
      wg::fence();
#pragma unroll
      for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32<BF16>(s1, f0[kc], wg::desc_at(rt_lo, kc * 32), 1);
      if constexpr (has_output) {
        load_causal_frags(pfr + 32, wi, lane, f1);  // P' lo
        wg::fence();
#pragma unroll
        for (int kc = 0; kc < 4; ++kc) wg::mma_rs_n32<BF16>(o16, f1[kc], wg::desc_at(rt_lo, kc * 32), 1);
      }
      wg::commit();
      wg::wait0();
    }
    release();     // this thread's last reads of buffer bf (W, P' fragments, the header) are behind it
    FGDN_PROF(5);  // the update and P U
    if constexpr (has_output) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const int r = hr ? r1 : r0;
        if (r < nvalid) {
          E* orow = obase + (t0 + tok0 + r) * a.o_st;
#pragma unroll
          for (int jn = 0; jn < 4; ++jn)
            *reinterpret_cast<uint32_t*>(orow + jn * 8 + 2 * t4) = P::pack(o[jn][2 * hr], o[jn][2 * hr + 1]);
        }
      }
    }
    // the 16-bit copy for the next chunk's phase 1 (and R^T's next write): every warp of the warpgroup must be past
    // its wait of the update (one warp's wait does not cover the others' halves of the operation)
    named_barrier<128>(1 + wgi);
#pragma unroll
    for (int mb = 0; mb < 2; ++mb) {
      uint32_t x[4][2];
      pack_acc<BF16>(sacc[mb], x);
      store_transposed(st_slice + 8192 * mb, x, wi, lane);
    }
    wg::fence_async_smem();
    named_barrier<128>(1 + wgi);  // S0^T complete before the next chunk's phase 1 (no CTA-wide barrier orders it)
#pragma unroll
    for (int mb = 0; mb < 2; ++mb)  // key block mb: rows 64 mb + 16 wi ..
      store_checkpoint(a, wk, c, h, vcol0, reinterpret_cast<const float(&)[1][4][4]>(sacc[mb]), 64 * mb + 16 * wi, cb,
                       g8, t4);
    FGDN_PROF(6);  // o stored, S0^T, the barriers
  }
#ifdef FGDN_CHUNK_PROFILE
  if (prof_on) {
    for (int k2 = 0; k2 < 8; ++k2) atomicAdd(&a.prof[k2], prof_acc[k2]);
    atomicAdd(&a.prof[8], static_cast<unsigned long long>(c_end - c_begin));
  }
#endif
  cp_async_commit();    // (the copies are tracked by the barriers, not by groups: commit them to wait for them)
  cp_async_wait_all();  // no copy may be in flight at exit

  // ---- final state (a zero-length sequence stores its start state unchanged); summary columns from tile 0
  if (!active) return;
  const StateRef dst = end_state(a, wk, item, h, K);
  if (dst.p) {
#pragma unroll
    for (int mb = 0; mb < 2; ++mb)
      store_state(dst, reinterpret_cast<const float(&)[1][4][4]>(sacc[mb]), 64 * mb + 16 * wi, cb,
                  summary ? tile * kBV : vcol0, g8, t4);
  }
}

// grid = (items, Hv, ceil(tiles / 2)): both value halves of V = 128 per CTA.
template <bool BF16, bool SUMMARY>
int launch_chunk_state_wr_mode(const ChunkKernelArgs& a, int64_t items, int64_t tiles, void* stream) {
  const size_t smem = sizeof(StateWrSmem) + 1024;  // + alignment of the swizzled regions to 1024 bytes
  static std::atomic<uint64_t> done_mask{0};
  if (const int e = prepare_launch(chunk_fwd_state_wr_kernel<BF16, SUMMARY>, smem, done_mask)) return e;
  if (items <= 0 || a.Hv <= 0 || tiles <= 0) return 0;
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(a.Hv), static_cast<unsigned>((tiles + 1) / 2));
  chunk_fwd_state_wr_kernel<BF16, SUMMARY><<<grid, 512, smem, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

template <bool BF16>
int launch_chunk_state_wr(const ChunkKernelArgs& a, int64_t items, int64_t tiles, void* stream) {
  return a.mode == kModeSummary ? launch_chunk_state_wr_mode<BF16, true>(a, items, tiles, stream)
                                : launch_chunk_state_wr_mode<BF16, false>(a, items, tiles, stream);
}

}  // namespace flashgdn::cuda::chunk_detail
