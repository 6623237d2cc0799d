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


/* What a GEMV row needs: the operands and the kernel choices made once per call. */
typedef struct gemv_ctx {
    const kvs_matmul_args *a;
    const void *W;
    const float *x;
    float *y;
    size_t wrow;
    int isa, fast, quant;
    kvs_cpu_qdot_fn qdot;
#if KVS_CPU_HAVE_NEON
    int neon_f;
    const int8_t *xq;
    const float *xsc;
    const uint16_t *xh;
#endif
} gemv_ctx;

/* y[i][r] (+)= W row r . x_i for every x row i */
static void gemv_row(void *cv, int tid, int64_t r) {
    const gemv_ctx *c = cv;
    const kvs_matmul_args *a = c->a;
    const int64_t m = a->m, k = a->k, n = a->n;
    const kvs_dtype dt = a->W->dtype;
    const float *x = c->x;
    float *y = c->y;
    (void)tid;
    float acc[KVS_GEMV_MAX_N];
    const void *wr = (const char *)c->W + (size_t)r * c->wrow;
#if KVS_CPU_HAVE_NEON
#if KVS_CPU_HAVE_NEON_EXT
    if (c->xq) {
        kvs_cpu_dot_rows_q8_dotprod(wr, c->xq, c->xq + n * k, c->xsc, k, n, acc);
    } else if (c->xh) {
        kvs_cpu_dot_rows_f16_fml(wr, c->xh, k, n, acc);
    } else
#endif
    if (c->neon_f) {
        kvs_cpu_dot_rows_neon(wr, dt, x, k, n, acc);
    } else
#endif
    if (c->quant) {
        c->qdot(wr, dt, x, k, n, acc);
    } else
#if KVS_CPU_HAVE_AVX512
    if (c->fast) {
        kvs_cpu_dot_rows_avx512(wr, dt, x, k, n, acc);
    } else if (c->isa == KVS_ISA_AVX2) {
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

static void matmul_small_n(kvs_device *dev, const kvs_matmul_args *a) {
    const int64_t m = a->m, k = a->k, n = a->n;
    const kvs_dtype dt = a->W->dtype;
    gemv_ctx c = {.a = a, .W = kvs_tensor_host_ptr(a->W), .x = kvs_tensor_host_ptr(a->x), .y = kvs_tensor_host_ptr(a->y),
                  .wrow = kvs_dtype_bytes(dt, k)};
    /* block types (q8_0 included): the variant's quant kernels (matmul.h, ops_quant.c: AVX-512,
     * AVX2, NEON or portable); float weights: the AVX-512 GEMV where k % 16 == 0, the AVX2 one (any
     * k), the NEON one where k % 16 == 0, else the portable one. aarch64 extensions on top (the
     * variant's, or the CPU's): q8_0 by SDOT on x split into two int8 planes, f16 by FMLAL on x
     * rounded to f16 (arm/matmul_neon.c), x prepared once per call in scratch. */
    c.isa = kvs_cpu_isa(dev, KVS_OP_matmul);
    c.fast = c.isa == KVS_ISA_AVX512 && k % 16 == 0;
    c.quant = kvs_dtype_is_quant(dt);
    if (c.quant) kvs_cpu_quant_kernels(dev, KVS_OP_matmul, &c.qdot, NULL);
#if KVS_CPU_HAVE_NEON
    const int neon = c.isa == KVS_ISA_NEON ? kvs_cpu_use_neon(dev, KVS_OP_matmul) : 0;
    c.neon_f = (neon & KVS_ARM_NEON) && !c.quant && k % 16 == 0; /* float weights */
    if (dt == KVS_Q8_0 && (neon & KVS_ARM_DOTPROD)) {
        int8_t *xq = kvs_cpu_scratch(dev, (size_t)(n * k) * 2 + (size_t)(n * (k / KVS_Q8_BLOCK)) * sizeof(float));
        float *xsc = xq ? (float *)(xq + 2 * n * k) : NULL;
        if (xq && !kvs_cpu_q8_split_x_neon(c.x, k, n, xq, xq + n * k, xsc)) xq = NULL;
        c.xq = xq;
        c.xsc = xsc;
    } else if (c.neon_f && dt == KVS_F16 && (neon & KVS_ARM_FP16FML)) {
        uint16_t *xh = kvs_cpu_scratch(dev, (size_t)(n * k) * sizeof(uint16_t));
        if (xh && !kvs_cpu_f16_x_neon(c.x, n * k, xh)) xh = NULL;
        c.xh = xh;
    }
    /* (no scratch, or x outside what the extension's kernel represents: the plain NEON kernels) */
#endif
    kvs_par_for(kvs_cpu_nt(dev, (double)m * (double)k * (double)n), m, 0, gemv_row, &c);
}

/* Block-type W on 8-bit activations (matmul.h; n <= KVS_Q8_MAX_N): x quantized once into scratch,
 * then each W row (rows split over the threads) dotted with every group of up to 4 x rows, so a W
 * row is read from memory once and stays in L1 while the quantized x rows stream from the caches.
 * Returns 0 (nothing done) without scratch memory. */
typedef struct q8mm_ctx {
    const kvs_matmul_args *a;
    kvs_cpu_q8dot_fn q8dot;
    kvs_q8_rows xq;
    int64_t ba;
    const uint8_t *W;
    float *y;
    size_t wrow;
} q8mm_ctx;

/* y[i][r] (+)= W row r . x_i for every x row i, KVS_GEMV_MAX_N x rows a call */
static void q8mm_row(void *cv, int tid, int64_t r) {
    const q8mm_ctx *c = cv;
    const kvs_matmul_args *a = c->a;
    const int64_t m = a->m, k = a->k, n = a->n, ba = c->ba;
    const kvs_q8_rows *xq = &c->xq;
    (void)tid;
    for (int64_t i0 = 0; i0 < n; i0 += KVS_GEMV_MAX_N) {
        const int64_t nn = n - i0 < KVS_GEMV_MAX_N ? n - i0 : KVS_GEMV_MAX_N;
        const kvs_q8_rows xr = {.q = xq->q + i0 * k, .d = xq->d + i0 * (k / ba), .s = xq->s ? xq->s + i0 * (k / 32) : NULL,
                                .bs = xq->bs + i0 * (k / 16), .k = k};
        float acc[KVS_GEMV_MAX_N];
        c->q8dot(c->W + (size_t)r * c->wrow, a->W->dtype, &xr, nn, acc);
        for (int64_t i = 0; i < nn; i++) {
            float *yi = c->y + (i0 + i) * m + r;
            *yi = a->accumulate ? *yi + acc[i] : acc[i];
        }
    }
}

static int matmul_q8(kvs_device *dev, const kvs_matmul_args *a, kvs_cpu_q8dot_fn q8dot) {
    const int64_t m = a->m, k = a->k, n = a->n;
    const kvs_dtype dt = a->W->dtype;
    void *scratch = kvs_cpu_scratch(dev, kvs_cpu_q8_bytes(k, n));
    if (!scratch) return 0;
    q8mm_ctx c = {.a = a, .q8dot = q8dot, .ba = kvs_dtype_block(dt) == 256 ? 256 : 32, .W = kvs_tensor_host_ptr(a->W),
                  .y = kvs_tensor_host_ptr(a->y), .wrow = kvs_dtype_bytes(dt, k)};
    kvs_cpu_q8_quantize(dt, kvs_tensor_host_ptr(a->x), k, n, scratch, &c.xq);
    kvs_par_for(kvs_cpu_nt(dev, (double)m * (double)k * (double)n), m, 0, q8mm_row, &c);
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

#if KVS_CPU_HAVE_AVX512
typedef struct mmown_ctx {
    const kvs_matmul_args *a;
    mm_kernel_fn tile;
    kvs_cpu_qdecode_fn qdecode;
    const float *x;
    float *y, *buf;
    const void *W;
    size_t wrow, qbytes, per;
    int64_t np, n_rb;
    int qblk;
} mmown_ctx;

/* x [n][k] -> xP [np/32][k][32] panel p, zero beyond n (the small GEMM's register-transposing pack;
 * both ISAs of the own GEMM have AVX2) */
static void mmown_pack_x(void *cv, int tid, int64_t p) {
    const mmown_ctx *c = cv;
    (void)tid;
    kvs_cpu_mm_pack_x32_avx2(c->x, c->a->n, c->a->k, p * 32, c->buf + p * c->a->k * 32);
}

/* W rows [rb * MM_RB, +MM_RB) against every x row, in thread tid's Wp / Ct / row scratch */
static void mmown_block(void *cv, int tid, int64_t rb) {
    const mmown_ctx *c = cv;
    const kvs_matmul_args *a = c->a;
    const int64_t m = a->m, k = a->k, n = a->n, np = c->np;
    const kvs_dtype dt = a->W->dtype;
    const void *W = c->W;
    const float *xT = c->buf;
    float *y = c->y;
    float *Wp = c->buf + (size_t)k * (size_t)np + (size_t)tid * c->per;
    float *Ct = Wp + (size_t)MM_RB * MM_KC;
    float *row = Ct + (size_t)MM_RB * MM_NB;
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
                } else if (c->qblk > 1) {
                    /* c0 is a multiple of 256, kc of the block: decode the blocks of this chunk */
                    c->qdecode(dt, (const uint8_t *)W + (size_t)(r0 + r) * c->wrow + (size_t)(c0 / c->qblk) * c->qbytes,
                               kc, dst);
                } else if (dt == KVS_F16) {
                    kvs_cpu_h2f_row_f16c((const uint16_t *)W + (r0 + r) * k + c0, dst, kc);
                } else {
                    row_bf16_to_f32((const uint16_t *)W + (r0 + r) * k + c0, dst, kc);
                }
            }
            for (int64_t ib = 0; ib < ni; ib += 32)
                for (int64_t rr = 0; rr < nr8; rr += 8)
                    c->tile(Wp + rr * MM_KC, MM_KC, xT + ((i0 + ib) / 32) * k * 32 + c0 * 32, 32, kc,
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

/* one thread of the team: x into panels (shared, then a barrier), then blocks of W rows */
static void mmown_thread(void *cv, int tid, int team) {
    mmown_ctx *c = cv;
    kvs_team_for(tid, team, c->np / 32, 0, mmown_pack_x, c);
    kvs_team_for(tid, team, c->n_rb, 1, mmown_block, c);
}
#endif

static kvs_status matmul_own(kvs_device *dev, const kvs_matmul_args *a, int isa) {
#if KVS_CPU_HAVE_AVX512
    const int64_t m = a->m, k = a->k, n = a->n;
    const kvs_dtype dt = a->W->dtype;
    mmown_ctx c = {.a = a,
                   .tile = isa == KVS_ISA_AVX2 ? kvs_cpu_mm_kernel_8x32_avx2 : kvs_cpu_mm_kernel_8x32_avx512,
                   .x = kvs_tensor_host_ptr(a->x),
                   .y = kvs_tensor_host_ptr(a->y),
                   .W = kvs_tensor_host_ptr(a->W),
                   .wrow = kvs_dtype_bytes(dt, k),
                   .np = (n + 31) & ~(int64_t)31,
                   .n_rb = (m + MM_RB - 1) / MM_RB,
                   .qblk = kvs_dtype_block(dt)};
    c.qbytes = kvs_dtype_bytes(dt, c.qblk);
    kvs_cpu_quant_kernels(dev, KVS_OP_matmul, NULL, &c.qdecode);
    int nt = kvs_cpu_nt(dev, 1e9);
    if (nt > c.n_rb) nt = (int)c.n_rb;
    if (nt < 1) nt = 1;
    c.per = (size_t)MM_RB * MM_KC + (size_t)MM_RB * MM_NB + (size_t)MM_RB + 32; /* Wp, Ct, row */
    /* the device's grow-only scratch: a malloc per call cost ~10% of a small diffusion step */
    c.buf = kvs_cpu_scratch(dev, ((size_t)k * (size_t)c.np + (size_t)nt * c.per) * sizeof(float));
    if (!c.buf) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_matmul (cpu): cannot allocate GEMM scratch");
    kvs_par_team(nt, mmown_thread, &c);
    return KVS_OK;
#else
    (void)dev;
    (void)a;
    (void)isa;
    return kvs_error(KVS_ERR_INTERNAL, "kvs_matmul (cpu): own GEMM not built");
#endif
}

/* ---- small f32 GEMM (k <= MM_KC, W up to MM_DIRECT_W floats; issue 16) ----------------------
 * A diffusion step of a small model multiplies a few dozen x rows (the rows a cache schedule
 * recomputes) by weights of 64-256 columns. OpenBLAS packs W on every call there (sgemm_incopy:
 * 8% of an elastic step of stories260K-llada, nearly as long as its product kernel) and switches to
 * its "small matrix" kernels below m * n = 1200, whose sums run in another order than its GEMM
 * kernel's, so a row's result depended on how many rows were computed. Here W is read in place by
 * the own GEMM's 8x32 tile (8 W rows x 32 x rows, one FMA chain per output over t = 0 .. k-1 from
 * zero), x is transposed into panels of 32 rows (the threads split the panels: one parallel loop,
 * no barrier inside a call), and each tile is transposed into y in registers. Every y[i][r] is then
 * fma(x[i][k-1], W[r][k-1], ... fma(x[i][0], W[r][0], 0)): OpenBLAS's GEMM-kernel value, bit for
 * bit (checked against cblas_sgemm at 261 x {32, 64, 172} x {64, 172}), whatever n is. */
#define MM_DIRECT_W (256 * 1024)

#if KVS_CPU_HAVE_AVX512
typedef struct mmdir_ctx {
    const kvs_matmul_args *a;
    mm_kernel_fn tile;
    void (*tile16)(const float *A, int64_t lda, const float *B, int64_t ldb, int64_t K, float *C, int64_t ldc);
    const float *x, *W;
    int64_t wide;    /* last x rows above which the 32-row tile runs: 16 (AVX-512: a 16 + 8 split
                      * issues as many FMAs as the 32-row tile), 24 (AVX2: 8-column FMAs) */
    const float *Wt; /* the last m % 8 W rows zero-padded to [8][k] (scratch), or NULL */
    float *y, *xP;   /* xP: [np/32][k][32] */
    int64_t np;
} mmdir_ctx;

/* x panel p (rows [32 p, 32 p + 32)): packed into xP, then against every block of 8 W rows; the
 * panels are the parallel loop's iterations, so a call has no barrier but the loop's end */
static void mmdir_panel(void *cv, int tid, int64_t p) {
    const mmdir_ctx *c = cv;
    const kvs_matmul_args *a = c->a;
    const int64_t m = a->m, k = a->k, n = a->n, ni = n - p * 32 < 32 ? n - p * 32 : 32;
    float *B = c->xP + p * k * 32;
    float Ct[8 * 32];
    (void)tid;
    kvs_cpu_mm_pack_x32_avx2(c->x, n, k, p * 32, B);
    for (int64_t r0 = 0; r0 < m; r0 += 8) {
        const int64_t nr = m - r0 < 8 ? m - r0 : 8;
        const float *A = nr == 8 ? c->W + r0 * k : c->Wt;
        if (ni > c->wide) {
            c->tile(A, k, B, 32, k, Ct, 32, 0);
        } else { /* the last x rows: 16 and / or 8 columns (a step recomputing ~20 rows wasted a third) */
            int64_t c0 = 0;
            if (ni > 8) {
                c->tile16(A, k, B, 32, k, Ct, 32);
                c0 = 16;
            }
            if (ni > c0) kvs_cpu_mm_kernel_8x8_avx2(A, k, B + c0, 32, k, Ct + c0, 32);
        }
        kvs_cpu_mm_store_t8x32_avx2(Ct, 32, c->y + p * 32 * m + r0, m, ni, nr, a->accumulate);
    }
}
#endif

/* Whether the small GEMM takes this product (f32 W of at most MM_KC columns and MM_DIRECT_W values,
 * more than KVS_GEMV_MAX_N x rows, an AVX-512 or AVX2 ISA) and, if so, runs it: 1, or 0 (nothing
 * done). */
static int matmul_direct(kvs_device *dev, const kvs_matmul_args *a, kvs_status *st) {
#if KVS_CPU_HAVE_AVX512
    const int64_t m = a->m, k = a->k, n = a->n;
    const int isa = kvs_cpu_isa(dev, KVS_OP_matmul);
    if (a->W->dtype != KVS_F32 || k > MM_KC || m * k > MM_DIRECT_W || n <= KVS_GEMV_MAX_N ||
        (isa != KVS_ISA_AVX512 && isa != KVS_ISA_AVX2))
        return 0;
    mmdir_ctx c = {.a = a,
                   .tile = isa == KVS_ISA_AVX2 ? kvs_cpu_mm_kernel_8x32_avx2 : kvs_cpu_mm_kernel_8x32_avx512,
                   .tile16 = isa == KVS_ISA_AVX2 ? kvs_cpu_mm_kernel_8x16_avx2 : kvs_cpu_mm_kernel_8x16_avx512,
                   .x = kvs_tensor_host_ptr(a->x),
                   .W = kvs_tensor_host_ptr(a->W),
                   .wide = isa == KVS_ISA_AVX2 ? 24 : 16,
                   .y = kvs_tensor_host_ptr(a->y),
                   .np = (n + 31) & ~(int64_t)31};
    const int64_t tail = m % 8;
    float *buf = kvs_cpu_scratch(dev, ((size_t)k * (size_t)c.np + (size_t)(8 * k) + 16) * sizeof(float));
    if (!buf) {
        *st = kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_matmul (cpu): cannot allocate GEMM scratch");
        return 1;
    }
    c.xP = buf;
    if (tail) {
        float *wt = buf + (size_t)k * (size_t)c.np;
        memcpy(wt, c.W + (m - tail) * k, (size_t)(tail * k) * sizeof(float));
        memset(wt + tail * k, 0, (size_t)((8 - tail) * k) * sizeof(float));
        c.Wt = wt;
    }
    int nt = kvs_cpu_nt(dev, (double)m * (double)k * (double)n / 64.0);
    if (nt > c.np / 32) nt = (int)(c.np / 32);
    kvs_par_for(nt, c.np / 32, 0, mmdir_panel, &c);
    *st = KVS_OK;
    return 1;
#else
    (void)dev;
    (void)a;
    (void)st;
    return 0;
#endif
}

typedef struct blasmm_ctx {
    const kvs_matmul_args *a;
    const float *x;
    float *y, *panels;
    const void *W;
    kvs_cpu_qdecode_fn qdecode;
    int64_t per, P;
    float beta;
    int isa;
} blasmm_ctx;

/* block blk of W rows [blk * per, +per): one single-threaded SGEMM (f32 W), or W converted in
 * panels of P rows into thread tid's scratch, one SGEMM a panel */
static void blasmm_block(void *cv, int tid, int64_t blk) {
    const blasmm_ctx *c = cv;
    const kvs_matmul_args *a = c->a;
    const int64_t m = a->m, k = a->k, n = a->n, P = c->P;
    const kvs_dtype dt = a->W->dtype;
    const void *W = c->W;
    int64_t r0 = blk * c->per, r1 = r0 + c->per < m ? r0 + c->per : m;
    if (dt == KVS_F32) {
        if (r1 > r0)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)(r1 - r0), (int)k, 1.0f, c->x, (int)k,
                        (const float *)W + r0 * k, (int)k, c->beta, c->y + r0, (int)m);
        return;
    }
    float *Wp = c->panels + (size_t)tid * (size_t)P * (size_t)k;
    for (int64_t p0 = r0; p0 < r1; p0 += P) {
        int64_t pr = r1 - p0 < P ? r1 - p0 : P;
        for (int64_t r = 0; r < pr; r++) {
#if KVS_CPU_HAVE_AVX2
            if (dt == KVS_F16 && c->isa != KVS_ISA_C) {
                kvs_cpu_h2f_row_f16c((const uint16_t *)W + (p0 + r) * k, Wp + r * k, k);
                continue;
            }
#endif
#if KVS_CPU_HAVE_NEON
            if (dt == KVS_F16 && c->isa == KVS_ISA_NEON) {
                kvs_cpu_f16_to_f32_neon((const uint16_t *)W + (p0 + r) * k, Wp + r * k, k);
                continue;
            }
#endif
            row_to_f32(W, dt, p0 + r, k, Wp + r * k, c->qdecode);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)pr, (int)k, 1.0f, c->x, (int)k, Wp, (int)k,
                    c->beta, c->y + p0, (int)m);
    }
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
    kvs_status st;
    if (matmul_direct(dev, a, &st)) return st;
    /* the own GEMM: variants avx512 and avx2, or automatically (AVX-512 tiles) when the BLAS lacks
     * AVX-512 kernels for this AVX-512 CPU */
    const int variant = kvs_device_variant(dev, KVS_OP_matmul);
    const int vf = variant & ~KVS_CPU_V_Q8; /* avx512-vnni, avx2-q8: their ISA's own GEMM */
    if (variant ? vf == KVS_CPU_V_AVX512 || vf == KVS_CPU_V_AVX2 : kvs_cpu_own_gemm())
        return matmul_own(dev, a, kvs_cpu_isa(dev, KVS_OP_matmul));
    blasmm_ctx c = {.a = a,
                    .x = kvs_tensor_host_ptr(a->x),
                    .y = kvs_tensor_host_ptr(a->y),
                    .W = kvs_tensor_host_ptr(a->W),
                    .beta = a->accumulate ? 1.0f : 0.0f,
                    .isa = kvs_cpu_isa(dev, KVS_OP_matmul)}; /* f16 panels through F16C / FCVTL unless portable */
    const kvs_dtype dt = a->W->dtype;
    int nt = kvs_cpu_nt(dev, (double)m * (double)k * (double)n / 64.0);
    int64_t min_rows = 64;
    if ((int64_t)nt * min_rows > m) nt = (int)((m + min_rows - 1) / min_rows);
    if (nt < 1) nt = 1;
    kvs_cpu_quant_kernels(dev, KVS_OP_matmul, NULL, &c.qdecode);
    c.P = (int64_t)((2u << 20) / ((size_t)k * sizeof(float)));
    if (c.P < 16) c.P = 16;
    if (dt != KVS_F32) {
        c.panels = kvs_cpu_scratch(dev, (size_t)nt * (size_t)c.P * (size_t)k * sizeof(float));
        if (!c.panels)
            return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_matmul (cpu): cannot allocate %d panels of %lld x %lld", nt,
                             (long long)c.P, (long long)k);
    }
    kvs_cpu_blas_threads(1);
    /* nt blocks of rows of W, a multiple of 16 each */
    c.per = ((m + nt - 1) / nt + 15) & ~(int64_t)15;
    kvs_par_for(nt, nt, 0, blasmm_block, &c);
    return KVS_OK;
}

