/* CPU backend: dense and element-wise ops (matmul, add, copy, rmsnorm, swiglu, softmax, embedding,
 * rope). Contracts: include/kvsieve/ops.h; arguments arrive validated from core/ops.c. */
#include <stdlib.h>

#include <cblas.h>

#include "cpu_kernels.h"
#include "kvsieve/generate.h"
#include "matmul.h"
#include "arm/neon.h"

/* ---- weight rows -> f32 ------------------------------------------------------------------- */

KVS_CLONES
static void row_f16_to_f32(const uint16_t *KVS_RESTRICT s, float *KVS_RESTRICT d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = kvs_h2f(s[i]);
}

KVS_CLONES
static void row_bf16_to_f32(const uint16_t *KVS_RESTRICT s, float *KVS_RESTRICT d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = kvs_bf2f(s[i]);
}

/* Row r of a [rows][n] tensor of dtype dt, converted to f32 in d[0..n); block types through
 * `decode` (matmul.h: the variant's decoder). */
static void row_to_f32(const void *base, kvs_dtype dt, int64_t r, int64_t n, float *d, kvs_cpu_qdecode_fn decode) {
    switch (dt) {
    case KVS_F32: memcpy(d, (const float *)base + r * n, (size_t)n * sizeof(float)); break;
    case KVS_F16: row_f16_to_f32((const uint16_t *)base + r * n, d, n); break;
    case KVS_BF16: row_bf16_to_f32((const uint16_t *)base + r * n, d, n); break;
    default: decode(dt, (const uint8_t *)base + (size_t)r * kvs_dtype_bytes(dt, n), n, d); break;
    }
}

/* ---- matmul -------------------------------------------------------------------------------- */

/* x rows up to which a block-type W multiplies 8-bit activations when the variant asks for them
 * (matmul_q8); more rows: the f32 GEMM tiles. The K types' integer kernels beat the tiles up to 64
 * rows (q4_K 4096 x 4096: 2.3x at 16 rows, 1.1x at 64, CPU time); the 32-value types' per-block
 * f32 scaling costs more per row, so they stop at 16 (q5_0 at 32 rows ran at 0.6-0.7x the tiles). */
#ifndef KVS_Q8_MAX_N
#define KVS_Q8_MAX_N 64
#endif
#ifndef KVS_Q8_MAX_N_32
#define KVS_Q8_MAX_N_32 16
#endif
/* QuantSpec's verify step (draft + 1 rows) must stay on the products a one-row step uses, or its
 * tokens part from plain decoding's (generate.h, kvs_ar_params.draft) */
_Static_assert(KVS_SPEC_MAX_DRAFT + 1 <= KVS_Q8_MAX_N_32 && KVS_Q8_MAX_N_32 <= KVS_Q8_MAX_N,
               "KVS_SPEC_MAX_DRAFT + 1 exceeds the 8-bit activation row limit");

/* Few x rows (n <= KVS_GEMV_MAX_N): see matmul.h. */

/* acc[i] = W_row . x_i for i < n, W row of k values of type T read through TO_F32 (portable
 * 16-lane C the compiler vectorises; the AVX-512 one is in x86/matmul_avx512.c). */
#define KVS_DEFINE_DOT_ROWS(name, T, TO_F32)                                                            \
    KVS_CLONES                                                                                       \
    static void name(const T *KVS_RESTRICT w, const float *KVS_RESTRICT x, int64_t k, int64_t n,      \
                     float *KVS_RESTRICT acc) {                                                      \
        for (int64_t i = 0; i < n; i++) {                                                            \
            const float *xi = x + i * k;                                                             \
            float s[16] = {0};                                                                       \
            int64_t c = 0;                                                                           \
            for (; c + 16 <= k; c += 16)                                                             \
                for (int t = 0; t < 16; t++) s[t] += TO_F32(w[c + t]) * xi[c + t];                   \
            float tot = 0.0f;                                                                        \
            for (; c < k; c++) tot += TO_F32(w[c]) * xi[c];                                          \
            for (int t = 0; t < 16; t++) tot += s[t];                                                \
            acc[i] = tot;                                                                            \
        }                                                                                            \
    }

#define KVS_F32_ID(v) (v)
KVS_DEFINE_DOT_ROWS(dot_rows_f32, float, KVS_F32_ID)
KVS_DEFINE_DOT_ROWS(dot_rows_f16, uint16_t, kvs_h2f)
KVS_DEFINE_DOT_ROWS(dot_rows_bf16, uint16_t, kvs_bf2f)


