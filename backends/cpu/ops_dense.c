/* CPU backend: dense and element-wise ops (matmul, add, copy, rmsnorm, swiglu, softmax, embedding,
 * rope). Contracts: include/kvsieve/ops.h; arguments arrive validated from core/ops.c. */
#include <stdlib.h>

#include <cblas.h>

#include "cpu_kernels.h"

/* ---- BLAS threads ------------------------------------------------------------------------- */

void kvs_cpu_blas_threads(int n) {
#ifdef OPENBLAS_VERSION
    static int current = -1; /* OpenBLAS's thread count is process-wide */
    if (n < 1) n = 1;
    if (n != current) {
        openblas_set_num_threads(n);
        current = n;
    }
#else
    (void)n;
#endif
}

/* ---- weight rows -> f32 ------------------------------------------------------------------- */

/* Q8_0 (GGUF): blocks of 32 values, each 34 bytes = f16 scale d + 32 int8 q; value = d * q. */
#define KVS_Q8_BLOCK 32
#define KVS_Q8_BYTES 34

KVS_CLONES
static void row_f16_to_f32(const uint16_t *KVS_RESTRICT s, float *KVS_RESTRICT d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = kvs_h2f(s[i]);
}

KVS_CLONES
static void row_bf16_to_f32(const uint16_t *KVS_RESTRICT s, float *KVS_RESTRICT d, int64_t n) {
    for (int64_t i = 0; i < n; i++) d[i] = kvs_bf2f(s[i]);
}

KVS_CLONES
static void row_q8_to_f32(const uint8_t *KVS_RESTRICT s, float *KVS_RESTRICT d, int64_t n) {
    for (int64_t b = 0; b < n / KVS_Q8_BLOCK; b++) {
        const uint8_t *blk = s + b * KVS_Q8_BYTES;
        uint16_t hs;
        memcpy(&hs, blk, 2);
        float sc = kvs_h2f(hs);
        const int8_t *q = (const int8_t *)(blk + 2);
        float *o = d + b * KVS_Q8_BLOCK;
        for (int t = 0; t < KVS_Q8_BLOCK; t++) o[t] = sc * (float)q[t];
    }
}

/* Row r of a [rows][n] tensor of dtype dt, converted to f32 in d[0..n). */
static void row_to_f32(const void *base, kvs_dtype dt, int64_t r, int64_t n, float *d) {
    switch (dt) {
    case KVS_F32: memcpy(d, (const float *)base + r * n, (size_t)n * sizeof(float)); break;
    case KVS_F16: row_f16_to_f32((const uint16_t *)base + r * n, d, n); break;
    case KVS_BF16: row_bf16_to_f32((const uint16_t *)base + r * n, d, n); break;
    case KVS_Q8_0:
        row_q8_to_f32((const uint8_t *)base + r * (n / KVS_Q8_BLOCK) * KVS_Q8_BYTES, d, n);
        break;
    default: break;
    }
}

/* ---- matmul -------------------------------------------------------------------------------- */

/* Dot products of few x rows with converted weight rows: used when n is small (decoding), where
 * the op is bound by reading W, so W is read once in its own dtype. */
KVS_CLONES
static void dot_rows_f16(const uint16_t *KVS_RESTRICT w, const float *KVS_RESTRICT x, int64_t k, int64_t n,
                         float *KVS_RESTRICT acc) {
    /* acc[i] = sum_c w[c] * x[i][c], i < n (n <= 4); 8 independent partial sums per row */
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * k;
        float s[16] = {0};
        int64_t c = 0;
        for (; c + 16 <= k; c += 16)
            for (int t = 0; t < 16; t++) s[t] += kvs_h2f(w[c + t]) * xi[c + t];
        float tot = 0.0f;
        for (; c < k; c++) tot += kvs_h2f(w[c]) * xi[c];
        for (int t = 0; t < 16; t++) tot += s[t];
        acc[i] = tot;
    }
}

KVS_CLONES
static void dot_rows_bf16(const uint16_t *KVS_RESTRICT w, const float *KVS_RESTRICT x, int64_t k, int64_t n,
                          float *KVS_RESTRICT acc) {
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * k;
        float s[16] = {0};
        int64_t c = 0;
        for (; c + 16 <= k; c += 16)
            for (int t = 0; t < 16; t++) s[t] += kvs_bf2f(w[c + t]) * xi[c + t];
        float tot = 0.0f;
        for (; c < k; c++) tot += kvs_bf2f(w[c]) * xi[c];
        for (int t = 0; t < 16; t++) tot += s[t];
        acc[i] = tot;
    }
}

