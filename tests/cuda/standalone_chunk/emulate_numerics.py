#!/usr/bin/env python3
"""Emulates the rounding points of the CUDA chunk_fwd kernel in numpy (fp64 arithmetic, bf16 rounding where the
kernel rounds) against the fp64 recurrence, for one head. Used to find which bf16 operand dominates the error of
the identical-keys case (gdn-math §10.4) and to check a fix before a device run. No GPU needed:

    python3 tests/cuda/standalone_chunk/emulate_numerics.py [seed]

Rounding points (names used below): q, k (after the l2 norm), A (A diag(b) as a GEMM operand), W, S (the state as
the operand of W S and Q S), Us (diag(e^{gamma_n - gamma}) U in the state update), o (output). P and U enter P U as
hi + lo pairs in the kernel, so they are not rounded here.
"""
import sys

import numpy as np


def bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def l2(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def make(seed, identical, T=130, K=128, V=128, gscale=0.0):
    rng = np.random.default_rng(seed)
    key = rng.standard_normal(K)
    q = bf16(rng.standard_normal((T, K)))
    k = bf16(np.tile(key, (T, 1)) if identical else rng.standard_normal((T, K)))
    v = bf16(rng.standard_normal((T, V)))
    g = -gscale * rng.uniform(size=T)
    b = np.ones(T) if identical else 1 / (1 + np.exp(-rng.standard_normal(T)))
    h0 = 0.1 * rng.standard_normal((K, V))
    return q, k, v, g, b, h0


def recurrence(q, k, v, g, b, h0):
    lam = 1 / np.sqrt(q.shape[1])
    qn, kn, S = l2(q), l2(k), h0.copy()
    o = np.zeros_like(v)
    for t in range(len(v)):
        S = np.exp(g[t]) * S
        S = S + np.outer(kn[t], b[t] * (v[t] - S.T @ kn[t]))
        o[t] = lam * S.T @ qn[t]
    return o


def chunked(q, k, v, g, b, h0, flags, C=64):
    R = lambda x, f: bf16(x) if f in flags else x
    lam = 1 / np.sqrt(q.shape[1])
    qh, kh, S = R(l2(q), "q"), R(l2(k), "k"), h0.copy()
    T, K = q.shape
    o = np.zeros_like(v)
    for c0 in range(0, T, C):
        n = min(C, T - c0)
        Q, Kc, Vc = (np.zeros((C, x.shape[1])) for x in (q, k, v))
        gc, bc = np.zeros(C), np.zeros(C)
        Q[:n], Kc[:n], Vc[:n], gc[:n], bc[:n] = qh[c0:c0 + n], kh[c0:c0 + n], v[c0:c0 + n], g[c0:c0 + n], b[c0:c0 + n]
        gam = np.cumsum(gc)
        D = np.tril(np.exp(np.minimum(gam[:, None] - gam[None, :], 0.0)))
        A = np.linalg.inv(np.eye(C) + np.tril(bc[:, None] * (Kc @ Kc.T) * D, -1))
        Sb = R(S, "S")
        split = lambda M: bf16(M) + bf16(M - bf16(M)) if "Ahilo" in flags else R(M, "A")
        if "Rform" in flags:  # U = (A diag(b)) (V - diag(e^gamma) K S0), no W
            U = split(A * bc[None, :]) @ bf16(Vc - np.exp(gam)[:, None] * (Kc @ Sb))
        else:  # U = (A diag(b)) V - W S0, W = (A diag(b e^gamma)) K
            W = R(split(A * (bc * np.exp(gam))[None, :]) @ Kc, "W")
            U = R(A * bc[None, :], "A") @ Vc - W @ Sb
        O = lam * (np.exp(gam)[:, None] * (Q @ Sb) + np.tril(Q @ Kc.T * D) @ U)
        o[c0:c0 + n] = R(O, "o")[:n]
        S = np.exp(gam[-1]) * S + Kc.T @ R(np.exp(gam[-1] - gam)[:, None] * U, "Us")
    return o


def rel(a, b):
    return np.linalg.norm(a - b) / np.linalg.norm(b)


if __name__ == "__main__":
    seed = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    kernel = {"q", "k", "A", "W", "S", "Us", "o"}
    for name, identical, gs in (("identical keys, beta 1, g 0", True, 0.0), ("random keys, g ~ -U(0,1)", False, 1.0)):
        x = make(seed, identical, gscale=gs)
        ref = recurrence(*x)
        print(f"{name}:")
        print(f"  kernel as built            o rel err {rel(chunked(*x, kernel), ref):.2e}")
        for f in sorted(kernel):
            print(f"    without rounding {f:3s}       {rel(chunked(*x, kernel - {f}), ref):.2e}")
        print(f"  A split hi + lo in W       {rel(chunked(*x, kernel | {'Ahilo'}), ref):.2e}")
        print(f"  U = A diag(b) (V - G K S0) {rel(chunked(*x, kernel | {'Rform', 'Ahilo'}), ref):.2e}  (A hi + lo)")
