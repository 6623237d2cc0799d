/* CPU backend, x86 AVX-512 kernels of matmul (prototypes and contracts: ../matmul.h): the GEMV of
 * decoding-sized products and the register-blocked 8x32 tile of the own GEMM. Compiled with target
 * attributes (the project is never built with -march=native); chosen per call by ops_dense.c. */
#include <string.h>

#include "../cpu_kernels.h"
#include "../matmul.h"

#if KVS_CPU_HAVE_AVX512
#include <immintrin.h>

/* acc[i] = W_row . x_i for i < n (n <= 4); W row of k values in dtype dt (F32, F16, BF16; k % 16 ==
 * 0; the block types have their own kernels, quant_avx512.c). One pass over the W row, up to 4 x
 * rows at once, two accumulators each. */
__attribute__((target("avx512f,f16c")))
void kvs_cpu_dot_rows_avx512(const void *wrow, kvs_dtype dt, const float *x, int64_t k, int64_t n, float *acc) {
    __m512 a[KVS_GEMV_MAX_N][2];
    for (int i = 0; i < KVS_GEMV_MAX_N; i++) a[i][0] = a[i][1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < k; c += 32) {
        __m512 w0, w1;
        if (dt == KVS_F32) {
            const float *w = (const float *)wrow + c;
            w0 = _mm512_loadu_ps(w);
            w1 = c + 16 < k ? _mm512_loadu_ps(w + 16) : _mm512_setzero_ps();
        } else if (dt == KVS_F16) {
            const uint16_t *w = (const uint16_t *)wrow + c;
            w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w));
            w1 = c + 16 < k ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + 16))) : _mm512_setzero_ps();
        } else {
            const uint16_t *w = (const uint16_t *)wrow + c;
            w0 = _mm512_castsi512_ps(
                _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)w)), 16));
            w1 = c + 16 < k ? _mm512_castsi512_ps(_mm512_slli_epi32(
                                  _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(w + 16))), 16))
                            : _mm512_setzero_ps();
        }
        for (int64_t i = 0; i < n; i++) {
            const float *xc = x + i * k + c;
            a[i][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xc), a[i][0]);
            if (c + 16 < k) a[i][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xc + 16), a[i][1]);
        }
    }
    for (int64_t i = 0; i < n; i++) acc[i] = _mm512_reduce_add_ps(_mm512_add_ps(a[i][0], a[i][1]));
}

/* C[8][32] (+)= A[8][K] . B[K][32]: A rows of stride lda, B rows of stride ldb, C rows of stride
 * ldc; load_c = 0 starts from zero. */
__attribute__((target("avx512f")))
void kvs_cpu_mm_kernel_8x32_avx512(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C, int64_t ldc,
                           int load_c) {
    __m512 a00, a01, a10, a11, a20, a21, a30, a31, a40, a41, a50, a51, a60, a61, a70, a71;
#define MM_INIT(R)                                                                                     \
    a##R##0 = load_c ? _mm512_loadu_ps(C + (R) * ldc) : _mm512_setzero_ps();                            \
    a##R##1 = load_c ? _mm512_loadu_ps(C + (R) * ldc + 16) : _mm512_setzero_ps();
    MM_INIT(0) MM_INIT(1) MM_INIT(2) MM_INIT(3) MM_INIT(4) MM_INIT(5) MM_INIT(6) MM_INIT(7)
#undef MM_INIT
    for (int64_t t = 0; t < K; t++) {
        __m512 b0 = _mm512_loadu_ps(B + t * ldb), b1 = _mm512_loadu_ps(B + t * ldb + 16), q;
#define MM_ROW(R)                                                                                      \
    q = _mm512_set1_ps(A[(R) * lda + t]);                                                              \
    a##R##0 = _mm512_fmadd_ps(q, b0, a##R##0);                                                         \
    a##R##1 = _mm512_fmadd_ps(q, b1, a##R##1);
        MM_ROW(0) MM_ROW(1) MM_ROW(2) MM_ROW(3) MM_ROW(4) MM_ROW(5) MM_ROW(6) MM_ROW(7)
#undef MM_ROW
    }
#define MM_STORE(R)                                                                                    \
    _mm512_storeu_ps(C + (R) * ldc, a##R##0);                                                          \
    _mm512_storeu_ps(C + (R) * ldc + 16, a##R##1);
    MM_STORE(0) MM_STORE(1) MM_STORE(2) MM_STORE(3) MM_STORE(4) MM_STORE(5) MM_STORE(6) MM_STORE(7)
#undef MM_STORE
}

/* C[8][16] = A[8][K] . B[K][16] (from zero; the 8x32 tile's arithmetic for half its columns:
 * the small GEMM's last x rows). */
__attribute__((target("avx512f")))
void kvs_cpu_mm_kernel_8x16_avx512(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                                   int64_t ldc) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int64_t t = 0; t < K; t++) {
        const __m512 b = _mm512_loadu_ps(B + t * ldb);
        a0 = _mm512_fmadd_ps(_mm512_set1_ps(A[t]), b, a0);
        a1 = _mm512_fmadd_ps(_mm512_set1_ps(A[lda + t]), b, a1);
        a2 = _mm512_fmadd_ps(_mm512_set1_ps(A[2 * lda + t]), b, a2);
        a3 = _mm512_fmadd_ps(_mm512_set1_ps(A[3 * lda + t]), b, a3);
        a4 = _mm512_fmadd_ps(_mm512_set1_ps(A[4 * lda + t]), b, a4);
        a5 = _mm512_fmadd_ps(_mm512_set1_ps(A[5 * lda + t]), b, a5);
        a6 = _mm512_fmadd_ps(_mm512_set1_ps(A[6 * lda + t]), b, a6);
        a7 = _mm512_fmadd_ps(_mm512_set1_ps(A[7 * lda + t]), b, a7);
    }
    _mm512_storeu_ps(C, a0);
    _mm512_storeu_ps(C + ldc, a1);
    _mm512_storeu_ps(C + 2 * ldc, a2);
    _mm512_storeu_ps(C + 3 * ldc, a3);
    _mm512_storeu_ps(C + 4 * ldc, a4);
    _mm512_storeu_ps(C + 5 * ldc, a5);
    _mm512_storeu_ps(C + 6 * ldc, a6);
    _mm512_storeu_ps(C + 7 * ldc, a7);
}
#endif