static void matmul_small_n(kvs_device *dev, const kvs_matmul_args *a) {
    const void *W = kvs_tensor_host_ptr(a->W);
    const float *x = kvs_tensor_host_ptr(a->x);
    float *y = kvs_tensor_host_ptr(a->y);
    const int64_t m = a->m, k = a->k, n = a->n;
    const kvs_dtype dt = a->W->dtype;
    const size_t wrow = kvs_dtype_bytes(dt, k);
    /* block types (q8_0 included): the variant's quant kernels (matmul.h, ops_quant.c: AVX-512,
     * AVX2, NEON or portable); float weights: the AVX-512 GEMV where k % 16 == 0, the AVX2 one (any
     * k), the NEON one where k % 16 == 0, else the portable one. aarch64 extensions on top (the
     * variant's, or the CPU's): q8_0 by SDOT on x split into two int8 planes, f16 by FMLAL on x
     * rounded to f16 (arm/matmul_neon.c), x prepared once per call in scratch. */
    const int isa = kvs_cpu_isa(dev, KVS_OP_matmul);
    const int fast = isa == KVS_ISA_AVX512 && k % 16 == 0;
    (void)fast;
    const int quant = kvs_dtype_is_quant(dt);
    kvs_cpu_qdot_fn qdot = NULL;
    if (quant) kvs_cpu_quant_kernels(dev, KVS_OP_matmul, &qdot, NULL);
#if KVS_CPU_HAVE_NEON
    const int neon = isa == KVS_ISA_NEON ? kvs_cpu_use_neon(dev, KVS_OP_matmul) : 0;
    const int neon_f = (neon & KVS_ARM_NEON) && !quant && k % 16 == 0; /* float weights */
    int8_t *xq = NULL;
    float *xsc = NULL;
    uint16_t *xh = NULL;
    if (dt == KVS_Q8_0 && (neon & KVS_ARM_DOTPROD)) {
        xq = kvs_cpu_scratch(dev, (size_t)(n * k) * 2 + (size_t)(n * (k / KVS_Q8_BLOCK)) * sizeof(float));
        xsc = xq ? (float *)(xq + 2 * n * k) : NULL;
        if (xq && !kvs_cpu_q8_split_x_neon(x, k, n, xq, xq + n * k, xsc)) xq = NULL;
    } else if (neon_f && dt == KVS_F16 && (neon & KVS_ARM_FP16FML)) {
        xh = kvs_cpu_scratch(dev, (size_t)(n * k) * sizeof(uint16_t));
        if (xh && !kvs_cpu_f16_x_neon(x, n * k, xh)) xh = NULL;
    }
    /* (no scratch, or x outside what the extension's kernel represents: the plain NEON kernels) */
#endif
    int nt = kvs_cpu_nt(dev, (double)m * (double)k * (double)n);
    (void)nt; /* unused without OpenMP */
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t r = 0; r < m; r++) {
        float acc[KVS_GEMV_MAX_N];
        const void *wr = (const char *)W + (size_t)r * wrow;
#if KVS_CPU_HAVE_NEON
#if KVS_CPU_HAVE_NEON_EXT
        if (xq) {
            kvs_cpu_dot_rows_q8_dotprod(wr, xq, xq + n * k, xsc, k, n, acc);
        } else if (xh) {
            kvs_cpu_dot_rows_f16_fml(wr, xh, k, n, acc);
        } else
#endif
        if (neon_f) {
            kvs_cpu_dot_rows_neon(wr, dt, x, k, n, acc);
        } else
#endif
        if (quant) {
            qdot(wr, dt, x, k, n, acc);
        } else
#if KVS_CPU_HAVE_AVX512
        if (fast) {
            kvs_cpu_dot_rows_avx512(wr, dt, x, k, n, acc);
        } else if (isa == KVS_ISA_AVX2) {
            kvs_cpu_dot_rows_avx2(wr, dt, x, k, n, acc);
        } else
#endif
        {
            switch (dt) {
            case KVS_F32: dot_rows_f32(wr, x, k, n, acc); break;
            case KVS_F16: dot_rows_f16(wr, x, k, n, acc); break;
            default: dot_rows_bf16(wr, x, k, n, acc); break;
            }
        }
        for (int64_t i = 0; i < n; i++) y[i * m + r] = a->accumulate ? y[i * m + r] + acc[i] : acc[i];
    }
}