/* ---- element-wise ---------------------------------------------------------------------------- */

KVS_CLONES
static void add_f32(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* The element-wise ops' loops: n values in chunks of `chunk` (or rows of `dim`), inputs a and b,
 * output y. */
typedef struct ew_ctx {
    const void *a, *b;
    void *y;
    int64_t n, chunk, dim;
    kvs_dtype at, yt;
    float s; /* eps, scale */
    const int32_t *ids;
    kvs_cpu_qdecode_fn qdecode;
} ew_ctx;

static void add_chunk(void *cv, int tid, int64_t c) {
    const ew_ctx *e = cv;
    (void)tid;
    int64_t i0 = c * e->chunk, len = e->n - i0 < e->chunk ? e->n - i0 : e->chunk;
    add_f32((const float *)e->a + i0, (const float *)e->b + i0, (float *)e->y + i0, len);
}

kvs_status kvs_cpu_add(kvs_device *dev, const kvs_binary_args *oa) {
    const int64_t n = oa->n, chunk = 16384;
    ew_ctx e = {.a = kvs_tensor_host_ptr(oa->a), .b = kvs_tensor_host_ptr(oa->b), .y = kvs_tensor_host_ptr(oa->y),
                .n = n, .chunk = chunk};
    kvs_par_for(kvs_cpu_nt(dev, (double)n), (n + chunk - 1) / chunk, 0, add_chunk, &e);
    return KVS_OK;
}

kvs_status kvs_cpu_log_mass(kvs_device *dev, const kvs_binary_args *oa) {
    (void)dev;
    const float *m = kvs_tensor_host_ptr(oa->a), *l = kvs_tensor_host_ptr(oa->b);
    float *y = kvs_tensor_host_ptr(oa->y);
    for (int64_t i = 0; i < oa->n; i++) y[i] = l[i] == 0.0f ? -INFINITY : m[i] + logf(l[i]);
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

static void copy_chunk(void *cv, int tid, int64_t c) {
    const ew_ctx *e = cv;
    (void)tid;
    int64_t i0 = c * e->chunk, len = e->n - i0 < e->chunk ? e->n - i0 : e->chunk;
    convert_chunk(e->a, e->at, e->y, e->yt, i0, len);
}

kvs_status kvs_cpu_copy(kvs_device *dev, const kvs_copy_args *oa) {
    const int64_t n = oa->n, chunk = 16384;
    ew_ctx e = {.a = kvs_tensor_host_ptr(oa->src), .at = oa->src->dtype, .y = kvs_tensor_host_ptr(oa->dst),
                .yt = oa->dst->dtype, .n = n, .chunk = chunk};
    kvs_par_for(kvs_cpu_nt(dev, (double)n), (n + chunk - 1) / chunk, 0, copy_chunk, &e);
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

static void rmsnorm_one(void *cv, int tid, int64_t r) {
    const ew_ctx *e = cv;
    (void)tid;
    rmsnorm_row((const float *)e->a + r * e->dim, e->b, (float *)e->y + r * e->dim, e->dim, e->s);
}

kvs_status kvs_cpu_rmsnorm(kvs_device *dev, const kvs_rmsnorm_args *oa) {
    const int64_t rows = oa->rows, dim = oa->dim;
    ew_ctx e = {.a = kvs_tensor_host_ptr(oa->x), .b = kvs_tensor_host_ptr(oa->w), .y = kvs_tensor_host_ptr(oa->y),
                .dim = dim, .s = oa->eps};
    kvs_par_for(kvs_cpu_nt(dev, (double)rows * (double)dim), rows, 0, rmsnorm_one, &e);
    return KVS_OK;
}

KVS_CLONES
static void swiglu_chunk(const float *g, const float *u, float *o, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] = g[i] / (1.0f + kvs_expf(-g[i])) * u[i];
}

static void swiglu_one(void *cv, int tid, int64_t c) {
    const ew_ctx *e = cv;
    (void)tid;
    int64_t i0 = c * e->chunk, len = e->n - i0 < e->chunk ? e->n - i0 : e->chunk;
    swiglu_chunk((const float *)e->a + i0, (const float *)e->b + i0, (float *)e->y + i0, len);
}

kvs_status kvs_cpu_swiglu(kvs_device *dev, const kvs_binary_args *oa) {
    const int64_t n = oa->n, chunk = 8192;
    ew_ctx e = {.a = kvs_tensor_host_ptr(oa->a), .b = kvs_tensor_host_ptr(oa->b), .y = kvs_tensor_host_ptr(oa->y),
                .n = n, .chunk = chunk};
    kvs_par_for(kvs_cpu_nt(dev, (double)n * 8.0), (n + chunk - 1) / chunk, 0, swiglu_one, &e);
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

static void softmax_one(void *cv, int tid, int64_t r) {
    const ew_ctx *e = cv;
    (void)tid;
    softmax_row((const float *)e->a + r * e->dim, (float *)e->y + r * e->dim, e->dim, e->s);
}

kvs_status kvs_cpu_softmax(kvs_device *dev, const kvs_softmax_args *oa) {
    const int64_t rows = oa->rows, n = oa->n;
    ew_ctx e = {.a = kvs_tensor_host_ptr(oa->x), .y = kvs_tensor_host_ptr(oa->y), .dim = n, .s = oa->scale};
    kvs_par_for(kvs_cpu_nt(dev, (double)rows * (double)n * 8.0), rows, 0, softmax_one, &e);
    return KVS_OK;
}

static void embedding_one(void *cv, int tid, int64_t i) {
    const ew_ctx *e = cv;
    (void)tid;
    row_to_f32(e->a, e->at, e->ids[i], e->dim, (float *)e->y + i * e->dim, e->qdecode);
}

kvs_status kvs_cpu_embedding(kvs_device *dev, const kvs_embedding_args *oa) {
    const int64_t n = oa->n, dim = oa->dim;
    ew_ctx e = {.a = kvs_tensor_host_ptr(oa->table), .at = oa->table->dtype, .y = kvs_tensor_host_ptr(oa->out),
                .dim = dim, .ids = oa->ids};
    kvs_cpu_quant_kernels(dev, KVS_OP_embedding, NULL, &e.qdecode);
    kvs_par_for(kvs_cpu_nt(dev, (double)n * (double)dim), n, 0, embedding_one, &e);
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

typedef struct rope_ctx {
    const kvs_rope_args *a;
    const double *inv_freq;
    const float *tab;     /* the device's tables of positions [0, npos) (rope_tables), or NULL */
    int64_t npos;
    float *work;          /* per thread: cos, sin, f32 staging of one vector */
    int64_t *last;        /* per thread: the position its tables hold */
    size_t per;
    int64_t stride, nrow; /* rope_shift's vectors: rows [0, nrow) of every block of stride */
} rope_ctx;

/* Unit t: rope: the pos_div vectors of position entry t; rope_shift: visited vector t. The
 * position's cos/sin tables (the device's, or computed into thread tid's work, kept while its
 * consecutive units share the position), then the rotation of each vector in place. */
static void rope_unit(void *cv, int tid, int64_t t) {
    const rope_ctx *c = cv;
    const kvs_rope_args *a = c->a;
    const int n_rot = a->p.n_rot, half = n_rot / 2;
    const int64_t hd = a->head_dim;
    float *cs = c->work + (size_t)tid * c->per, *sn = cs + half, *tmp = sn + half;
    int64_t r0, r1, pv;
    if (!a->vec_stride_rows) {
        r0 = t * a->pos_div;
        r1 = r0 + a->pos_div < a->n_vec ? r0 + a->pos_div : a->n_vec;
        pv = kvs_i32(a->pos)[t];
    } else {
        r0 = (t / c->nrow) * c->stride + (t % c->nrow);
        r1 = r0 + 1;
        pv = kvs_i32(a->pos)[r0 / a->pos_div];
    }
    if (pv >= 0 && pv < c->npos) {
        cs = (float *)c->tab + pv * n_rot; /* (read only) */
        sn = cs + half;
    } else if (pv != c->last[tid]) {
        rope_table((double)pv, &a->p, c->inv_freq, cs, sn);
        c->last[tid] = pv;
    }
    for (int64_t r = r0; r < r1; r++) {
        if (a->x->dtype == KVS_F16) {
            uint16_t *v = (uint16_t *)kvs_tensor_host_ptr(a->x) + r * hd;
            for (int64_t col = 0; col < n_rot; col++) tmp[col] = kvs_h2f(v[col]);
            rope_apply_f32(tmp, cs, sn, n_rot, a->p.mode);
            for (int64_t col = 0; col < n_rot; col++) v[col] = kvs_f2h(tmp[col]);
        } else {
            rope_apply_f32((float *)kvs_tensor_host_ptr(a->x) + r * hd, cs, sn, n_rot, a->p.mode);
        }
    }
}

/* Positions below which kvs_cpu_rope keeps its tables across calls, and their most bytes. */
#define ROPE_TAB_POS 8192
#define ROPE_TAB_BYTES ((size_t)4 << 20)

/* The device's cos/sin tables (kvs_cpu.rope_tab) extended to cover positions [0, need) for a's
 * parameters, each entry rope_table's values bit for bit, so a table lookup rotates exactly as a
 * recomputation: the per-step rope of a decode then computes no trigonometry for positions it saw.
 * Returns the positions covered (0: none; the caller computes every table). */
static int64_t rope_tables(kvs_device *dev, const kvs_rope_args *a, const double *inv_freq, int64_t need) {
    kvs_cpu *c = dev->impl;
    const int n_rot = a->p.n_rot;
    if (c->rope_tab && (c->rope_n_rot != n_rot || c->rope_theta != a->p.theta_base || c->rope_fscale != a->p.freq_scale)) {
        free(c->rope_tab); /* other parameters (or NaN ones, never equal): start again */
        c->rope_tab = NULL;
        c->rope_npos = 0;
    }
    if (need <= c->rope_npos) return c->rope_npos;
    int64_t cap = (int64_t)(ROPE_TAB_BYTES / ((size_t)n_rot * sizeof(float)));
    if (cap > ROPE_TAB_POS) cap = ROPE_TAB_POS;
    if (need > cap) return c->rope_npos;
    int64_t np = 2 * c->rope_npos > need ? 2 * c->rope_npos : need;
    if (np < 256) np = 256;
    if (np > cap) np = cap;
    float *t = realloc(c->rope_tab, (size_t)np * (size_t)n_rot * sizeof(float));
    if (!t) return c->rope_npos;
    for (int64_t p = c->rope_npos; p < np; p++) rope_table((double)p, &a->p, inv_freq, t + p * n_rot, t + p * n_rot + n_rot / 2);
    c->rope_tab = t;
    c->rope_npos = np;
    c->rope_n_rot = n_rot;
    c->rope_theta = a->p.theta_base;
    c->rope_fscale = a->p.freq_scale;
    return np;
}

kvs_status kvs_cpu_rope(kvs_device *dev, const kvs_rope_args *a) {
    const int n_rot = a->p.n_rot, half = n_rot / 2;
    const int64_t hd = a->head_dim;
    int nt = kvs_cpu_nt(dev, (double)a->n_vec * (double)hd * 4.0);
    rope_ctx c = {.a = a, .per = (size_t)(2 * half + hd)};
    /* the device's scratch: inv_freq (f64), each thread's last position, then each thread's work */
    const size_t head = ((size_t)half + (size_t)nt) * 8;
    char *scr = kvs_cpu_scratch(dev, head + (size_t)nt * c.per * sizeof(float));
    if (!scr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_rope (cpu): out of host memory");
    double *inv_freq = (double *)scr;
    c.inv_freq = inv_freq;
    c.last = (int64_t *)(scr + (size_t)half * 8);
    c.work = (float *)(scr + head);
    for (int i = 0; i < half; i++) inv_freq[i] = pow((double)a->p.theta_base, -2.0 * i / (double)n_rot);
    for (int t = 0; t < nt; t++) c.last[t] = INT64_MIN;
    if (!a->vec_stride_rows) {
        /* rope: units of pos_div vectors, one position each; the kept tables (rope_shift's deltas
         * are not positions) */
        const int32_t *pos = kvs_i32(a->pos);
        int64_t hi = -1, n_pos = (a->n_vec + a->pos_div - 1) / a->pos_div;
        for (int64_t e = 0; e < n_pos; e++) hi = pos[e] > hi ? pos[e] : hi;
        if (n_rot > 0) c.npos = rope_tables(dev, a, inv_freq, hi + 1);
        c.tab = ((kvs_cpu *)dev->impl)->rope_tab;
        kvs_par_for(nt, n_pos, 0, rope_unit, &c);
        return KVS_OK;
    }
    /* rope_shift: rows [0, n_rows) of every block of vec_stride_rows vectors (a kv head) */
    c.stride = a->vec_stride_rows;
    c.nrow = a->n_rows;
    kvs_par_for(nt, a->n_vec / c.stride * c.nrow, 0, rope_unit, &c);
    return KVS_OK;
}
