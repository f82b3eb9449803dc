// ln_v2.cpp -- the C++ twin of ln_v2.cu for the CPU backend (the dry run of
// docs/verified/h200_layernorm_loop.sh): ln_v1.cpp with ln_v2.cu's reduction emulated --
// each warp's 32 partial sums reduced by the __shfl_xor_sync butterfly (the value lane 0
// ends with), one slot per warp, then the same butterfly over the slots (lanes past the
// warp count read 0). The memory passes are ln_v1's.
#include <cmath>
#include <cstddef>
#include <vector>

#ifndef THREADS
#define THREADS 256
#endif
#if (THREADS & (THREADS - 1)) != 0 || THREADS < 32 || THREADS > 1024
#error "THREADS must be a power of two in [32, 1024]"
#endif
#define WARPS (THREADS / 32)

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

extern "C" void solve(const float* x, const float* weight, const float* bias, float* y,
                      int ROWS, int COLS, float eps) {
    if (ROWS <= 0 || COLS <= 0) return;
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
