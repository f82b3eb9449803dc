// ln_v3.cpp -- the C++ twin of ln_v3.cu for the CPU backend (the dry run of
// docs/verified/h200_layernorm_loop.sh): the same dispatch (VPT = float4s per thread, the
// smallest of 1, 2, 4, 8 covering the row, at most VPT_MAX; else, or when COLS % 4 != 0 or a
// pointer is not 16-byte aligned, ln_v2's scalar path) and the same index expressions as
// ln_v3.cu's vector kernel: thread t's slot i is float4 c = i * THREADS + t of its row, used
// only when c < COLS / 4. The row is read once into each thread's slots; the reduction is
// ln_v2.cpp's butterfly emulation.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#ifndef THREADS
#define THREADS 256
#endif
#if (THREADS & (THREADS - 1)) != 0 || THREADS < 32 || THREADS > 1024
#error "THREADS must be a power of two in [32, 1024]"
#endif
#define WARPS (THREADS / 32)
#define VPT_MAX (THREADS >= 1024 ? 2 : THREADS >= 512 ? 4 : 8)

struct f4 { float x, y, z, w; };

static float warp_sum(const float* lanes) {  // lane 0 of the xor butterfly
    float v[32], n[32];
    for (int l = 0; l < 32; ++l) v[l] = lanes[l];
    for (int off = 16; off > 0; off >>= 1) {
        for (int l = 0; l < 32; ++l) n[l] = v[l] + v[l ^ off];
        for (int l = 0; l < 32; ++l) v[l] = n[l];
    }
    return v[0];
}

static float block_sum(const std::vector<float>& part) {
    float slots[32] = {0.0f};
    for (int w = 0; w < WARPS; ++w) slots[w] = warp_sum(&part[32 * w]);
    return WARPS > 1 ? warp_sum(slots) : slots[0];
}

static void vec_rows(const f4* x, const f4* weight, const f4* bias, f4* y, int ROWS,
                     int COLS, float eps, int VPT) {
    const int n4 = COLS >> 2;
    std::vector<f4> v((size_t)THREADS * VPT);  // thread t's registers: v[t * VPT + i]
    std::vector<float> part(THREADS);
    for (int row = 0; row < ROWS; ++row) {
        const f4* xr = x + (size_t)row * n4;
        f4* yr = y + (size_t)row * n4;
        for (int t = 0; t < THREADS; ++t) {
            float s = 0.0f;
            for (int i = 0; i < VPT; ++i) {
                const int c = i * THREADS + t;
                if (c < n4) {
                    const f4 a = v[(size_t)t * VPT + i] = xr[c];
                    s += (a.x + a.y) + (a.z + a.w);
                }
            }
            part[t] = s;
        }
        const float mean = block_sum(part) / (float)COLS;
        for (int t = 0; t < THREADS; ++t) {
            float q = 0.0f;
            for (int i = 0; i < VPT; ++i) {
                const int c = i * THREADS + t;
                if (c < n4) {
                    const f4 a = v[(size_t)t * VPT + i];
                    const float p = a.x - mean, r = a.y - mean, d = a.z - mean, e = a.w - mean;
                    q += (p * p + r * r) + (d * d + e * e);
                }
            }
            part[t] = q;
        }
        const float rstd = 1.0f / std::sqrt(block_sum(part) / (float)COLS + eps);
        for (int t = 0; t < THREADS; ++t)
            for (int i = 0; i < VPT; ++i) {
                const int c = i * THREADS + t;
                if (c < n4) {
                    const f4 a = v[(size_t)t * VPT + i], w = weight[c], b = bias[c];
                    yr[c] = {(a.x - mean) * rstd * w.x + b.x, (a.y - mean) * rstd * w.y + b.y,
                             (a.z - mean) * rstd * w.z + b.z, (a.w - mean) * rstd * w.w + b.w};
                }
            }
    }
}

static void scalar_rows(const float* x, const float* weight, const float* bias, float* y,
                        int ROWS, int COLS, float eps) {  // ln_v2.cpp
    std::vector<float> part(THREADS);
    for (int row = 0; row < ROWS; ++row) {
        const float* xr = x + (size_t)row * COLS;
        float* yr = y + (size_t)row * COLS;
        for (int t = 0; t < THREADS; ++t) {
            float s = 0.0f;
            for (int c = t; c < COLS; c += THREADS) s += xr[c];
            part[t] = s;
        }
        const float mean = block_sum(part) / (float)COLS;
        for (int t = 0; t < THREADS; ++t) {
            float q = 0.0f;
            for (int c = t; c < COLS; c += THREADS) {
                const float d = xr[c] - mean;
                q += d * d;
            }
            part[t] = q;
        }
        const float rstd = 1.0f / std::sqrt(block_sum(part) / (float)COLS + eps);
        for (int c = 0; c < COLS; ++c) yr[c] = (xr[c] - mean) * rstd * weight[c] + bias[c];
    }
}

extern "C" void solve(const float* x, const float* weight, const float* bias, float* y,
                      int ROWS, int COLS, float eps) {
    if (ROWS <= 0 || COLS <= 0) return;
    const uintptr_t addr = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(weight)
                           | reinterpret_cast<uintptr_t>(bias) | reinterpret_cast<uintptr_t>(y);
    const int n4 = COLS / 4;
    const int per = (n4 + THREADS - 1) / THREADS;
    if (COLS % 4 != 0 || addr % 16 != 0 || per > VPT_MAX) {
        scalar_rows(x, weight, bias, y, ROWS, COLS, eps);
        return;
    }
    const int vpt = per <= 1 ? 1 : per <= 2 ? 2 : per <= 4 ? 4 : 8;
    vec_rows(reinterpret_cast<const f4*>(x), reinterpret_cast<const f4*>(weight),
             reinterpret_cast<const f4*>(bias), reinterpret_cast<f4*>(y), ROWS, COLS, eps, vpt);
}
