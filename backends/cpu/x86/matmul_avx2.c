/* CPU backend, x86 AVX2 kernels of matmul (prototypes and contracts: ../matmul.h): the GEMV of
 * decoding-sized products of float weights (f32, f16 through F16C, bf16; FMA), the 8x32 tile of
 * the own GEMM, and the F16C row conversion (cpu_kernels.h) of GEMM panels and attention tiles.
 * Block-quantized weights (q8_0 included) have theirs in quant_avx2.c. Compiled, as every
 * x86/AREA_avx2.c, with -mavx2 -mfma -mf16c (the static library in backends/cpu/meson.build); its
 * functions run only after kvs_cpu_avx2() said the CPU has those extensions (ops_dense.c). */
#include "../cpu_kernels.h"
#include "../matmul.h"

#if KVS_CPU_HAVE_AVX2 && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>

static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 weights from w[c..c+8) as f32 (dt: f32, f16 or bf16). Called with a constant dt (the
 * always_inline kernels below are instantiated once per dtype), so no dtype test stays in a loop. */
static inline __attribute__((always_inline)) __m256 load_w8(const void *w, kvs_dtype dt, int64_t c) {
    if (dt == KVS_F32) return _mm256_loadu_ps((const float *)w + c);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + c));
    if (dt == KVS_F16) return _mm256_cvtph_ps(h);
    /* bf16: the upper half of an f32, widened by a zero extension and a 16-bit shift */
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The scalar weight w[c] as f32. */
static inline __attribute__((always_inline)) float load_w1(const void *w, kvs_dtype dt, int64_t c) {
    if (dt == KVS_F32) return ((const float *)w)[c];
    const uint16_t h = ((const uint16_t *)w)[c];
    return dt == KVS_F16 ? kvs_h2f(h) : kvs_bf2f(h);
}

/* One x row (n == 1): 64 weights a step into eight accumulators. The FMA latency (4 cycles on
 * Zen 4, 4-5 on Intel client cores) then leaves room for the conversions (F16C's vcvtph2ps, or
 * vpmovzxwd + vpslld for bf16) and the loads, so that the loop converts faster than DRAM delivers;
 * with four accumulators and a dtype test in the loop (the kernel before 2026-12-02) it ran at
 * 26-39 GB/s from L2 (f16 / bf16, one Zen 4 core), barely above that core's 22-27 GB/s DRAM read
 * rate, and W streamed from DRAM at 0.8-0.9 of a plain read loop (README, "The AVX2 GEMV, looked at
 * closer"). Order of the sum: lane-wise per accumulator, then the eight accumulators pairwise, the
 * 8-lane tail into the first, the 8 lanes (hsum8), the scalar tail. */
static inline __attribute__((always_inline)) float dot_row1(const void *w, kvs_dtype dt, const float *x,
                                                            int64_t k) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    int64_t c = 0;
    for (; c + 64 <= k; c += 64) {
        a0 = _mm256_fmadd_ps(load_w8(w, dt, c), _mm256_loadu_ps(x + c), a0);
        a1 = _mm256_fmadd_ps(load_w8(w, dt, c + 8), _mm256_loadu_ps(x + c + 8), a1);
        a2 = _mm256_fmadd_ps(load_w8(w, dt, c + 16), _mm256_loadu_ps(x + c + 16), a2);
        a3 = _mm256_fmadd_ps(load_w8(w, dt, c + 24), _mm256_loadu_ps(x + c + 24), a3);
        a4 = _mm256_fmadd_ps(load_w8(w, dt, c + 32), _mm256_loadu_ps(x + c + 32), a4);
        a5 = _mm256_fmadd_ps(load_w8(w, dt, c + 40), _mm256_loadu_ps(x + c + 40), a5);
        a6 = _mm256_fmadd_ps(load_w8(w, dt, c + 48), _mm256_loadu_ps(x + c + 48), a6);
        a7 = _mm256_fmadd_ps(load_w8(w, dt, c + 56), _mm256_loadu_ps(x + c + 56), a7);
    }
    for (; c + 8 <= k; c += 8) a0 = _mm256_fmadd_ps(load_w8(w, dt, c), _mm256_loadu_ps(x + c), a0);
    const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                   _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    float tot = hsum8(s);
    for (; c < k; c++) tot += load_w1(w, dt, c) * x[c];
    return tot;
}

/* 2 <= n <= 4 x rows: 16 weights a step, each converted once and dotted with every x row (two
 * accumulators per row). */