KVS_CLONES
static void dot_rows_q8(const uint8_t *KVS_RESTRICT w, const float *KVS_RESTRICT x, int64_t k, int64_t n,
                        float *KVS_RESTRICT acc) {
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * k;
        float tot = 0.0f;
        for (int64_t b = 0; b < k / KVS_Q8_BLOCK; b++) {
            const uint8_t *blk = w + b * KVS_Q8_BYTES;
            uint16_t hs;
            memcpy(&hs, blk, 2);
            const int8_t *q = (const int8_t *)(blk + 2);
            const float *xb = xi + b * KVS_Q8_BLOCK;
            float s[16] = {0};
            for (int t = 0; t < 16; t++) s[t] = (float)q[t] * xb[t] + (float)q[t + 16] * xb[t + 16];
            float bs = 0.0f;
            for (int t = 0; t < 16; t++) bs += s[t];
            tot += kvs_h2f(hs) * bs;
        }
        acc[i] = tot;
    }
}

KVS_CLONES
static void dot_rows_f32(const float *KVS_RESTRICT w, const float *KVS_RESTRICT x, int64_t k, int64_t n,
                         float *KVS_RESTRICT acc) {
    for (int64_t i = 0; i < n; i++) {
        const float *xi = x + i * k;
        float s[16] = {0};
        int64_t c = 0;
        for (; c + 16 <= k; c += 16)
            for (int t = 0; t < 16; t++) s[t] += w[c + t] * xi[c + t];
        float tot = 0.0f;
        for (; c < k; c++) tot += w[c] * xi[c];
        for (int t = 0; t < 16; t++) tot += s[t];
        acc[i] = tot;
    }
}

#define KVS_GEMV_MAX_N 4

static void matmul_small_n(kvs_device *dev, const kvs_matmul_args *a) {
    const void *W = kvs_tensor_host_ptr(a->W);
    const float *x = kvs_tensor_host_ptr(a->x);
    float *y = kvs_tensor_host_ptr(a->y);
    const int64_t m = a->m, k = a->k, n = a->n;
    const kvs_dtype dt = a->W->dtype;
    const size_t wrow = kvs_dtype_bytes(dt, k);
    int nt = kvs_cpu_nt(dev, (double)m * (double)k * (double)n);
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t r = 0; r < m; r++) {
        float acc[KVS_GEMV_MAX_N];
        const void *wr = (const char *)W + (size_t)r * wrow;
        switch (dt) {
        case KVS_F32: dot_rows_f32(wr, x, k, n, acc); break;
        case KVS_F16: dot_rows_f16(wr, x, k, n, acc); break;
        case KVS_BF16: dot_rows_bf16(wr, x, k, n, acc); break;
        default: dot_rows_q8(wr, x, k, n, acc); break;
        }
        for (int64_t i = 0; i < n; i++) y[i * m + r] = a->accumulate ? y[i * m + r] + acc[i] : acc[i];
    }
}

kvs_status kvs_cpu_matmul(kvs_device *dev, const kvs_matmul_args *a) {
    const float *x = kvs_tensor_host_ptr(a->x);
    float *y = kvs_tensor_host_ptr(a->y);
    const int64_t m = a->m, k = a->k, n = a->n;
    const float beta = a->accumulate ? 1.0f : 0.0f;
    if (n <= KVS_GEMV_MAX_N && a->W->dtype != KVS_F32) {
        matmul_small_n(dev, a);
        return KVS_OK;
    }
    if (a->W->dtype == KVS_F32) {
        const float *W = kvs_tensor_host_ptr(a->W);
        kvs_cpu_blas_threads(kvs_cpu_threads(dev));
        if (n == 1)
            cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)m, (int)k, 1.0f, W, (int)k, x, 1, beta, y, 1);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)m, (int)k, 1.0f, x, (int)k, W,
                        (int)k, beta, y, (int)m);
        return KVS_OK;
    }
    /* Non-f32 weights: convert a panel of W rows to f32 scratch, then one SGEMM per panel:
     * y[:, r0:r0+P] = x . Wp^T. Panels of ~8 MiB keep the conversion cost amortised over n rows. */
    int64_t P = (int64_t)((8u << 20) / ((size_t)k * sizeof(float)));
    if (P < 16) P = 16;
    if (P > m) P = m;
    float *Wp = kvs_cpu_scratch(dev, (size_t)P * (size_t)k * sizeof(float));
    if (!Wp) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_matmul (cpu): cannot allocate a %lld x %lld panel",
                              (long long)P, (long long)k);
    const void *W = kvs_tensor_host_ptr(a->W);
    const kvs_dtype dt = a->W->dtype;
    int nt = kvs_cpu_threads(dev);
    for (int64_t r0 = 0; r0 < m; r0 += P) {
        int64_t pr = m - r0 < P ? m - r0 : P;
        KVS_OMP(parallel for num_threads(nt) schedule(static))
        for (int64_t r = 0; r < pr; r++) row_to_f32(W, dt, r0 + r, k, Wp + r * k);
        kvs_cpu_blas_threads(nt);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, (int)pr, (int)k, 1.0f, x, (int)k, Wp,
                    (int)k, beta, y + r0, (int)m);
    }
    return KVS_OK;
}