/* Block-type W on 8-bit activations (matmul.h; n <= KVS_Q8_MAX_N): x quantized once into scratch,
 * then each W row (rows split over the threads) dotted with every group of up to 4 x rows, so a W
 * row is read from memory once and stays in L1 while the quantized x rows stream from the caches.
 * Returns 0 (nothing done) without scratch memory. */
static int matmul_q8(kvs_device *dev, const kvs_matmul_args *a, kvs_cpu_q8dot_fn q8dot) {
    const int64_t m = a->m, k = a->k, n = a->n;
    const kvs_dtype dt = a->W->dtype;
    void *scratch = kvs_cpu_scratch(dev, kvs_cpu_q8_bytes(k, n));
    if (!scratch) return 0;
    kvs_q8_rows xq;
    kvs_cpu_q8_quantize(dt, kvs_tensor_host_ptr(a->x), k, n, scratch, &xq);
    const int64_t ba = kvs_dtype_block(dt) == 256 ? 256 : 32;
    const uint8_t *W = kvs_tensor_host_ptr(a->W);
    float *y = kvs_tensor_host_ptr(a->y);
    const size_t wrow = kvs_dtype_bytes(dt, k);
    int nt = kvs_cpu_nt(dev, (double)m * (double)k * (double)n);
    (void)nt; /* unused without OpenMP */
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t r = 0; r < m; r++) {
        for (int64_t i0 = 0; i0 < n; i0 += KVS_GEMV_MAX_N) {
            const int64_t nn = n - i0 < KVS_GEMV_MAX_N ? n - i0 : KVS_GEMV_MAX_N;
            const kvs_q8_rows xr = {.q = xq.q + i0 * k, .d = xq.d + i0 * (k / ba), .s = xq.s ? xq.s + i0 * (k / 32) : NULL,
                                    .bs = xq.bs + i0 * (k / 16), .k = k};
            float acc[KVS_GEMV_MAX_N];
            q8dot(W + (size_t)r * wrow, dt, &xr, nn, acc);
            for (int64_t i = 0; i < nn; i++) {
                float *yi = y + (i0 + i) * m + r;
                *yi = a->accumulate ? *yi + acc[i] : acc[i];
            }
        }
    }
    return 1;
}

/* ---- own GEMM (AVX-512 or AVX2 tiles; used when the BLAS has no AVX-512 kernels for this CPU) -- */

#define MM_RB 256  /* W rows per thread block */
#define MM_KC 256 /* depth per pass */
#define MM_NB 128 /* x rows per block */


/* Per thread: Wp [MM_RB][MM_KC] packed W chunk, Ct [MM_RB][MM_NB] transposed y block. Shared:
 * xP [np/32][k][32]: x transposed in panels of 32 rows (zero-padded to np = n rounded up to 32), so
 * the kernel streams B contiguously (a power-of-two row stride would alias in L1). */
typedef void (*mm_kernel_fn)(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C,
                             int64_t ldc, int load_c);