static inline __attribute__((always_inline)) void dot_rows_n(const void *wrow, kvs_dtype dt, const float *x,
                                                             int64_t k, int64_t n, float *acc) {
    __m256 a[KVS_GEMV_MAX_N][2];
    for (int i = 0; i < KVS_GEMV_MAX_N; i++) a[i][0] = a[i][1] = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 16 <= k; c += 16) {
        const __m256 w0 = load_w8(wrow, dt, c), w1 = load_w8(wrow, dt, c + 8);
        for (int64_t i = 0; i < n; i++) {
            const float *xc = x + i * k + c;
            a[i][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xc), a[i][0]);
            a[i][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xc + 8), a[i][1]);
        }
    }
    for (int64_t i = 0; i < n; i++) {
        float tot = hsum8(_mm256_add_ps(a[i][0], a[i][1]));
        for (int64_t t = c; t < k; t++) tot += load_w1(wrow, dt, t) * x[i * k + t];
        acc[i] = tot;
    }
}

/* acc[i] = W_row . x_i for i < n (n <= 4); W row of k values in dtype dt (F32, F16,
 * BF16; any k; the block types, q8_0 included, use quant_avx2.c). One pass over the W row: one x
 * row by dot_row1, 2-4 x rows at once by dot_rows_n; each instantiated per dtype (and n). */
void kvs_cpu_dot_rows_avx2(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    if (n == 1) {
        switch (dt) {
        case KVS_F32: acc[0] = dot_row1(wrow, KVS_F32, x, k); break;
        case KVS_F16: acc[0] = dot_row1(wrow, KVS_F16, x, k); break;
        default: acc[0] = dot_row1(wrow, KVS_BF16, x, k); break;
        }
        return;
    }
    /* n constant too: the x-row loop unrolls and the accumulators stay in registers */
#define DOT_ROWS_N(NN)                                                                                 \
    case NN:                                                                                           \
        if (dt == KVS_F32) dot_rows_n(wrow, KVS_F32, x, k, NN, acc);                                   \
        else if (dt == KVS_F16) dot_rows_n(wrow, KVS_F16, x, k, NN, acc);                              \
        else dot_rows_n(wrow, KVS_BF16, x, k, NN, acc);                                                \
        break;
    switch (n) {
        DOT_ROWS_N(2)
        DOT_ROWS_N(3)
    default: DOT_ROWS_N(4)
    }
#undef DOT_ROWS_N
}

void kvs_cpu_h2f_row_f16c(const uint16_t *s, float *d, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
        _mm256_storeu_ps(d + i + 8, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i + 8))));
    }
    for (; i < n; i++) d[i] = kvs_h2f(s[i]);
}

/* C[4][16] (+)= A[4][K] . B[K][16] (8 accumulators: 2 loads of B and 4 broadcasts per 8 FMAs). */
static inline void mm_4x16(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C, int64_t ldc,
                           int load_c) {
    __m256 c00, c01, c10, c11, c20, c21, c30, c31;
#define MM_INIT(R)                                                                                     \
    c##R##0 = load_c ? _mm256_loadu_ps(C + (R) * ldc) : _mm256_setzero_ps();                            \
    c##R##1 = load_c ? _mm256_loadu_ps(C + (R) * ldc + 8) : _mm256_setzero_ps();
    MM_INIT(0) MM_INIT(1) MM_INIT(2) MM_INIT(3)
#undef MM_INIT
    for (int64_t t = 0; t < K; t++) {
        const __m256 b0 = _mm256_loadu_ps(B + t * ldb), b1 = _mm256_loadu_ps(B + t * ldb + 8);
        __m256 q;
#define MM_ROW(R)                                                                                      \
    q = _mm256_broadcast_ss(A + (R) * lda + t);                                                        \
    c##R##0 = _mm256_fmadd_ps(q, b0, c##R##0);                                                         \
    c##R##1 = _mm256_fmadd_ps(q, b1, c##R##1);
        MM_ROW(0) MM_ROW(1) MM_ROW(2) MM_ROW(3)
#undef MM_ROW
    }
#define MM_STORE(R)                                                                                    \
    _mm256_storeu_ps(C + (R) * ldc, c##R##0);                                                          \
    _mm256_storeu_ps(C + (R) * ldc + 8, c##R##1);
    MM_STORE(0) MM_STORE(1) MM_STORE(2) MM_STORE(3)
#undef MM_STORE
}

/* C[8][32] (+)= A[8][K] . B[K][32] as four 4x16 blocks (AVX2 has 16 vector registers: a larger
 * block's accumulators and operands would spill). */
void kvs_cpu_mm_kernel_8x32_avx2(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                 int64_t ldc, int load_c) {
    for (int r = 0; r < 8; r += 4)
        for (int c = 0; c < 32; c += 16) mm_4x16(A + r * lda, lda, B + c, ldb, K, C + r * ldc + c, ldc, load_c);
}

/* C[8][16] = A[8][K] . B[K][16] from zero (two 4x16 blocks). */
void kvs_cpu_mm_kernel_8x16_avx2(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                 int64_t ldc) {
    mm_4x16(A, lda, B, ldb, K, C, ldc, 0);
    mm_4x16(A + 4 * lda, lda, B, ldb, K, C + 4 * ldc, ldc, 0);
}

/* C[8][8] = A[8][K] . B[K][8] from zero (one accumulator a row). */
void kvs_cpu_mm_kernel_8x8_avx2(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                int64_t ldc) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t t = 0; t < K; t++) {
        const __m256 b = _mm256_loadu_ps(B + t * ldb);
        a0 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + t), b, a0);
        a1 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + lda + t), b, a1);
        a2 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + 2 * lda + t), b, a2);
        a3 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + 3 * lda + t), b, a3);
        a4 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + 4 * lda + t), b, a4);
        a5 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + 5 * lda + t), b, a5);
        a6 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + 6 * lda + t), b, a6);
        a7 = _mm256_fmadd_ps(_mm256_broadcast_ss(A + 7 * lda + t), b, a7);
    }
    _mm256_storeu_ps(C, a0);
    _mm256_storeu_ps(C + ldc, a1);
    _mm256_storeu_ps(C + 2 * ldc, a2);
    _mm256_storeu_ps(C + 3 * ldc, a3);
    _mm256_storeu_ps(C + 4 * ldc, a4);
    _mm256_storeu_ps(C + 5 * ldc, a5);
    _mm256_storeu_ps(C + 6 * ldc, a6);
    _mm256_storeu_ps(C + 7 * ldc, a7);
}

