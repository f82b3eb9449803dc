// ln_v1.cpp -- the C++ twin of ln_v1.cu for the CPU backend (the dry run of
// docs/verified/h200_layernorm_loop.sh): the same layer norm with the same arithmetic and the
// same indexing, the THREADS threads of a block emulated one after another. Thread t's
// strided partial sums over c = t, t + THREADS, ..., then the same shared-memory tree
// (halving strides) as ln_v1.cu; mean, rsqrt(var + eps) and the output as there.
#include <cmath>
#include <cstddef>
#include <vector>

#ifndef THREADS
#define THREADS 256
#endif
#if (THREADS & (THREADS - 1)) != 0 || THREADS < 32 || THREADS > 1024
#error "THREADS must be a power of two in [32, 1024]"
#endif

static float block_sum(std::vector<float>& sm) {  // ln_v1.cu's tree, level by level
    for (int s = THREADS / 2; s > 0; s >>= 1)
        for (int t = 0; t < s; ++t) sm[t] += sm[t + s];
    return sm[0];
}

extern "C" void solve(const float* x, const float* weight, const float* bias, float* y,
                      int ROWS, int COLS, float eps) {
    if (ROWS <= 0 || COLS <= 0) return;
    std::vector<float> sm(THREADS);
    for (int row = 0; row < ROWS; ++row) {
        const float* xr = x + (size_t)row * COLS;
        float* yr = y + (size_t)row * COLS;
        for (int t = 0; t < THREADS; ++t) {
            float s = 0.0f;
            for (int c = t; c < COLS; c += THREADS) s += xr[c];
            sm[t] = s;
        }
        const float mean = block_sum(sm) / (float)COLS;
        for (int t = 0; t < THREADS; ++t) {
            float q = 0.0f;
            for (int c = t; c < COLS; c += THREADS) {
                const float d = xr[c] - mean;
                q += d * d;
            }
            sm[t] = q;
        }
        const float rstd = 1.0f / std::sqrt(block_sum(sm) / (float)COLS + eps);
        for (int c = 0; c < COLS; ++c) yr[c] = (xr[c] - mean) * rstd * weight[c] + bias[c];
    }
}