static kvs_status matmul_own(kvs_device *dev, const kvs_matmul_args *a, int isa) {
#if KVS_CPU_HAVE_AVX512
    const mm_kernel_fn tile = isa == KVS_ISA_AVX2 ? kvs_cpu_mm_kernel_8x32_avx2 : kvs_cpu_mm_kernel_8x32_avx512;
    const int64_t m = a->m, k = a->k, n = a->n;
    const int64_t np = (n + 31) & ~(int64_t)31;
    const float *x = kvs_tensor_host_ptr(a->x);
    float *y = kvs_tensor_host_ptr(a->y);
    const void *W = kvs_tensor_host_ptr(a->W);
    const kvs_dtype dt = a->W->dtype;
    const size_t wrow = kvs_dtype_bytes(dt, k);
    const int64_t n_rb = (m + MM_RB - 1) / MM_RB;
    const int qblk = kvs_dtype_block(dt);
    const size_t qbytes = kvs_dtype_bytes(dt, qblk);
    kvs_cpu_qdecode_fn qdecode;
    kvs_cpu_quant_kernels(dev, KVS_OP_matmul, NULL, &qdecode);
    int nt = kvs_cpu_nt(dev, 1e9);
    (void)nt; /* unused without OpenMP */
    if (nt > n_rb) nt = (int)n_rb;
    if (nt < 1) nt = 1;
    const size_t per = (size_t)MM_RB * MM_KC + (size_t)MM_RB * MM_NB + (size_t)MM_RB + 32; /* Wp, Ct, row */
    /* the device's grow-only scratch: a malloc per call cost ~10% of a small diffusion step */
    float *buf = kvs_cpu_scratch(dev, ((size_t)k * (size_t)np + (size_t)nt * per) * sizeof(float));
    if (!buf) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_matmul (cpu): cannot allocate GEMM scratch");
    float *xT = buf;
    KVS_OMP(parallel num_threads(nt))
    {
        /* x [n][k] -> xP [np/32][k][32], zero beyond n */
        KVS_OMP(for schedule(static))
        for (int64_t p = 0; p < np / 32; p++) {
            float *panel = xT + p * k * 32;
            for (int64_t ii = 0; ii < 32; ii++) {
                int64_t i = p * 32 + ii;
                if (i < n)
                    for (int64_t c = 0; c < k; c++) panel[c * 32 + ii] = x[i * k + c];
                else
                    for (int64_t c = 0; c < k; c++) panel[c * 32 + ii] = 0.0f;
            }
        }
        float *Wp = buf + (size_t)k * (size_t)np + (size_t)kvs_omp_tid() * per;
        float *Ct = Wp + (size_t)MM_RB * MM_KC;
        float *row = Ct + (size_t)MM_RB * MM_NB;
        KVS_OMP(for schedule(dynamic, 1))
        for (int64_t rb = 0; rb < n_rb; rb++) {
            const int64_t r0 = rb * MM_RB, nr = m - r0 < MM_RB ? m - r0 : MM_RB;
            const int64_t nr8 = (nr + 7) & ~(int64_t)7; /* rows the 8-row tiles cover */
            for (int64_t i0 = 0; i0 < np; i0 += MM_NB) {
                const int64_t ni = np - i0 < MM_NB ? np - i0 : MM_NB;
                for (int64_t c0 = 0; c0 < k; c0 += MM_KC) {
                    const int64_t kc = k - c0 < MM_KC ? k - c0 : MM_KC;
                    /* pack W rows [r0, r0+nr) x columns [c0, c0+kc) as f32, zero rows to nr8 */
                    for (int64_t r = 0; r < nr8; r++) {
                        float *dst = Wp + r * MM_KC;
                        if (r >= nr) {
                            memset(dst, 0, (size_t)kc * sizeof(float));
                        } else if (dt == KVS_F32) {
                            memcpy(dst, (const float *)W + (r0 + r) * k + c0, (size_t)kc * sizeof(float));
                        } else if (qblk > 1) {
                            /* c0 is a multiple of 256, kc of the block: decode the blocks of this chunk */
                            qdecode(dt, (const uint8_t *)W + (size_t)(r0 + r) * wrow + (size_t)(c0 / qblk) * qbytes, kc,
                                    dst);
                        } else if (dt == KVS_F16) {
                            kvs_cpu_h2f_row_f16c((const uint16_t *)W + (r0 + r) * k + c0, dst, kc);
                        } else {
                            row_bf16_to_f32((const uint16_t *)W + (r0 + r) * k + c0, dst, kc);
                        }
                    }
                    for (int64_t ib = 0; ib < ni; ib += 32)
                        for (int64_t rr = 0; rr < nr8; rr += 8)
                            tile(Wp + rr * MM_KC, MM_KC, xT + ((i0 + ib) / 32) * k * 32 + c0 * 32, 32, kc,
                                 Ct + rr * MM_NB + ib, MM_NB, c0 > 0);
                }
                /* y[i][r0 + r] (+)= Ct[r][i - i0] */
                const int64_t iend = i0 + ni < n ? i0 + ni : n;
                for (int64_t i = i0; i < iend; i++) {
                    float *yr = y + i * m + r0;
                    for (int64_t r = 0; r < nr; r++) row[r] = Ct[r * MM_NB + (i - i0)];
                    if (a->accumulate)
                        for (int64_t r = 0; r < nr; r++) yr[r] += row[r];
                    else
                        memcpy(yr, row, (size_t)nr * sizeof(float));
                }
            }
        }
    }
    return KVS_OK;
#else
    (void)dev;
    (void)a;
    (void)isa;
    return kvs_error(KVS_ERR_INTERNAL, "kvs_matmul (cpu): own GEMM not built");
#endif
}

/* Larger n: y = x . W^T through cblas_sgemm. The threads split the rows of W (the columns of y)
 * and each calls a single-threaded SGEMM on its block, so OpenBLAS's own thread pool never competes
 * with OpenMP's for the cores. Non-f32 W is converted per thread, a panel of rows at a time, into
 * f32 scratch, then multiplied; panels of ~2 MiB keep the conversion amortised over the n rows. */
