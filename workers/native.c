/* The CPU harness's own native helpers (workers/native.py builds and loads this file):
 * cache-line eviction before a timed call, and the elementwise checks of a call's outputs
 * in one pass over the memory (torch's elementwise ops take one pass each). */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#define HAVE_STREAM 1
#endif
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

/* Stores that bypass the caches where the CPU has them (x86-64: MOVNTDQ, which SSE2 and so
 * every x86-64 CPU has; Intel SDM Vol. 1, 10.4.6.2 "Caching of Temporal vs. Non-Temporal
 * Data": the data is written to memory with write-combining semantics, a line present in
 * the cache hierarchy evicted), then SFENCE to order them with later loads and stores;
 * plain stores elsewhere. The caller evicts the lines afterwards in any case (kopt_evict):
 * the streaming stores save the write-allocate reads and the dirty write-backs that a plain
 * copy leaves to the eviction (24 MB of inputs and outputs loaded and evicted: 1.8 ms
 * against 3.0 ms with memcpy on the CI machine's EPYC core). */
static void stream_body(unsigned char *d, const unsigned char *s, const unsigned char *pat,
                        size_t n) {
#ifdef HAVE_STREAM
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (head > n) head = n;
    if (s) memcpy(d, s, head); else memcpy(d, pat, head);
    size_t i = head, body = head + ((n - head) & ~(size_t)15);
    if (s)
        for (; i < body; i += 16)
            _mm_stream_si128((__m128i *)(d + i), _mm_loadu_si128((const __m128i *)(s + i)));
    else {
        __m128i v = _mm_loadu_si128((const __m128i *)(pat + head % 8));
        for (; i < body; i += 16) _mm_stream_si128((__m128i *)(d + i), v);
    }
    if (s) memcpy(d + i, s + i, n - i); else memcpy(d + i, pat + i % 8, n - i);
    _mm_sfence();
#else
    if (s) memcpy(d, s, n);
    else
        for (size_t i = 0; i < n; i++) d[i] = pat[i % 8];
#endif
}

/* Copy n bytes from s to d (not overlapping) without bringing d's lines into the cache. */
void kopt_stream_copy(void *d, const void *s, size_t n) {
    stream_body((unsigned char *)d, (const unsigned char *)s, NULL, n);
}

/* Fill n bytes at d with the 8-byte pattern `pat` repeated from d on (d must be aligned to
 * the pattern's element: a NaN of the element's type, a poison byte), without bringing d's
 * lines into the cache. */
void kopt_stream_fill(void *d, const void *pat, size_t n) {
    unsigned char p[32];
    for (int k = 0; k < 32; k++) p[k] = ((const unsigned char *)pat)[k % 8];
    stream_body((unsigned char *)d, NULL, p, n);
}

/* 16-bit floats widened exactly: bfloat16 is float32's upper half; IEEE half (binary16) by
 * its fields, subnormals normalized. */