/* ---- element-wise ---------------------------------------------------------------------------- */

KVS_CLONES
static void add_f32(const float *a, const float *b, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

kvs_status kvs_cpu_add(kvs_device *dev, const kvs_tensor *a, const kvs_tensor *b, kvs_tensor *y, int64_t n) {
    const float *pa = kvs_tensor_host_ptr(a), *pb = kvs_tensor_host_ptr(b);
    float *py = kvs_tensor_host_ptr(y);
    int nt = kvs_cpu_nt(dev, (double)n);
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

kvs_status kvs_cpu_copy(kvs_device *dev, const kvs_tensor *src, kvs_tensor *dst, int64_t n) {
    const void *s = kvs_tensor_host_ptr(src);
    void *d = kvs_tensor_host_ptr(dst);
    int nt = kvs_cpu_nt(dev, (double)n);
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
    double ss = 0.0;
    for (int64_t c = 0; c < dim; c++) ss += (double)x[c] * (double)x[c];
    float inv = (float)(1.0 / sqrt(ss / (double)dim + (double)eps));
    for (int64_t c = 0; c < dim; c++) y[c] = (x[c] * inv) * w[c];
}

kvs_status kvs_cpu_rmsnorm(kvs_device *dev, const kvs_tensor *x, const kvs_tensor *w, kvs_tensor *y, int64_t rows,
                           int64_t dim, float eps) {
    const float *px = kvs_tensor_host_ptr(x), *pw = kvs_tensor_host_ptr(w);
    float *py = kvs_tensor_host_ptr(y);
    int nt = kvs_cpu_nt(dev, (double)rows * (double)dim);
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t r = 0; r < rows; r++) rmsnorm_row(px + r * dim, pw, py + r * dim, dim, eps);
    return KVS_OK;
}

KVS_CLONES
static void swiglu_chunk(const float *g, const float *u, float *o, int64_t n) {
    for (int64_t i = 0; i < n; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

kvs_status kvs_cpu_swiglu(kvs_device *dev, const kvs_tensor *gate, const kvs_tensor *up, kvs_tensor *out,
                          int64_t n) {
    const float *g = kvs_tensor_host_ptr(gate), *u = kvs_tensor_host_ptr(up);
    float *o = kvs_tensor_host_ptr(out);
    int nt = kvs_cpu_nt(dev, (double)n * 8.0);
    const int64_t chunk = 8192;
    int64_t nchunks = (n + chunk - 1) / chunk;
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t i0 = c * chunk, len = n - i0 < chunk ? n - i0 : chunk;
        swiglu_chunk(g + i0, u + i0, o + i0, len);
    }
    return KVS_OK;
}

static void softmax_row(const float *x, float *y, int64_t n, float s) {
    float m = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        float v = s * x[j];
        m = v > m ? v : m;
    }
    if (m == -INFINITY) { /* all -inf (or empty): weight 0 everywhere */
        for (int64_t j = 0; j < n; j++) y[j] = 0.0f;
        return;
    }
    double sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        float e = expf(s * x[j] - m);
        y[j] = e;
        sum += e;
    }
    float inv = (float)(1.0 / sum);
    for (int64_t j = 0; j < n; j++) y[j] *= inv;
}

kvs_status kvs_cpu_softmax(kvs_device *dev, const kvs_tensor *x, kvs_tensor *y, int64_t rows, int64_t n,
                           float scale) {
    const float *px = kvs_tensor_host_ptr(x);
    float *py = kvs_tensor_host_ptr(y);
    int nt = kvs_cpu_nt(dev, (double)rows * (double)n * 8.0);
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t r = 0; r < rows; r++) softmax_row(px + r * n, py + r * n, n, scale);
    return KVS_OK;
}

kvs_status kvs_cpu_embedding(kvs_device *dev, const kvs_tensor *table, const int32_t *ids, int64_t n,
                             kvs_tensor *out, int64_t dim) {
    const void *t = kvs_tensor_host_ptr(table);
    float *o = kvs_tensor_host_ptr(out);
    int nt = kvs_cpu_nt(dev, (double)n * (double)dim);
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t i = 0; i < n; i++) row_to_f32(t, table->dtype, ids[i], dim, o + i * dim);
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