kvs_status kvs_cpu_matmul(kvs_device *dev, const kvs_matmul_args *a) {
    const int64_t m = a->m, k = a->k, n = a->n;
    if (kvs_dtype_is_quant(a->W->dtype) && n <= (kvs_dtype_block(a->W->dtype) == 256 ? KVS_Q8_MAX_N : KVS_Q8_MAX_N_32)) {
        kvs_cpu_q8dot_fn q8 = kvs_cpu_q8_kernel(dev, KVS_OP_matmul, a->W->dtype);
        if (q8 && matmul_q8(dev, a, q8)) return KVS_OK;
    }
    if (n <= KVS_GEMV_MAX_N) {
        matmul_small_n(dev, a);
        return KVS_OK;
    }
    /* the own GEMM: variants avx512 and avx2, or automatically (AVX-512 tiles) when the BLAS lacks
     * AVX-512 kernels for this AVX-512 CPU */
    const int variant = kvs_device_variant(dev, KVS_OP_matmul);
    const int vf = variant & ~KVS_CPU_V_Q8; /* avx512-vnni, avx2-q8: their ISA's own GEMM */
    if (variant ? vf == KVS_CPU_V_AVX512 || vf == KVS_CPU_V_AVX2 : kvs_cpu_own_gemm())
        return matmul_own(dev, a, kvs_cpu_isa(dev, KVS_OP_matmul));
    const float *x = kvs_tensor_host_ptr(a->x);
    float *y = kvs_tensor_host_ptr(a->y);
    const float beta = a->accumulate ? 1.0f : 0.0f;
    const int isa = kvs_cpu_isa(dev, KVS_OP_matmul); /* f16 panels through F16C / FCVTL unless portable */
    (void)isa;
    const void *W = kvs_tensor_host_ptr(a->W);
    const kvs_dtype dt = a->W->dtype;
    int nt = kvs_cpu_nt(dev, (double)m * (double)k * (double)n / 64.0);
    (void)nt; /* unused without OpenMP */
    int64_t min_rows = 64;
    if ((int64_t)nt * min_rows > m) nt = (int)((m + min_rows - 1) / min_rows);
    if (nt < 1) nt = 1;
    kvs_cpu_qdecode_fn qdecode;
    kvs_cpu_quant_kernels(dev, KVS_OP_matmul, NULL, &qdecode);
    int64_t P = (int64_t)((2u << 20) / ((size_t)k * sizeof(float)));
    if (P < 16) P = 16;
    float *panels = NULL;
    if (dt != KVS_F32) {
        panels = kvs_cpu_scratch(dev, (size_t)nt * (size_t)P * (size_t)k * sizeof(float));
        if (!panels)
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_matmul (cpu): cannot allocate %d panels of %lld x %lld", nt,
                             (long long)P, (long long)k);
    }
    kvs_cpu_blas_threads(1);
    /* nt blocks of rows of W, a multiple of 16 each */
    const int64_t per = ((m + nt - 1) / nt + 15) & ~(int64_t)15;
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int blk = 0; blk < nt; blk++) {
        int tid = kvs_omp_tid();
        int64_t r0 = blk * per, r1 = r0 + per < m ? r0 + per : m;
        if (dt == KVS_F32) {
            if (r1 > r0)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)(r1 - r0), (int)k, 1.0f, x, (int)k,
                            (const float *)W + r0 * k, (int)k, beta, y + r0, (int)m);
        } else {
            float *Wp = panels + (size_t)tid * (size_t)P * (size_t)k;
            for (int64_t p0 = r0; p0 < r1; p0 += P) {
                int64_t pr = r1 - p0 < P ? r1 - p0 : P;
                for (int64_t r = 0; r < pr; r++) {
#if KVS_CPU_HAVE_AVX2
                    if (dt == KVS_F16 && isa != KVS_ISA_C) {
                        kvs_cpu_h2f_row_f16c((const uint16_t *)W + (p0 + r) * k, Wp + r * k, k);
                        continue;
                    }
#endif
#if KVS_CPU_HAVE_NEON
                    if (dt == KVS_F16 && isa == KVS_ISA_NEON) {
                        kvs_cpu_f16_to_f32_neon((const uint16_t *)W + (p0 + r) * k, Wp + r * k, k);
                        continue;
                    }
#endif
                    row_to_f32(W, dt, p0 + r, k, Wp + r * k, qdecode);
                }
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)pr, (int)k, 1.0f, x, (int)k, Wp,
                            (int)k, beta, y + p0, (int)m);
            }
        }
    }
    return KVS_OK;
}

