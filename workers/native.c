/* The CPU harness's own native helpers (workers/native.py builds and loads this file):
 * cache-line eviction before a timed call, and the elementwise checks of a call's outputs
 * in one pass over the memory (torch's elementwise ops take one pass each). */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
static size_t line_bytes(void) {
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d) && ((b >> 8) & 0xff)) return ((b >> 8) & 0xff) * 8;
    return 64;
}
static int has_clflushopt(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b >> 23 & 1);
}
#define FENCE() __asm__ volatile("mfence" ::: "memory")
#define EVICT(p) __asm__ volatile("clflush (%0)" :: "r"(p) : "memory")
#define EVICT_OPT(p) __asm__ volatile("clflushopt (%0)" :: "r"(p) : "memory")
#elif defined(__aarch64__)
static size_t line_bytes(void) {
    uint64_t ctr;
    __asm__ volatile("mrs %0, ctr_el0" : "=r"(ctr));
    return (size_t)4 << ((ctr >> 16) & 0xf);
}
static int has_clflushopt(void) { return 0; }
#define FENCE() __asm__ volatile("dsb ish" ::: "memory")
#define EVICT(p) __asm__ volatile("dc civac, %0" :: "r"(p) : "memory")
#define EVICT_OPT(p) EVICT(p)
#else
#error "no cache-line eviction instruction known for this architecture"
#endif

size_t kopt_line_bytes(void) { return line_bytes(); }

int kopt_evict_opt(void) { return has_clflushopt(); }

/* Write back and invalidate every cache line of [p, p + n), at every level. */
void kopt_evict(const void *p, size_t n) {
    static size_t line = 0;
    static int opt = -1;
    if (!line) line = line_bytes();
    if (opt < 0) opt = has_clflushopt();
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)(line - 1), e = (uintptr_t)p + n;
    FENCE();
    if (opt)
        for (; a < e; a += line) EVICT_OPT(a);
    else
        for (; a < e; a += line) EVICT(a);
    FENCE();
}

/* 1 when every g[i] is close to e[i] (as COMPARE below decides), else 0: the test after
 * every timed call, reading two arrays where a band test reads three. Blocks of 4096
 * elements without a branch inside, so that the compiler can vectorize them. */
#define ALL_CLOSE(T, NAME)                                                            \
    int NAME(const T *g, const T *e, size_t n, double atol, double rtol) {            \
        for (size_t i0 = 0; i0 < n; i0 += 4096) {                                     \
            size_t i1 = i0 + 4096 < n ? i0 + 4096 : n;                                \
            int ok = 1;                                                               \
            for (size_t i = i0; i < i1; i++) {                                        \
                double a = (double)g[i], b = (double)e[i];                            \
                ok &= (a == b) | ((fabs(a - b) <= atol + rtol * fabs(b)) &            \
                                  (fabs(b) <= DBL_MAX) & (fabs(a) <= DBL_MAX));       \
            }                                                                         \
            if (!ok) return 0;                                                        \
        }                                                                             \
        return 1;                                                                     \
    }
ALL_CLOSE(float, kopt_all_close_f32)
ALL_CLOSE(double, kopt_all_close_f64)

typedef struct {
    int64_t bad;    /* elements that are not close */
    int64_t first;  /* the first of them, -1 when none */
    double max_abs; /* max |g - e|: 0 where equal (the same infinity), inf where NaN */
    double max_rel; /* max |g - e| / |e| over the finite e != 0 */
} kopt_cmp;

/* torch.isclose(g, e, rtol, atol, equal_nan=False) in float64, element by element:
 * g == e, or both finite and |g - e| <= atol + rtol * |e|; with the errors above. */
#define COMPARE(T, NAME)                                                          \
    void NAME(const T *g, const T *e, size_t n, double atol, double rtol,         \
              kopt_cmp *out) {                                                    \
        int64_t bad = 0, first = -1;                                              \
        double max_abs = 0.0, max_rel = 0.0;                                      \
        for (size_t i = 0; i < n; i++) {                                          \
            double a = (double)g[i], b = (double)e[i], d;                         \
            int close;                                                            \
            if (a == b) {                                                         \
                d = 0.0;                                                          \
                close = 1;                                                        \
            } else {                                                              \
                d = fabs(a - b);                                                  \
                if (isnan(d)) d = INFINITY;                                       \
                close = isfinite(a) && isfinite(b) && d <= atol + rtol * fabs(b); \
            }                                                                     \
            if (!close) {                                                         \
                if (first < 0) first = (int64_t)i;                                \
                bad++;                                                            \
            }                                                                     \
            if (d > max_abs) max_abs = d;                                         \
            if (b != 0.0 && isfinite(b) && d / fabs(b) > max_rel)                 \
                max_rel = d / fabs(b);                                            \
        }                                                                         \
        out->bad = bad;                                                           \
        out->first = first;                                                       \
        out->max_abs = max_abs;                                                   \
        out->max_rel = max_rel;                                                   \
    }
COMPARE(float, kopt_compare_f32)
COMPARE(double, kopt_compare_f64)

/* The load gauge for a candidate that runs on several cores (workers.harness Harness.gauge):
 * `threads` threads each spin `iters` iterations of plain work (no memory traffic, no system
 * call); the wall time in ms from the first thread's start to the last one's end. A core
 * taken by another process slows it as it slows the candidate's own threads. */
#include <pthread.h>
#include <time.h>

static void *spin_worker(void *arg) {
    unsigned long n = *(const unsigned long *)arg, x = 0;
    for (unsigned long i = 0; i < n; ++i) {
        x += i;
        __asm__ volatile("" : "+r"(x));  /* kept: the compiler may not fold the loop */
    }
    return (void *)x;
}

double kopt_spin_threads(unsigned long iters, int threads) {
    pthread_t tid[256];
    struct timespec a, b;
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    clock_gettime(CLOCK_MONOTONIC, &a);
    int started = 0;
    for (int i = 0; i < threads; ++i)
        if (pthread_create(&tid[started], NULL, spin_worker, &iters) == 0) ++started;
    for (int i = 0; i < started; ++i) pthread_join(tid[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6;
}
