// CPU mixer_decode: the reference of the fused mixer step, composed from its parts. The conv (with its state
// rules, flashgdn.hpp) runs here into fp64 q, k, v buffers holding the conv outputs rounded to x's dtype; the
// recurrence is the `recurrent` op on those buffers (mixer_recurrent_view: the same pool, indices, sentinels,
// gate and l2norm); the gated RMSNorm runs here on its output rounded to x's dtype.
#include <cmath>
#include <vector>

#include "api/internal.hpp"
#include "cpu/cpu_common.hpp"

namespace flashgdn::cpu {
namespace {

bool slot_valid(int64_t slot, int64_t slots, bool null_slot_is_invalid) {
  return slot >= 0 && slot < slots && !(null_slot_is_invalid && slot == 0);
}

// x rounded to a storage dtype (bf16 / f16 / f32) and widened back.
double round_to(DType dt, double x) {
  if (dt == DType::f64) return x;
  uint64_t raw = 0;
  detail::store_from_double(&raw, dt, 0, x);
  return detail::load_as_double(&raw, dt, 0);
}

double silu(double u) {
  return u / (1.0 + std::exp(-u));
}

// The causal conv of one row into y [B, T, C] (fp64), and its conv-state and window writes.
void conv_row(const MixerDecodeParams& p, const MixerDims& d, int64_t n, double* y) {
  const SeqRange sr = seq_range(p.cu_seqlens, d, n);
  if (sr.len == 0) return;  // a length-0 row touches nothing
  const bool two_d = p.state_indices.defined() && p.state_indices.ndim == 2;
  Strided idx(p.state_indices), x(p.x), w(p.conv_weight), bias(p.conv_bias), cs(p.conv_state);
  Strided win(p.intermediate_conv_windows);

  // The row's validity is recurrent's rule (start slot and count); the conv slot is the row's slot, column 0
  // with 2-D indices.
  int64_t a = 1, start = n, conv_slot = n;
  bool valid = true;
  if (two_d) {
    a = p.num_accepted_tokens.defined() ? Strided(p.num_accepted_tokens).index(n) : 1;
    valid = a >= 1 && a <= d.T_max;
    start = valid ? idx.index(n, a - 1) : -1;
    conv_slot = idx.index(n, 0);
  } else if (p.state_indices.defined()) {
    start = conv_slot = idx.index(n);
  }
  valid = valid && slot_valid(start, d.slots, p.null_slot_is_invalid);
  if (!valid) return;  // recurrent writes the zero outputs; the conv writes nothing
  const bool conv_ok = slot_valid(conv_slot, d.slots, p.null_slot_is_invalid);
  const int64_t offset = two_d ? a - 1 : 0;
  int64_t buf = -1;
  if (p.intermediate_conv_windows.defined()) {
    buf = p.intermediate_indices.defined() ? Strided(p.intermediate_indices).index(n) : n;
    if (buf < 0 || buf >= d.n_buf) buf = -1;
  }

  const int64_t Kc = d.Kc, H = Kc - 1;                        // H: history positions in the window
  std::vector<double> hist(static_cast<size_t>(H + sr.len));  // raw inputs: the start window, then the row's tokens
  for (int64_t c = 0; c < d.C; ++c) {
    for (int64_t j = 0; j < H; ++j) hist[size_t(j)] = conv_ok ? cs.get<double>(conv_slot, c, offset + j) : 0.0;
    for (int64_t t = 0; t < sr.len; ++t) hist[size_t(H + t)] = x.get<double>(sr.b, sr.start + t, c);
    for (int64_t t = 0; t < sr.len; ++t) {
      // window of token t: hist[t .. t + Kc - 1], tap Kc - 1 on x_t
      double acc = bias.present ? bias.get<double>(c) : 0.0;
      for (int64_t j = 0; j < Kc; ++j) acc += w.get<double>(c, j) * hist[size_t(t + j)];
      y[((sr.b * d.T) + sr.start + t) * d.C + c] = round_to(p.x.dtype, silu(acc));
      if (buf >= 0 && t < d.T_buf)  // the last Kc - 1 raw inputs after token t
        for (int64_t j = 0; j < H; ++j) win.set(hist[size_t(t + 1 + j)], buf, t, c, j);
    }
    if (!p.commit || !conv_ok || H == 0) continue;
    if (two_d) {  // s'[i] = s[o + 1 + i] (i < Kc - 2), s'[Kc - 2 + t] = x_t
      for (int64_t i = 0; i + 1 < H; ++i) cs.set(hist[size_t(i + 1)], conv_slot, c, i);
      for (int64_t t = 0; t < sr.len && H - 1 + t < d.L; ++t) cs.set(hist[size_t(H + t)], conv_slot, c, H - 1 + t);
    } else {  // the last Kc - 1 raw inputs
      for (int64_t j = 0; j < H; ++j) cs.set(hist[size_t(sr.len + j)], conv_slot, c, j);
    }
  }
}

}  // namespace

Status mixer_decode(const MixerDecodeParams& p, const MixerDims& d) {
  const int64_t B = d.B, T = d.T, C = d.C, Hv = d.Hv, V = d.V;
  std::vector<double> y(static_cast<size_t>(B * T * C), 0.0), o(size_t(B * T * Hv * V), 0.0);
  parallel_for(d.N, p.exec.cpu_threads, [&](int64_t n) { conv_row(p, d, n, y.data()); });

  // The recurrence: recurrent on the conv outputs (q, k, v views of y), raw a and b, the pool.
  MixerDecodeParams conv_out = p;
  conv_out.x = make_tensor(y.data(), DType::f64, {B, T, C});
  RecurrentParams r = mixer_recurrent_view(conv_out);
  r.o = make_tensor(o.data(), DType::f64, {B, T, Hv, V});
  RecurrentDims rd = d;
  FGDN_RETURN_IF_ERROR(recurrent(r, rd));

  // out = o_r rsqrt(mean(o_r^2) + eps) w silu(z), o_r = o rounded to x's dtype. Rows past cu_seqlens[N]
  // (and length-0 rows) are not written, as in recurrent.
  Strided out(p.out), z(p.z), nw(p.norm_weight);
  parallel_for(d.N * Hv, p.exec.cpu_threads, [&](int64_t it) {
    const int64_t n = it / Hv, h = it % Hv;
    const SeqRange sr = seq_range(p.cu_seqlens, d, n);
    std::vector<double> orow(static_cast<size_t>(V));
    for (int64_t t = 0; t < sr.len; ++t) {
      const double* ot = &o[size_t((((sr.b * T) + sr.start + t) * Hv + h) * V)];
      double ss = 0;
      for (int64_t j = 0; j < V; ++j) {
        orow[size_t(j)] = round_to(p.x.dtype, ot[j]);
        ss += orow[size_t(j)] * orow[size_t(j)];
      }
      const double rho = 1.0 / std::sqrt(ss / double(V) + double(p.norm_eps));
      for (int64_t j = 0; j < V; ++j)
        out.set(orow[size_t(j)] * rho * nw.get<double>(j) * silu(z.get<double>(sr.b, sr.start + t, h, j)), sr.b,
                sr.start + t, h, j);
    }
  });
  return Status::OK();
}

}  // namespace flashgdn::cpu
