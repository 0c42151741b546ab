#!/usr/bin/env python3
"""Emulates the rounding points of the two-pass CUDA prefill (chunk_fwd_intra.cuh + chunk_fwd_state_wg.cuh) in numpy
(fp64 arithmetic, bf16 rounding where the kernels round) against the fp64 recurrence, for one head, in two forms:

  built     the state pass as it is (built-hilo: the same with diag(dk) U as a hi + lo pair in the update): R = V - diag(ek) K S0 (bf16), U = (A diag(b)) R (A diag(b) hi + lo),
            O = diag(eq) Q S0 + P U (P, U hi + lo), S <- en S + K^T (diag(dk) U) (diag(dk) U rounded once)
  wr        the update reassociated so that the chain has two products, not three:
            S <- en S + W R with W = K^T diag(dk) A diag(b) (K x C, formed in fp32 by the intra pass, then rounded
            as a GEMM operand), and O = diag(eq) Q S0 + P' R with P' = P A diag(b) (hi + lo). U is never formed.

Both keep the l2 norms and the decays as fp32 row scalings (ek = rho_k e^gamma, eq = scale rho_q e^gamma, dk = rho_k
e^(gamma_n - gamma)) and the state copy S0 in bf16 as the operand of K S0 and Q S0. Used to check the numerics of
the `wr` form (docs/chunk_fwd.md, "Known gaps / next steps") before it is built; no GPU needed:

    python3 tests/cuda/standalone_chunk/emulate_update_form.py [seed]
"""
import sys

import numpy as np

from emulate_numerics import bf16, rel  # round-to-nearest-even bf16; relative Frobenius error


def hilo(x):  # a 16-bit hi + lo pair, as the kernels store the record's fragments
    h = bf16(x)
    return h + bf16(x - h)


def make(seed, case, T=300, K=128, V=128):
    rng = np.random.default_rng(seed)
    q = bf16(rng.standard_normal((T, K)))
    if case == "identical":
        k = bf16(np.tile(rng.standard_normal(K), (T, 1)))
    else:
        k = bf16(rng.standard_normal((T, K)))
    v = bf16(rng.standard_normal((T, V)))
    if case == "identical":
        g, b = np.zeros(T), np.ones(T)
    elif case == "g-30":
        g, b = -30.0 * rng.uniform(size=T), 1 / (1 + np.exp(-rng.standard_normal(T)))
    else:
        g, b = -rng.uniform(size=T), 1 / (1 + np.exp(-rng.standard_normal(T)))
    h0 = 0.1 * rng.standard_normal((K, V))
    return q, k, v, g, b, h0


def rnorm(x):
    return 1 / np.sqrt((x * x).sum(-1) + 1e-6)


def recurrence(q, k, v, g, b, h0):
    lam = 1 / np.sqrt(q.shape[1])
    qn, kn, S = q * rnorm(q)[:, None], k * rnorm(k)[:, None], h0.copy()
    o = np.zeros_like(v)
    for t in range(len(v)):
        S = np.exp(g[t]) * S
        S = S + np.outer(kn[t], b[t] * (v[t] - S.T @ kn[t]))
        o[t] = lam * S.T @ qn[t]
    return o, S


def chunked(q, k, v, g, b, h0, form, w_hilo=False, C=64):
    # form: "built", "built-hilo" (the same with diag(dk) U as hi + lo in the update), "wr"; w_hilo: W as hi + lo
    lam = 1 / np.sqrt(q.shape[1])
    T, K = q.shape
    S = h0.copy()
    o = np.zeros_like(v)
    for c0 in range(0, T, C):
        n = min(C, T - c0)
        Q, Kc, Vc = (np.zeros((C, x.shape[1])) for x in (q, k, v))
        gc, bc = np.zeros(C), np.zeros(C)
        Q[:n], Kc[:n], Vc[:n], gc[:n], bc[:n] = q[c0:c0 + n], k[c0:c0 + n], v[c0:c0 + n], g[c0:c0 + n], b[c0:c0 + n]
        rq, rk = rnorm(Q), rnorm(Kc)
        gam = np.cumsum(gc)
        D = np.tril(np.exp(np.minimum(gam[:, None] - gam[None, :], 0.0)))  # (r, s), s <= r; never factored
        L = np.tril(bc[:, None] * (rk[:, None] * rk[None, :] * (Kc @ Kc.T)) * D, -1)
        A = np.linalg.inv(np.eye(C) + L)  # fp32-accurate in the kernel (substitution + 3xTF32 merges)
        Ab = A * bc[None, :]  # A diag(b)
        P = lam * (rq[:, None] * (Q @ Kc.T) * rk[None, :]) * D
        ek, eq, dk, en = rk * np.exp(gam), lam * rq * np.exp(gam), rk * np.exp(gam[-1] - gam), np.exp(gam[-1])
        Sb = bf16(S)  # the 16-bit state copy
        KS, QS = Kc @ Sb, Q @ Sb
        Rm = bf16(Vc - ek[:, None] * KS)  # R^T, stored 16-bit
        if form.startswith("built"):
            U = hilo(Ab) @ Rm
            O = eq[:, None] * QS + hilo(P) @ hilo(U)  # P_hi U_hi + P_lo U_hi + P_hi U_lo, to ~2^-16
            Us = dk[:, None] * U
            S = en * S + Kc.T @ (hilo(Us) if form == "built-hilo" else bf16(Us))
        else:  # "wr"
            W = Kc.T @ (dk[:, None] * Ab)  # K x C, fp32 in the intra pass
            W = hilo(W) if w_hilo else bf16(W)
            O = eq[:, None] * QS + hilo(P @ Ab) @ Rm
            S = en * S + W @ Rm
        o[c0:c0 + n] = bf16(O)[:n]
    return o, S


if __name__ == "__main__":
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    forms = (("built", "built", False), ("built, dk U hi+lo", "built-hilo", False), ("wr, W bf16", "wr", False),
             ("wr, W hi+lo", "wr", True))
    print("relative Frobenius error against the fp64 recurrence, o; final state (K = V = 128, C = 64)")
    print("  case              T    " + "".join(f"{f[0]:22s}" for f in forms))
    for case, T in (("random", 300), ("g-30", 300), ("identical", 130), ("identical", 128), ("identical", 1000)):
        x = make(seed, case, T=T)
        ro, rs = recurrence(*x)
        row = ""
        for label, form, wh in forms:
            co, cs = chunked(*x, form, w_hilo=wh)
            row += f"{rel(co, ro):.2e}; {rel(cs, rs):.2e}  "
        print(f"  {case:16s} {T:4d}    {row}")
