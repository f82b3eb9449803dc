"""CPU emulation of the tensor-core index arithmetic of ../w8a8_gemm.cu (TC path) and v2.cu.

No GPU here, so this re-plays, with numpy, what each thread of a block computes: the
global -> shared copies (each kernel's chunk loops, padding or XOR swizzle), the fragment
reads (32-bit LDS words or ldmatrix.x4/.x2, by lane), mma.m16n8k32 and the epilogue's
(row, column) per accumulator register, and compares the int32 result with A @ W^T. The
fragment layouts and the ldmatrix distribution are taken from the PTX ISA (9.7.14.5, Matrix
Fragments for mma.m16n8k32 with .s8, and ldmatrix): A a0 row g, k 4t..4t+3; a1 row g + 8;
a2, a3 at k + 16; B b0 column g, k 4t..4t+3; b1 at k + 16; C c0, c1 row g, columns 2t, 2t+1;
c2, c3 row g + 8 (g = lane >> 2, t = lane & 3); ldmatrix: lanes 8i..8i+7 give the 8 row
addresses of matrix i, and lane l receives bytes 4(l & 3)..+3 of row l >> 2 of each matrix.

It also counts shared-memory bank conflicts of the fragment reads (LDS.32: the most distinct
32-bit words in one bank over a warp's request; ldmatrix: over each 8-address phase), to
check the kernels' comments about PAD and the swizzle. The formulas below are transcribed
from the .cu files by hand: a change there needs the same change here.

Run: python3 sweeps/w8a8_gemm/versions/emulate_fragments.py
"""
from __future__ import annotations

import itertools

import numpy as np

# ---- the PTX semantics ---------------------------------------------------------------------


def lane_gt(lane: int) -> tuple[int, int]:
    return lane >> 2, lane & 3


def mma_m16n8k32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
    """a [32, 4, 4] int8 (lane, register, byte), b [32, 2, 4], c [32, 4] int64 (updated)."""
    A = np.zeros((16, 32), np.int64)
    B = np.zeros((32, 8), np.int64)
    C = np.zeros((16, 8), np.int64)
    for lane in range(32):
        g, t = lane_gt(lane)
        for reg in range(4):
            row = g + 8 * (reg & 1)
            k0 = 4 * t + 16 * (reg >> 1)
            A[row, k0:k0 + 4] = a[lane, reg]
        for reg in range(2):
            k0 = 4 * t + 16 * reg
            B[k0:k0 + 4, g] = b[lane, reg]
        for j in range(4):
            C[g + 8 * (j >> 1), 2 * t + (j & 1)] = c[lane, j]
    D = A @ B + C
    for lane in range(32):
        g, t = lane_gt(lane)
        for j in range(4):
            c[lane, j] = D[g + 8 * (j >> 1), 2 * t + (j & 1)]