/* ---- element-wise ---------------------------------------------------------------------------- */

KVS_CLONES
static void add_f32(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

kvs_status kvs_cpu_add(kvs_device *dev, const kvs_binary_args *oa) {
    const kvs_tensor *a = oa->a, *b = oa->b;
    kvs_tensor *y = oa->y;
    const int64_t n = oa->n;
    const float *pa = kvs_tensor_host_ptr(a), *pb = kvs_tensor_host_ptr(b);
    float *py = kvs_tensor_host_ptr(y);
    int nt = kvs_cpu_nt(dev, (double)n);
    (void)nt; /* unused without OpenMP */
    const int64_t chunk = 16384;
    int64_t nchunks = (n + chunk - 1) / chunk;
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t i0 = c * chunk, len = n - i0 < chunk ? n - i0 : chunk;
        add_f32(pa + i0, pb + i0, py + i0, len);
    }
    return KVS_OK;
}

KVS_CLONES
static void conv_f32_f16(const float *KVS_RESTRICT s, uint16_t *KVS_RESTRICT d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = kvs_f2h(s[i]);
}

KVS_CLONES
static void conv_f32_bf16(const float *KVS_RESTRICT s, uint16_t *KVS_RESTRICT d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = kvs_f2bf(s[i]);
}

KVS_CLONES
static void conv_f16_bf16(const uint16_t *KVS_RESTRICT s, uint16_t *KVS_RESTRICT d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = kvs_f2bf(kvs_h2f(s[i]));
}

KVS_CLONES
static void conv_bf16_f16(const uint16_t *KVS_RESTRICT s, uint16_t *KVS_RESTRICT d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = kvs_f2h(kvs_bf2f(s[i]));
}

static void convert_chunk(const void *src, kvs_dtype st, void *dst, kvs_dtype dt, int64_t i0, int64_t n) {
    if (st == dt) {
        size_t es = st == KVS_F32 ? 4 : 2;
        memcpy((char *)dst + (size_t)i0 * es, (const char *)src + (size_t)i0 * es, (size_t)n * es);
        return;
    }
    const float *sf = (const float *)src + i0;
    const uint16_t *sh = (const uint16_t *)src + i0;
    float *df = (float *)dst + i0;
    uint16_t *dh = (uint16_t *)dst + i0;
    if (st == KVS_F32 && dt == KVS_F16) conv_f32_f16(sf, dh, n);
    else if (st == KVS_F32 && dt == KVS_BF16) conv_f32_bf16(sf, dh, n);
    else if (st == KVS_F16 && dt == KVS_F32) row_f16_to_f32(sh, df, n);
    else if (st == KVS_BF16 && dt == KVS_F32) row_bf16_to_f32(sh, df, n);
    else if (st == KVS_F16 && dt == KVS_BF16) conv_f16_bf16(sh, dh, n);
    else conv_bf16_f16(sh, dh, n);
}

kvs_status kvs_cpu_copy(kvs_device *dev, const kvs_copy_args *oa) {
    const kvs_tensor *src = oa->src;
    kvs_tensor *dst = oa->dst;
    const int64_t n = oa->n;
    const void *s = kvs_tensor_host_ptr(src);
    void *d = kvs_tensor_host_ptr(dst);
    int nt = kvs_cpu_nt(dev, (double)n);
    (void)nt; /* unused without OpenMP */
    const int64_t chunk = 16384;
    int64_t nchunks = (n + chunk - 1) / chunk;
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t i0 = c * chunk, len = n - i0 < chunk ? n - i0 : chunk;
        convert_chunk(s, src->dtype, d, dst->dtype, i0, len);
    }
    return KVS_OK;
}

KVS_CLONES
static void rmsnorm_row(const float *x, const float *w, float *y, int64_t dim, float eps) {
    double acc[8] = {0}; /* 8 f64 lanes: a single accumulator would not vectorise */
    int64_t c0 = 0;
    for (; c0 + 8 <= dim; c0 += 8)
        for (int l = 0; l < 8; l++) acc[l] += (double)x[c0 + l] * (double)x[c0 + l];
    double ss = 0.0;
    for (; c0 < dim; c0++) ss += (double)x[c0] * (double)x[c0];
    for (int l = 0; l < 8; l++) ss += acc[l];
    float inv = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int64_t c = 0; c < dim; c++) y[c] = (x[c] * inv) * w[c];
}

