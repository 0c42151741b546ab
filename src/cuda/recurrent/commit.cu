// cuda::recurrent_commit: after a no-commit verify (gdn-math §8.2 protocol B), copy the accepted
// intermediate state into the pool:
//   pool[state_indices[n]] = intermediate_states[intermediate_indices[n], num_accepted_tokens[n] - 1]
// for every n whose slot is valid and whose count is in [1, T_buf]; other rows are skipped.
// The copy is layout-agnostic (a state is R rows of C contiguous elements, dims 2 and 3 of the pool) and
// converts between the two storage dtypes through fp32.
#include "api/internal.hpp"
#include "cuda/common/cuda_check.cuh"
#include "cuda/common/device_util.cuh"

namespace flashgdn::cuda {
namespace {

struct CommitArgs {
  void* pool = nullptr;  // [slots, Hv, R, C]
  DType pool_dtype = DType::f32;
  int64_t pool_s[3] = {};
  const void* inter = nullptr;  // [N_buf, T_buf, Hv, R, C]
  DType inter_dtype = DType::f32;
  int64_t inter_s[4] = {};
  const void* slot_idx = nullptr;  // [N]
  bool slot_i64 = false;
  int64_t slot_s = 1;
  const void* buf_idx = nullptr;  // [N]; may be null (row n uses entry n)
  bool buf_i64 = false;
  int64_t buf_s = 1;
  const void* nacc = nullptr;  // [N]
  bool nacc_i64 = false;
  int64_t nacc_s = 1;
  int64_t slots = 0, n_buf = 0, T_buf = 0, Hv = 0;
  int32_t R = 0, C = 0;
  bool null_slot_is_invalid = false;
};

constexpr int kCommitThreads = 256;
constexpr int kCommitUnroll = 4;  // vectors in flight per thread before the stores

// One CTA per (n, h): R x C elements, 4 at a time.
__global__ void __launch_bounds__(kCommitThreads) commit_kernel(const CommitArgs a) {
  const int64_t n = blockIdx.x / a.Hv, h = blockIdx.x % a.Hv;
  const int64_t slot = load_index(a.slot_idx, a.slot_i64, n * a.slot_s);
  if (slot < 0 || slot >= a.slots || (a.null_slot_is_invalid && slot == 0)) return;
  const int64_t buf = a.buf_idx ? load_index(a.buf_idx, a.buf_i64, n * a.buf_s) : n;
  if (buf < 0 || buf >= a.n_buf) return;
  const int64_t acc = load_index(a.nacc, a.nacc_i64, n * a.nacc_s);
  if (acc < 1 || acc > a.T_buf) return;
  const int64_t src = buf * a.inter_s[0] + (acc - 1) * a.inter_s[1] + h * a.inter_s[2];
  const int64_t dst = slot * a.pool_s[0] + h * a.pool_s[1];
  const int vpr = a.C / 4;  // vectors per row
  const int total = a.R * vpr;
  for (int base = threadIdx.x; base < total; base += kCommitThreads * kCommitUnroll) {
    float x[kCommitUnroll][4];
#pragma unroll
    for (int u = 0; u < kCommitUnroll; ++u) {
      const int e = base + u * kCommitThreads;
      if (e < total) load4(a.inter, a.inter_dtype, src + (e / vpr) * a.inter_s[3] + 4 * (e % vpr), x[u]);
    }
#pragma unroll
    for (int u = 0; u < kCommitUnroll; ++u) {
      const int e = base + u * kCommitThreads;
      if (e < total) store4(a.pool, a.pool_dtype, dst + (e / vpr) * a.pool_s[2] + 4 * (e % vpr), x[u]);
    }
  }
}

}  // namespace

Status recurrent_commit(const RecurrentCommitParams& p, const CommitDims& d, void* stream) {
  CommitArgs a;
  a.pool = p.state_pool.data, a.pool_dtype = p.state_pool.dtype;
  for (int i = 0; i < 3; ++i) a.pool_s[i] = p.state_pool.strides[i];
  a.inter = p.intermediate_states.data, a.inter_dtype = p.intermediate_states.dtype;
  for (int i = 0; i < 4; ++i) a.inter_s[i] = p.intermediate_states.strides[i];
  a.slot_idx = p.state_indices.data, a.slot_i64 = p.state_indices.dtype == DType::i64;
  a.slot_s = p.state_indices.strides[0];
  if (p.intermediate_indices.defined()) {
    a.buf_idx = p.intermediate_indices.data, a.buf_i64 = p.intermediate_indices.dtype == DType::i64;
    a.buf_s = p.intermediate_indices.strides[0];
  }
  a.nacc = p.num_accepted_tokens.data, a.nacc_i64 = p.num_accepted_tokens.dtype == DType::i64;
  a.nacc_s = p.num_accepted_tokens.strides[0];
  a.slots = d.slots, a.n_buf = d.n_buf, a.T_buf = d.T_buf, a.Hv = d.Hv;
  a.R = int32_t(p.state_pool.shape[2]), a.C = int32_t(p.state_pool.shape[3]);
  a.null_slot_is_invalid = p.null_slot_is_invalid;
  if (a.C % 4 != 0)
    return FGDN_ERROR(unsupported, "recurrent_commit: state row of ", a.C, " elements; expected a multiple of 4");
  const int64_t grid = d.N * d.Hv;
  if (grid == 0) return Status::OK();
  commit_kernel<<<dim3(unsigned(grid)), kCommitThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  FGDN_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

}  // namespace flashgdn::cuda
