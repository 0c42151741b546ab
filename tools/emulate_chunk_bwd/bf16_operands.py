"""What rounding one GEMM operand of the backward to bf16 costs when keys are nearly parallel (docs/chunk_bwd.md).

One chunk (64 rows, K = V = 128, beta = 1, g = 0) in fp64 with keys of pairwise correlation rho: the relative error
of pass 4's first dq term, (dP (.) D) K with dP = Lower(dO U^T), when U0 = (A diag(beta)) V is formed from a bf16
A diag(beta), or U itself is bf16; and of dU = P^T dO with a bf16 P. Usage: python3 bf16_operands.py
"""
import numpy as np


def bf16(x):
    """Round to the nearest bf16 (ties to even), back as float64."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32).astype(np.float64)


def main():
    rng = np.random.default_rng(0)
    n, K, V = 64, 128, 128
    lower = np.tril(np.ones((n, n)))
    for rho in [0.0, 0.3, 0.6, 0.9, 0.99, 1.0]:
        errs = {"Ab": [], "U": [], "P": []}
        for _ in range(5):
            k = np.sqrt(rho) * rng.normal(size=K) + np.sqrt(1 - rho) * rng.normal(size=(n, K))
            k /= np.linalg.norm(k, axis=1, keepdims=True)
            q = rng.normal(size=(n, K))
            q /= np.linalg.norm(q, axis=1, keepdims=True)
            v, dO = rng.normal(size=(n, V)), rng.normal(size=(n, V))
            A = np.linalg.inv(np.eye(n) + np.tril(k @ k.T, -1))  # beta = 1: A diag(beta) = A
            U = A @ v
            ref = ((dO @ U.T) * lower) @ k
            rel = lambda U2: np.linalg.norm(((dO @ U2.T) * lower) @ k - ref) / np.linalg.norm(ref)
            errs["Ab"].append(rel(bf16(A) @ v))
            errs["U"].append(rel(bf16(U)))
            P = (q @ k.T) * lower
            errs["P"].append(np.linalg.norm(bf16(P).T @ dO - P.T @ dO) / np.linalg.norm(P.T @ dO))
        print(f"rho {rho:4.2f}  dq term: bf16 A diag(beta) {np.mean(errs['Ab']):.1e}, bf16 U {np.mean(errs['U']):.1e};"
              f"  dU: bf16 P {np.mean(errs['P']):.1e}")


if __name__ == "__main__":
    main()