kvs_status kvs_cpu_rmsnorm(kvs_device *dev, const kvs_rmsnorm_args *oa) {
    const kvs_tensor *x = oa->x, *w = oa->w;
    kvs_tensor *y = oa->y;
    const int64_t rows = oa->rows, dim = oa->dim;
    const float eps = oa->eps;
    const float *px = kvs_tensor_host_ptr(x), *pw = kvs_tensor_host_ptr(w);
    float *py = kvs_tensor_host_ptr(y);
    int nt = kvs_cpu_nt(dev, (double)rows * (double)dim);
    (void)nt; /* unused without OpenMP */
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t r = 0; r < rows; r++) rmsnorm_row(px + r * dim, pw, py + r * dim, dim, eps);
    return KVS_OK;
}

KVS_CLONES
static void swiglu_chunk(const float *g, const float *u, float *o, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] = g[i] / (1.0f + kvs_expf(-g[i])) * u[i];
}

kvs_status kvs_cpu_swiglu(kvs_device *dev, const kvs_binary_args *oa) {
    const kvs_tensor *gate = oa->a, *up = oa->b;
    kvs_tensor *out = oa->y;
    const int64_t n = oa->n;
    const float *g = kvs_tensor_host_ptr(gate), *u = kvs_tensor_host_ptr(up);
    float *o = kvs_tensor_host_ptr(out);
    int nt = kvs_cpu_nt(dev, (double)n * 8.0);
    (void)nt; /* unused without OpenMP */
    const int64_t chunk = 8192;
    int64_t nchunks = (n + chunk - 1) / chunk;
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t i0 = c * chunk, len = n - i0 < chunk ? n - i0 : chunk;
        swiglu_chunk(g + i0, u + i0, o + i0, len);
    }
    return KVS_OK;
}

KVS_CLONES
static void softmax_row(const float *x, float *y, int64_t n, float s) {
    float mx[16];
    for (int l = 0; l < 16; l++) mx[l] = -INFINITY;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) {
            float v = s * x[j + l];
            mx[l] = v > mx[l] ? v : mx[l];
        }
    float m = -INFINITY;
    for (; j < n; j++) {
        float v = s * x[j];
        m = v > m ? v : m;
    }
    for (int l = 0; l < 16; l++) m = mx[l] > m ? mx[l] : m;
    if (m == -INFINITY) { /* all -inf (or empty): weight 0 everywhere */
        for (j = 0; j < n; j++) y[j] = 0.0f;
        return;
    }
    float acc[16] = {0};
    for (j = 0; j + 16 <= n; j += 16)
        for (int l = 0; l < 16; l++) {
            float e = kvs_expf(s * x[j + l] - m);
            y[j + l] = e;
            acc[l] += e;
        }
    double sum = 0.0;
    for (; j < n; j++) {
        float e = kvs_expf(s * x[j] - m);
        y[j] = e;
        sum += e;
    }
    for (int l = 0; l < 16; l++) sum += acc[l];
    float inv = (float)(1.0 / sum);
    for (j = 0; j < n; j++) y[j] *= inv;
}

kvs_status kvs_cpu_softmax(kvs_device *dev, const kvs_softmax_args *oa) {
    const kvs_tensor *x = oa->x;
    kvs_tensor *y = oa->y;
    const int64_t rows = oa->rows, n = oa->n;
    const float scale = oa->scale;
    const float *px = kvs_tensor_host_ptr(x);
    float *py = kvs_tensor_host_ptr(y);
    int nt = kvs_cpu_nt(dev, (double)rows * (double)n * 8.0);
    (void)nt; /* unused without OpenMP */
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t r = 0; r < rows; r++) softmax_row(px + r * n, py + r * n, n, scale);
    return KVS_OK;
}

kvs_status kvs_cpu_embedding(kvs_device *dev, const kvs_embedding_args *oa) {
    const kvs_tensor *table = oa->table;
    kvs_tensor *out = oa->out;
    const int32_t *ids = oa->ids;
    const int64_t n = oa->n, dim = oa->dim;
    const void *t = kvs_tensor_host_ptr(table);
    float *o = kvs_tensor_host_ptr(out);
    int nt = kvs_cpu_nt(dev, (double)n * (double)dim);
    (void)nt; /* unused without OpenMP */
    kvs_cpu_qdecode_fn qdecode;
    kvs_cpu_quant_kernels(dev, KVS_OP_embedding, NULL, &qdecode);
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t i = 0; i < n; i++) row_to_f32(t, table->dtype, ids[i], dim, o + i * dim, qdecode);
    return KVS_OK;
}