class Smem:
    def __init__(self, nbytes: int):
        self.b = np.zeros(nbytes, np.int8)
        self.conflicts = 0  # worst n-way seen

    def store16(self, off: int, data: np.ndarray) -> None:
        assert off % 16 == 0 and 0 <= off and off + 16 <= self.b.size, off
        self.b[off:off + 16] = data

    def lds32(self, offs: list[int]) -> np.ndarray:
        """One warp's LDS.32: [32, 4] bytes; tracks the worst bank conflict."""
        assert all(o % 4 == 0 for o in offs)
        banks: dict[int, set[int]] = {}
        for o in offs:
            banks.setdefault((o // 4) % 32, set()).add(o // 4)
        self.conflicts = max(self.conflicts, max(len(v) for v in banks.values()))
        return np.stack([self.b[o:o + 4] for o in offs])

    def ldmatrix(self, offs: list[int], num: int) -> np.ndarray:
        """ldmatrix.m8n8.x{num}.b16 with lane l's address offs[l]: [32, num, 4] bytes."""
        out = np.zeros((32, num, 4), np.int8)
        for i in range(num):
            rows = offs[8 * i:8 * i + 8]
            assert all(o % 16 == 0 for o in rows), rows
            groups: dict[int, int] = {}
            for o in rows:  # 8 rows of 16 bytes: a phase is conflict-free in 8 distinct groups
                groups[(o // 16) % 8] = groups.get((o // 16) % 8, 0) + 1
            self.conflicts = max(self.conflicts, max(groups.values()))
            for lane in range(32):
                r, q = lane >> 2, lane & 3
                out[lane, i] = self.b[rows[r] + 4 * q:rows[r] + 4 * q + 4]
        return out


def scaled(acc: np.ndarray, a: np.ndarray, w: np.ndarray) -> np.ndarray:
    return ((acc.astype(np.float32) * a.astype(np.float32)) * w.astype(np.float32)).astype(
        np.float16)


# ---- w8a8_gemm.cu, TC path -------------------------------------------------------------------


def sweep_tc(A, sa, W, sw, BM, THREADS, BK, PAD, LDSM, SPLITK, STAGES=3):
    M, K = A.shape
    N = W.shape[0]
    TC_BN = 128
    LDS = BK + PAD
    WARPS = THREADS // 32
    WM = 1 if BM == 16 else 2
    WN = WARPS // WM
    WTM, WTN = BM // WM, TC_BN // WN
    MI, NI = WTM // 16, WTN // 8
    STAGE = (BM + TC_BN) * LDS
    acc_total = np.zeros((M, N), np.int64)
    conflicts = 0
    for bx, by, bz in itertools.product(range(N // TC_BN), range(-(-M // BM)), range(SPLITK)):
        m0, n0 = by * BM, bx * TC_BN
        kper = K // SPLITK
        k0 = bz * kper
        sm = Smem(STAGES * STAGE)
        acc = np.zeros((WARPS, MI, NI, 32, 4), np.int64)
        for kt in range(kper // BK):
            s = kt % STAGES
            As, Ws = s * STAGE, s * STAGE + BM * LDS
            kb = k0 + kt * BK
            CPR = BK // 16
            for tid in range(THREADS):  # load_tile<16>
                for i in range(tid, BM * CPR, THREADS):
                    r, c = i // CPR, (i % CPR) * 16
                    m = m0 + r
                    src = A[min(m, M - 1), kb + c:kb + c + 16]
                    sm.store16(As + r * LDS + c, src if m < M else np.zeros(16, np.int8))
                for i in range(tid, TC_BN * CPR, THREADS):
                    r, c = i // CPR, (i % CPR) * 16
                    n = n0 + r
                    sm.store16(Ws + r * LDS + c, W[min(n, N - 1), kb + c:kb + c + 16])
            for warp in range(WARPS):  # compute_tile
                wr, wc = (warp // WN) * WTM, (warp % WN) * WTN
                for ks in range(0, BK, 32):
                    af = np.zeros((MI, 32, 4, 4), np.int8)
                    bf = np.zeros((NI, 32, 2, 4), np.int8)
                    for mi in range(MI):
                        r0 = wr + mi * 16
                        if LDSM:
                            offs = [As + (r0 + (ln & 15)) * LDS + ks + (ln >> 4) * 16
                                    for ln in range(32)]
                            af[mi] = sm.ldmatrix(offs, 4)
                        else:
                            p = [As + (r0 + (ln >> 2)) * LDS + ks + 4 * (ln & 3)
                                 for ln in range(32)]
                            af[mi, :, 0] = sm.lds32(p)
                            af[mi, :, 1] = sm.lds32([o + 8 * LDS for o in p])
                            af[mi, :, 2] = sm.lds32([o + 16 for o in p])
                            af[mi, :, 3] = sm.lds32([o + 8 * LDS + 16 for o in p])
                    if LDSM:
                        for ni in range(0, NI - 1, 2):
                            offs = [Ws + (wc + ni * 8 + (ln >> 4) * 8 + (ln & 7)) * LDS + ks
                                    + ((ln >> 3) & 1) * 16 for ln in range(32)]
                            r = sm.ldmatrix(offs, 4)
                            bf[ni, :, 0], bf[ni, :, 1] = r[:, 0], r[:, 1]
                            bf[ni + 1, :, 0], bf[ni + 1, :, 1] = r[:, 2], r[:, 3]
                        if NI % 2 == 1:
                            offs = [Ws + (wc + (NI - 1) * 8 + (ln & 7)) * LDS + ks
                                    + ((ln >> 3) & 1) * 16 for ln in range(32)]
                            r = sm.ldmatrix(offs, 2)
                            bf[NI - 1, :, 0], bf[NI - 1, :, 1] = r[:, 0], r[:, 1]
                    else:
                        for ni in range(NI):
                            p = [Ws + (wc + ni * 8 + (ln >> 2)) * LDS + ks + 4 * (ln & 3)
                                 for ln in range(32)]
                            bf[ni, :, 0] = sm.lds32(p)
                            bf[ni, :, 1] = sm.lds32([o + 16 for o in p])
                    for mi, ni in itertools.product(range(MI), range(NI)):
                        mma_m16n8k32(af[mi], bf[ni], acc[warp, mi, ni])
        conflicts = max(conflicts, sm.conflicts)
        for warp in range(WARPS):  # epilogue (split-K: the int32 partials are summed first)
            rb = m0 + (warp // WN) * WTM
            cb = n0 + (warp % WN) * WTN
            for mi, ni, ln, j in itertools.product(range(MI), range(NI), range(32), range(4)):
                g, t = lane_gt(ln)
                m = rb + mi * 16 + g + (j >> 1) * 8
                n = cb + ni * 8 + 2 * t + (j & 1)
                if m < M:
                    acc_total[m, n] += acc[warp, mi, ni, ln, j]
    ok = acc_total == A.astype(np.int64) @ W.astype(np.int64).T
    y = scaled(acc_total, sa[:, None], sw[None, :])
    return bool(ok.all()), y, conflicts


# ---- v2.cu ------------------------------------------------------------------------------------


def v2_gemm(A, sa, W, sw, THREADS, STAGES=4):
    M, K = A.shape
    N = W.shape[0]
    BM, BN, BK = 128, 128, 64
    WARPS = THREADS // 32
    WN = WARPS // 2
    WTM, WTN = BM // 2, BN // WN
    MI, NI = WTM // 16, WTN // 8
    TILE, STAGE = BM * BK, 2 * BM * BK

    def swz(r, c):
        return r * BK + ((c ^ ((r >> 1) & 3)) << 4)

    y = np.full((M, N), np.nan, np.float16)
    acc_all = np.zeros((M, N), np.int64)
    conflicts = 0
    for bx, by in itertools.product(range(N // BN), range(-(-M // BM))):
        m0, n0 = by * BM, bx * BN
        sm = Smem(STAGES * STAGE)
        acc = np.zeros((WARPS, MI, NI, 32, 4), np.int64)
        written = set()
        for kt in range(K // BK):
            slot = kt % STAGES
            As, Ws = slot * STAGE, slot * STAGE + TILE
            k = kt * BK
            for tid in range(THREADS):  # g_load
                for i in range(tid, BM * 4, THREADS):
                    r, c = i >> 2, i & 3
                    m = m0 + r
                    src = A[min(m, M - 1), k + c * 16:k + c * 16 + 16]
                    sm.store16(As + swz(r, c), src if m < M else np.zeros(16, np.int8))
                    written.add(As + swz(r, c))
                for i in range(tid, BN * 4, THREADS):
                    r, c = i >> 2, i & 3
                    sm.store16(Ws + swz(r, c), W[n0 + r, k + c * 16:k + c * 16 + 16])
                    written.add(Ws + swz(r, c))
            for warp in range(WARPS):
                wr, wc = (warp // WN) * WTM, (warp % WN) * WTN
                for ks in range(2):
                    af = np.zeros((MI, 32, 4, 4), np.int8)
                    bf = np.zeros((NI, 32, 2, 4), np.int8)
                    for mi in range(MI):
                        offs = [As + swz(wr + mi * 16 + (ln & 15), 2 * ks + (ln >> 4))
                                for ln in range(32)]
                        af[mi] = sm.ldmatrix(offs, 4)
                    for np_ in range(NI // 2):
                        offs = [Ws + swz(wc + np_ * 16 + ((ln >> 4) << 3) + (ln & 7),
                                         2 * ks + ((ln >> 3) & 1)) for ln in range(32)]
                        r = sm.ldmatrix(offs, 4)
                        bf[2 * np_, :, 0], bf[2 * np_, :, 1] = r[:, 0], r[:, 1]
                        bf[2 * np_ + 1, :, 0], bf[2 * np_ + 1, :, 1] = r[:, 2], r[:, 3]
                    for mi, ni in itertools.product(range(MI), range(NI)):
                        mma_m16n8k32(af[mi], bf[ni], acc[warp, mi, ni])
        assert len(written) == STAGES * STAGE // 16 or K // BK < STAGES  # a bijection
        conflicts = max(conflicts, sm.conflicts)
        for warp in range(WARPS):
            wr, wc = (warp // WN) * WTM, (warp % WN) * WTN
            for mi, h, ni, ln in itertools.product(range(MI), range(2), range(NI), range(32)):
                g, t = lane_gt(ln)
                m = m0 + wr + mi * 16 + h * 8 + g
                n = n0 + wc + ni * 8 + 2 * t
                if m >= M:
                    continue
                for e in range(2):
                    assert np.isnan(y[m, n + e])  # each output written once
                    acc_all[m, n + e] = acc[warp, mi, ni, ln, 2 * h + e]
                    y[m, n + e] = scaled(acc[warp, mi, ni, ln, 2 * h + e], sa[m], sw[n + e])
    ok = (acc_all == A.astype(np.int64) @ W.astype(np.int64).T).all() and not np.isnan(y).any()
    return bool(ok), y, conflicts


def v2_skinny(A, sa, W, sw, STAGES=4):
    M, K = A.shape
    N = W.shape[0]
    BN, BK, THREADS, NI = 32, 256, 128, 4
    SA, STAGE = 16 * BK, 16 * BK + BN * BK

    def swz(r, c):
        return r * BK + ((c ^ (r & 7)) << 4)

    y = np.full((M, N), np.nan, np.float16)
    acc_all = np.zeros((M, N), np.int64)
    conflicts = 0
    for bx in range(N // BN):
        n0 = bx * BN
        sm = Smem(STAGES * STAGE)
        acc = np.zeros((4, NI, 32, 4), np.int64)
        for kt in range(K // BK):
            slot = kt % STAGES
            As, Ws = slot * STAGE, slot * STAGE + SA
            k = kt * BK
            for tid in range(THREADS):
                for i in range(tid, 16 * 16, THREADS):
                    r, c = i >> 4, i & 15
                    src = A[min(r, M - 1), k + c * 16:k + c * 16 + 16]
                    sm.store16(As + swz(r, c), src if r < M else np.zeros(16, np.int8))
                for i in range(tid, BN * 16, THREADS):
                    r, c = i >> 4, i & 15
                    sm.store16(Ws + swz(r, c), W[n0 + r, k + c * 16:k + c * 16 + 16])
            for warp in range(4):
                for ks in range(2):
                    chk = warp * 4 + 2 * ks
                    af = sm.ldmatrix([As + swz(ln & 15, chk + (ln >> 4)) for ln in range(32)], 4)
                    for np_ in range(NI // 2):
                        r = sm.ldmatrix([Ws + swz(np_ * 16 + ((ln >> 4) << 3) + (ln & 7),
                                                  chk + ((ln >> 3) & 1)) for ln in range(32)], 4)
                        b0 = np.stack([r[:, 0], r[:, 1]], axis=1)
                        b1 = np.stack([r[:, 2], r[:, 3]], axis=1)
                        mma_m16n8k32(af, b0, acc[warp, 2 * np_])
                        mma_m16n8k32(af, b1, acc[warp, 2 * np_ + 1])
        conflicts = max(conflicts, sm.conflicts)
        red = np.full((4, 16, BN), -(2**40), np.int64)  # the reduction's shared tile
        for warp, ni, ln, j in itertools.product(range(4), range(NI), range(32), range(4)):
            g, t = lane_gt(ln)
            red[warp, g + (j >> 1) * 8, ni * 8 + 2 * t + (j & 1)] = acc[warp, ni, ln, j]
        assert (red > -(2**40)).all()  # every slot written
        for tid in range(THREADS):
            row, col = tid >> 3, (tid & 7) * 4
            if row >= M:
                continue
            s = red[:, row, col:col + 4].sum(axis=0)
            for e in range(4):
                assert np.isnan(y[row, n0 + col + e])
                acc_all[row, n0 + col + e] = s[e]
                y[row, n0 + col + e] = scaled(s[e], sa[row], sw[n0 + col + e])
    ok = (acc_all == A.astype(np.int64) @ W.astype(np.int64).T).all() and not np.isnan(y).any()
    return bool(ok), y, conflicts


def main() -> None:
    rng = np.random.default_rng(0)

    def draw(M, N, K):
        return (rng.integers(-127, 128, (M, K)).astype(np.int8),
                rng.uniform(0.01, 0.05, M).astype(np.float32),
                rng.integers(-127, 128, (N, K)).astype(np.int8),
                rng.uniform(1e-4, 1e-3, N).astype(np.float32))

    A, sa, W, sw = draw(20, 256, 512)  # 20 rows: a partial 16-row fragment past M
    ref = scaled(A.astype(np.int64) @ W.astype(np.int64).T, sa[:, None], sw[None, :])
    for BM, THREADS, BK, PAD, LDSM, SPLITK in itertools.product(
            (16, 128), (128, 256), (64, 128), (0, 16), (0, 1), (1, 4)):
        if SPLITK > 1 and (BM != 16 or BK != 64):
            continue
        ok, y, conf = sweep_tc(A, sa, W, sw, BM, THREADS, BK, PAD, LDSM, SPLITK)
        assert ok and np.array_equal(y, ref), (BM, THREADS, BK, PAD, LDSM, SPLITK)
        print(f"w8a8_gemm.cu TC BM={BM:3} THREADS={THREADS} BK={BK:3} PAD={PAD:2} LDSM={LDSM} "
              f"SPLITK={SPLITK}: exact; worst bank conflict {conf}-way")
    for M in (20, 130):
        A, sa, W, sw = draw(M, 256, 320)
        ref = scaled(A.astype(np.int64) @ W.astype(np.int64).T, sa[:, None], sw[None, :])
        for THREADS in (128, 256):
            ok, y, conf = v2_gemm(A, sa, W, sw, THREADS)
            assert ok and np.array_equal(y, ref), (M, THREADS)
            print(f"v2.cu gemm_kernel M={M} THREADS={THREADS}: exact; worst bank conflict "
                  f"{conf}-way")
    for M in (16, 5):
        A, sa, W, sw = draw(M, 96, 1024)
        ref = scaled(A.astype(np.int64) @ W.astype(np.int64).T, sa[:, None], sw[None, :])
        ok, y, conf = v2_skinny(A, sa, W, sw)
        assert ok and np.array_equal(y, ref), M
        print(f"v2.cu skinny_kernel M={M}: exact; worst bank conflict {conf}-way")


if __name__ == "__main__":
    main()