static inline double bf16_value(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
}
static inline double f16_value(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13); /* infinity, NaN */
    } else if (exp) {
        u = sign | ((exp + 112u) << 23) | (man << 13); /* normal: the bias 15 -> 127 */
    } else if (!man) {
        u = sign; /* zero */
    } else { /* subnormal: man * 2^-24, normalized */
        uint32_t k = 0;
        while (!(man & 0x400u)) {
            man <<= 1;
            k++;
        }
        u = sign | ((113u - k) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
}
#define AS_DOUBLE(x) ((double)(x))

/* 1 when every g[i] is close to e[i] (as COMPARE below decides), else 0: the test after
 * every timed call, reading two arrays where a band test reads three. Blocks of 4096
 * elements without a branch inside, so that the compiler can vectorize them: first the
 * bits (a block whose elements all equal their expected ones bit for bit, none a NaN, is
 * close: what an exact kernel gives, at the speed of the memory), then, for a block that
 * differs, the float64 test. */
/* SAME(g, e, i): element i of g equals element i of e bit for bit and is no NaN (U: the
 * unsigned type of the element's width; NAN_ABOVE: its largest non-NaN magnitude, an
 * infinity's bits). Across two types (outputs against float64 expected values): never. */
#define SAME_BITS(U, NAN_ABOVE, g, e, i)                                              \
    ((((const U *)(g))[i] == ((const U *)(e))[i]) &                                   \
     ((((const U *)(e))[i] & (U)~((U)1 << (8 * sizeof(U) - 1))) <= (NAN_ABOVE)))
#define SAME_F32(g, e, i) SAME_BITS(uint32_t, 0x7f800000u, g, e, i)
#define SAME_F64(g, e, i) SAME_BITS(uint64_t, 0x7ff0000000000000ull, g, e, i)
#define SAME_BF16(g, e, i) SAME_BITS(uint16_t, 0x7f80u, g, e, i)
#define SAME_F16(g, e, i) SAME_BITS(uint16_t, 0x7c00u, g, e, i)
#define NEVER_SAME(g, e, i) 0
#define ALL_CLOSE(T, V, E, W, SAME, NAME)                                             \
    int NAME(const T *g, const E *e, size_t n, double atol, double rtol) {            \
        for (size_t i0 = 0; i0 < n; i0 += 4096) {                                     \
            size_t i1 = i0 + 4096 < n ? i0 + 4096 : n;                                \
            int same = 1;                                                             \
            for (size_t i = i0; i < i1; i++)                                          \
                same &= SAME(g, e, i);                                                \
            if (same) continue;                                                       \
            int ok = 1;                                                               \
            for (size_t i = i0; i < i1; i++) {                                        \
                double a = V(g[i]), b = W(e[i]);                                      \
                ok &= (a == b) | ((fabs(a - b) <= atol + rtol * fabs(b)) &            \
                                  (fabs(b) <= DBL_MAX) & (fabs(a) <= DBL_MAX));       \
            }                                                                         \
            if (!ok) return 0;                                                        \
        }                                                                             \
        return 1;                                                                     \
    }
ALL_CLOSE(float, AS_DOUBLE, float, AS_DOUBLE, SAME_F32, kopt_all_close_f32)
ALL_CLOSE(double, AS_DOUBLE, double, AS_DOUBLE, SAME_F64, kopt_all_close_f64)
ALL_CLOSE(uint16_t, bf16_value, uint16_t, bf16_value, SAME_BF16, kopt_all_close_bf16)
ALL_CLOSE(uint16_t, f16_value, uint16_t, f16_value, SAME_F16, kopt_all_close_f16)
/* outputs against expected values in float64 (a reference computed in float64, the common
 * case for 16-bit outputs) */
ALL_CLOSE(float, AS_DOUBLE, double, AS_DOUBLE, NEVER_SAME, kopt_all_close_f32_f64)
ALL_CLOSE(uint16_t, bf16_value, double, AS_DOUBLE, NEVER_SAME, kopt_all_close_bf16_f64)
ALL_CLOSE(uint16_t, f16_value, double, AS_DOUBLE, NEVER_SAME, kopt_all_close_f16_f64)

typedef struct {
    int64_t bad;    /* elements that are not close */
    int64_t first;  /* the first of them, -1 when none */
    double max_abs; /* max |g - e|: 0 where equal (the same infinity), inf where NaN */
    double max_rel; /* max |g - e| / |e| over the finite e != 0 */
} kopt_cmp;

/* torch.isclose(g, e, rtol, atol, equal_nan=False) in float64, element by element:
 * g == e, or both finite and |g - e| <= atol + rtol * |e|; with the errors above. */
#define COMPARE(T, V, E, W, NAME)                                                 \
    void NAME(const T *g, const E *e, size_t n, double atol, double rtol,         \
              kopt_cmp *out) {                                                    \
        int64_t bad = 0, first = -1;                                              \
        double max_abs = 0.0, max_rel = 0.0;                                      \
        for (size_t i = 0; i < n; i++) {                                          \
            double a = V(g[i]), b = W(e[i]), d;                                   \
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
COMPARE(float, AS_DOUBLE, float, AS_DOUBLE, kopt_compare_f32)
COMPARE(double, AS_DOUBLE, double, AS_DOUBLE, kopt_compare_f64)
COMPARE(uint16_t, bf16_value, uint16_t, bf16_value, kopt_compare_bf16)
COMPARE(uint16_t, f16_value, uint16_t, f16_value, kopt_compare_f16)
COMPARE(float, AS_DOUBLE, double, AS_DOUBLE, kopt_compare_f32_f64)
COMPARE(uint16_t, bf16_value, double, AS_DOUBLE, kopt_compare_bf16_f64)
COMPARE(uint16_t, f16_value, double, AS_DOUBLE, kopt_compare_f16_f64)

/* Make every page of [p, p + n) readable and writable again, whatever the candidate did to
 * it, so that the verification's reads cannot fault into a handler of the candidate's
 * (pages rounded outwards): guard markers removed (madvise MADV_GUARD_REMOVE, Linux 6.13+;
 * a guarded page reads back as zeros, not the values the candidate saved), the pages given
 * protection key 0 with read and write access (pkey_mprotect; plain mprotect keeps a page's
 * key), and, on x86-64 where the OS enables protection keys (CPUID.7.0:ECX[4] OSPKE), this
 * thread's PKRU cleared so that no key denies it access (WRPKRU 0; Intel SDM Vol. 3A 4.6.2
 * "Protection Keys"). Where the kernel lacks a call (ENOSYS, EINVAL) or a filter refuses it
 * (EPERM: the sandbox denies the pkey calls to candidates too), the next step stands in:
 * plain mprotect last. 0, or the errno of that mprotect (ENOMEM: a page no longer mapped). */
#ifndef MADV_GUARD_REMOVE
#define MADV_GUARD_REMOVE 103
#endif
#include <sys/syscall.h>
int kopt_restore_rw(void *p, size_t n) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(page - 1), e = ((uintptr_t)p + n + page - 1) & ~(page - 1);
#if defined(__x86_64__)
    unsigned ea, eb, ec, ed;
    if (__get_cpuid_count(7, 0, &ea, &eb, &ec, &ed) && (ec >> 4 & 1))
        __asm__ volatile(".byte 0x0f, 0x01, 0xef" :: "a"(0), "c"(0), "d"(0) : "memory");
#endif
    madvise((void *)a, e - a, MADV_GUARD_REMOVE);
#ifdef SYS_pkey_mprotect
    if (syscall(SYS_pkey_mprotect, (void *)a, e - a, PROT_READ | PROT_WRITE, 0) == 0) return 0;
    if (errno == ENOMEM) return errno;
#endif
    return mprotect((void *)a, e - a, PROT_READ | PROT_WRITE) ? errno : 0;
}


/* The handlers of the signals a fault or trap on a candidate's outputs raises (a protected
 * page: SIGSEGV; a file mapping truncated under them: SIGBUS; a hardware breakpoint:
 * SIGTRAP; and SIGILL, SIGFPE, SIGSYS), as seen at the last call: a bit per signal of
 * HANDLED_SIGNALS whose handler (its function, or SIG_DFL / SIG_IGN, and whether it takes
 * a siginfo) changed since, or that could not be read (a filter of the candidate's own
 * made the query fail), 0 the first time. A candidate that computes its outputs in
 * such a handler, on their first read after the call, must have installed it. */
#include <signal.h>
static const int HANDLED_SIGNALS[] = {SIGSEGV, SIGBUS, SIGTRAP, SIGILL, SIGFPE, SIGSYS};
#define N_HANDLED (int)(sizeof HANDLED_SIGNALS / sizeof HANDLED_SIGNALS[0])
static void *seen_handler[N_HANDLED];
static int seen_siginfo[N_HANDLED], seen_once;
int kopt_handlers_changed(void) {
    int changed = 0;
    for (int i = 0; i < N_HANDLED; ++i) {
        struct sigaction now;
        if (sigaction(HANDLED_SIGNALS[i], NULL, &now) != 0) {  /* refused: not seen, changed */
            changed |= 1 << i;
            seen_handler[i] = NULL;
            continue;
        }
        int info = (now.sa_flags & SA_SIGINFO) != 0;
        void *h = info ? (void *)now.sa_sigaction : (void *)now.sa_handler;
        if (seen_once && (h != seen_handler[i] || info != seen_siginfo[i])) changed |= 1 << i;
        seen_handler[i] = h;
        seen_siginfo[i] = info;
    }
    seen_once = 1;
    return changed;
}
