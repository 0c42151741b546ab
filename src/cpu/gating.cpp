// CPU gating (gdn-math §4, vLLM fused_gdn_gating): g = -exp(A_log) softplus_{beta,threshold}(a + dt_bias),
// beta = sigmoid(b) (x2 with allow_neg_eigval), in fp32 (fp64 with exec.cpu_fp64).
#include "api/internal.hpp"
#include "cpu/cpu_common.hpp"

namespace flashgdn::cpu {
namespace {

// Offset of element (row, h) of a tensor [..., Hv]: `row` is unravelled over the leading dims.
int64_t row_offset(const TensorView& t, int64_t row, int64_t h) {
  int64_t off = h * t.strides[t.ndim - 1];
  for (int dim = t.ndim - 2; dim >= 0; --dim) {
    off += (row % t.shape[dim]) * t.strides[dim];
    row /= t.shape[dim];
  }
  return off;
}

template <class R>
void run(const GatingParams& p, const GatingDims& d) {
  const bool with_beta = p.beta.defined() && p.b.defined();
  parallel_for(d.Hv, p.exec.cpu_threads, [&](int64_t h) {
    // Upcast A_log and dt_bias before use (an fp16 A_log would otherwise give -inf for large values).
    const R neg_exp_A = -std::exp(Strided(p.A_log).get<R>(h));
    const R dtb = p.dt_bias.defined() ? Strided(p.dt_bias).get<R>(h) : R(0);
    for (int64_t r = 0; r < d.rows; ++r) {
      const R x = R(detail::load_as_double(p.a.data, p.a.dtype, row_offset(p.a, r, h)));
      detail::store_from_double(p.g.data, p.g.dtype, row_offset(p.g, r, h),
                                double(gate_from_raw<R>(x, neg_exp_A, dtb, p.gate)));
      if (with_beta) {
        const R b = R(detail::load_as_double(p.b.data, p.b.dtype, row_offset(p.b, r, h)));
        detail::store_from_double(p.beta.data, p.beta.dtype, row_offset(p.beta, r, h),
                                  double(beta_from_raw<R>(b, p.gate)));
      }
    }
  });
}

}  // namespace

Status gating(const GatingParams& p, const GatingDims& d) {
  if (d.rows == 0) return Status::OK();  // an empty a: nothing to write, not even a loop over the Hv heads
  with_compute_type(p.exec, [&](auto r) { run<decltype(r)>(p, d); });
  return Status::OK();
}

}  // namespace flashgdn::cpu