/* Transposes the 8x8 block held in r[0..8) (r[j] = row j) in place: r[i] becomes column i. */
static inline __attribute__((always_inline)) void tr8x8(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* panel[t][ii] = x[i0 + ii][t] for ii < 32, t < k (rows i0 + ii >= n read as 0): x [n][k] row-major
 * -> one panel [k][32] of the small GEMM (8x8 register transposes; the k % 8 tail columns scalar).
 * Pure data movement (no rounding). */
void kvs_cpu_mm_pack_x32_avx2(const float *x, int64_t n, int64_t k, int64_t i0, float *panel) {
    for (int64_t ii0 = 0; ii0 < 32; ii0 += 8) {
        int64_t t = 0;
        for (; t + 8 <= k; t += 8) {
            __m256 r[8];
            for (int j = 0; j < 8; j++)
                r[j] = i0 + ii0 + j < n ? _mm256_loadu_ps(x + (i0 + ii0 + j) * k + t) : _mm256_setzero_ps();
            tr8x8(r);
            for (int j = 0; j < 8; j++) _mm256_storeu_ps(panel + (t + j) * 32 + ii0, r[j]);
        }
        for (; t < k; t++)
            for (int64_t j = 0; j < 8; j++) panel[t * 32 + ii0 + j] = i0 + ii0 + j < n ? x[(i0 + ii0 + j) * k + t] : 0.0f;
    }
}

/* y[i * ldy + r] = Ct[r * ldc + i] (accumulate: y[..] + Ct[..], one rounded add) for i < ni (<= 32),
 * r < nr (<= 8): the small GEMM's tile [8 W rows][32 x rows] written to y [n][m] through 8x8
 * register transposes, masked to the nr valid W rows. */
void kvs_cpu_mm_store_t8x32_avx2(const float *Ct, int64_t ldc, float *y, int64_t ldy, int64_t ni, int64_t nr,
                                 int accumulate) {
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)nr), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int64_t i0 = 0; i0 < ni; i0 += 8) {
        __m256 r[8];
        for (int j = 0; j < 8; j++) r[j] = _mm256_loadu_ps(Ct + j * ldc + i0);
        tr8x8(r);
        const int64_t cnt = ni - i0 < 8 ? ni - i0 : 8;
        for (int64_t j = 0; j < cnt; j++) {
            float *yr = y + (i0 + j) * ldy;
            __m256 v = r[j];
            if (nr == 8) {
                if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(yr), v);
                _mm256_storeu_ps(yr, v);
            } else {
                if (accumulate) v = _mm256_add_ps(_mm256_maskload_ps(yr, mask), v);
                _mm256_maskstore_ps(yr, mask, v);
            }
        }
    }
}
#endif