/* ---- rope ---------------------------------------------------------------------------------- */

/* Rotates one vector of head_dim values (f32 in place) by the per-pair cos/sin tables. */
static void rope_apply_f32(float *x, const float *cs, const float *sn, int n_rot, kvs_rope_mode mode) {
    int half = n_rot / 2;
    if (mode == KVS_ROPE_ADJACENT) {
        for (int i = 0; i < half; i++) {
            float a = x[2 * i], b = x[2 * i + 1];
            x[2 * i] = a * cs[i] - b * sn[i];
            x[2 * i + 1] = a * sn[i] + b * cs[i];
        }
    } else {
        for (int i = 0; i < half; i++) {
            float a = x[i], b = x[i + half];
            x[i] = a * cs[i] - b * sn[i];
            x[i + half] = a * sn[i] + b * cs[i];
        }
    }
}

/* cos/sin of pos * freq_scale * inv_freq[i], angles and trigonometry in f64, rounded to f32. */
static void rope_table(double pos, const kvs_rope_params *p, const double *inv_freq, float *cs, float *sn) {
    int half = p->n_rot / 2;
    for (int i = 0; i < half; i++) {
        double th = pos * (double)p->freq_scale * inv_freq[i];
        cs[i] = (float)cos(th);
        sn[i] = (float)sin(th);
    }
}

kvs_status kvs_cpu_rope(kvs_device *dev, const kvs_rope_args *a) {
    const int n_rot = a->p.n_rot, half = n_rot / 2;
    const int64_t hd = a->head_dim;
    /* per-thread: inv_freq (f64) shared, then cos, sin, f32 staging of one vector */
    double *inv_freq = malloc((size_t)half * sizeof(double));
    int nt = kvs_cpu_nt(dev, (double)a->n_vec * (double)hd * 4.0);
    (void)nt; /* unused without OpenMP */
    size_t per = (size_t)(2 * half + hd);
    float *work = malloc((size_t)nt * per * sizeof(float));
    if (!inv_freq || !work) {
        free(inv_freq);
        free(work);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_rope (cpu): out of host memory");
    }
    for (int i = 0; i < half; i++) inv_freq[i] = pow((double)a->p.theta_base, -2.0 * i / (double)n_rot);
    const int32_t *pos = kvs_i32(a->pos);
    const int is_f16 = a->x->dtype == KVS_F16;
    float *xf = is_f16 ? NULL : kvs_tensor_host_ptr(a->x);
    uint16_t *xh = is_f16 ? kvs_tensor_host_ptr(a->x) : NULL;
    /* vectors to visit: rope: all n_vec; rope_shift: rows [0, n_rows) of every head */
    const int64_t stride = a->vec_stride_rows ? a->vec_stride_rows : a->n_vec;
    const int64_t nrow = a->vec_stride_rows ? a->n_rows : a->n_vec;
    const int64_t nblk = a->n_vec / stride;
    const int64_t total = nblk * nrow;
    KVS_OMP(parallel num_threads(nt))
    {
        float *cs = work + (size_t)kvs_omp_tid() * per, *sn = cs + half, *tmp = sn + half;
        int64_t last = INT64_MIN;
        KVS_OMP(for schedule(static))
        for (int64_t t = 0; t < total; t++) {
            int64_t r = (t / nrow) * stride + (t % nrow);
            int64_t pv = pos[r / a->pos_div];
            if (pv != last) {
                rope_table((double)pv, &a->p, inv_freq, cs, sn);
                last = pv;
            }
            if (is_f16) {
                uint16_t *v = xh + r * hd;
                for (int64_t c = 0; c < n_rot; c++) tmp[c] = kvs_h2f(v[c]);
                rope_apply_f32(tmp, cs, sn, n_rot, a->p.mode);
                for (int64_t c = 0; c < n_rot; c++) v[c] = kvs_f2h(tmp[c]);
            } else {
                rope_apply_f32(xf + r * hd, cs, sn, n_rot, a->p.mode);
            }
        }
    }
    free(inv_freq);
    free(work);
    return KVS_OK;
}
