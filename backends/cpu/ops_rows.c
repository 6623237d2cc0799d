/* CPU backend: gather / scatter / compact of grouped rows (contract: include/kvsieve/ops.h).
 * Rows are copied as bytes (bit-exact for any dtype, block rows included); a converting scatter
 * (f32 -> f16/bf16/q8_0/q4_0/q4_1/iq4_nl: the quantized KV cache's append; f32 -> both qh8 planes:
 * kvs_scatter_qh8) converts each row. Every index is range-checked before anything
 * is written: an index outside its valid range returns KVS_ERR_OUT_OF_RANGE and leaves the output
 * untouched (the CPU backend's documented extra). */
#include <stdlib.h>

#include "cpu_kernels.h"
#include "quant/quant.h"

/* Copies one row of rb bytes; small power-of-two rows get fixed-size copies the compiler inlines. */
static inline void row_copy(char *KVS_RESTRICT d, const char *KVS_RESTRICT s, int64_t rb) {
    switch (rb) {
    case 64: memcpy(d, s, 64); break;
    case 128: memcpy(d, s, 128); break;
    case 256: memcpy(d, s, 256); break;
    case 512: memcpy(d, s, 512); break;
    default: memcpy(d, s, (size_t)rb); break;
    }
}

/* One scatter row: a byte copy, or (a->convert) f32 values converted to the dst dtype: F16/BF16
 * rounded to nearest even, the block types quantized per block (core/quant/quant_encode.c), or
 * with a->dst_lo (kvs_scatter_qh8) the qh8 planes, row r of both (kvs_qh8_encode_row). d is dst
 * row r. */
static inline void row_put(const kvs_rows_args *a, int64_t r, char *KVS_RESTRICT d, const char *KVS_RESTRICT s, int64_t rb) {
    if (a->dst_lo) {
        const int64_t n = a->dst->ne[0];
        kvs_qh8_encode_row((const float *)s, n, d, (char *)kvs_tensor_host_ptr(a->dst_lo) + r * (n / 2));
        return;
    }
    if (!a->convert) {
        row_copy(d, s, rb);
        return;
    }
    const float *x = (const float *)s;
    const int64_t n = a->dst->ne[0];
    switch (a->dst->dtype) {
    case KVS_F16:
        for (int64_t t = 0; t < n; t++) ((uint16_t *)d)[t] = kvs_f2h(x[t]);
        break;
    case KVS_BF16:
        for (int64_t t = 0; t < n; t++) ((uint16_t *)d)[t] = kvs_f2bf(x[t]);
        break;
    default: kvs_quant_row_unchecked(a->dst->dtype, x, n, d); break;
    }
}

static kvs_status rows_check(const char *op, const kvs_rows_args *a, const int32_t *idx, int64_t limit) {
    int64_t total = a->idx_shared ? a->n : a->n * a->groups;
    for (int64_t e = 0; e < total; e++)
        if (idx[e] < 0 || idx[e] >= limit)
            return kvs_error(KVS_ERR_OUT_OF_RANGE, "%s: idx[%lld] = %d outside [0, %lld)", op, (long long)e, idx[e],
                             (long long)limit);
    return KVS_OK;
}

kvs_status kvs_cpu_gather(kvs_device *dev, const kvs_rows_args *a) {
    const int32_t *idx = kvs_i32(a->idx);
    KVS_TRY(rows_check("kvs_gather (cpu)", a, idx, a->src_rows));
    const char *src = kvs_tensor_host_ptr(a->src);
    char *dst = kvs_tensor_host_ptr(a->dst);
    const int64_t rb = a->row_bytes, n = a->n, total = a->groups * n;
    int nt = kvs_cpu_nt(dev, (double)total * (double)rb / 4.0);
    (void)nt; /* unused without OpenMP */
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t t = 0; t < total; t++) {
        int64_t g = t / n, i = t % n;
        int64_t j = a->idx_shared ? idx[i] : idx[t];
        row_copy(dst + (g * a->dst_rows + i) * rb, src + (g * a->src_rows + j) * rb, rb);
    }
    return KVS_OK;
}

kvs_status kvs_cpu_scatter(kvs_device *dev, const kvs_rows_args *a) {
    const int32_t *idx = kvs_i32(a->idx);
    KVS_TRY(rows_check("kvs_scatter (cpu)", a, idx, a->dst_rows));
    const char *src = kvs_tensor_host_ptr(a->src);
    char *dst = kvs_tensor_host_ptr(a->dst);
    const int64_t rb = a->row_bytes, n = a->n, G = a->groups;
    const int64_t sb = a->convert ? a->dst->ne[0] * 4 : rb; /* bytes of one src row */
    /* Within a group rows are written in order i = 0..n-1, so a duplicate's highest i wins;
     * groups write disjoint memory and run in parallel. */
    int nt = kvs_cpu_nt(dev, (double)G * (double)n * (double)rb / 4.0);
    (void)nt; /* unused without OpenMP */
    if (nt > G) nt = (int)G;
    if (a->src_token_major) {
        /* [n][G][row]: each thread takes a range of groups and walks the tokens in order, so it
         * reads src sequentially (a per-group walk would stride by G rows) */
        KVS_OMP(parallel num_threads(nt))
        {
            int t = kvs_omp_tid(), nth = 1;
#ifdef _OPENMP
            nth = omp_get_num_threads();
#endif
            int64_t g0 = G * t / nth, g1 = G * (t + 1) / nth;
            for (int64_t i = 0; i < n; i++)
                for (int64_t g = g0; g < g1; g++) {
                    int64_t j = a->idx_shared ? idx[i] : idx[g * n + i];
                    row_put(a, g * a->dst_rows + j, dst + (g * a->dst_rows + j) * rb, src + (i * G + g) * sb, rb);
                }
        }
        return KVS_OK;
    }
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t g = 0; g < G; g++) {
        const int32_t *gi = a->idx_shared ? idx : idx + g * n;
        for (int64_t i = 0; i < n; i++)
            row_put(a, g * a->dst_rows + gi[i], dst + (g * a->dst_rows + gi[i]) * rb, src + (g * n + i) * sb, rb);
    }
    return KVS_OK;
}

kvs_status kvs_cpu_compact(kvs_device *dev, const kvs_rows_args *a) {
    const int32_t *idx = kvs_i32(a->idx);
    KVS_TRY(rows_check("kvs_compact (cpu)", a, idx, a->src_rows));
    char *t = kvs_tensor_host_ptr(a->dst);
    const int64_t rb = a->row_bytes, n = a->n, G = a->groups;
    /* Strictly increasing lists (the contract) compact in place front to back: row i reads
     * idx[i] >= i, never a row already overwritten. Other lists go through scratch. */
    int64_t lists = a->idx_shared ? 1 : G;
    int increasing = 1;
    for (int64_t g = 0; g < lists && increasing; g++)
        for (int64_t i = 1; i < n; i++)
            if (idx[g * n + i] <= idx[g * n + i - 1]) {
                increasing = 0;
                break;
            }
    int nt = kvs_cpu_nt(dev, (double)G * (double)n * (double)rb / 4.0);
    (void)nt; /* unused without OpenMP */
    if (increasing) {
        if (nt > G) nt = (int)G;
        KVS_OMP(parallel for num_threads(nt) schedule(static))
        for (int64_t g = 0; g < G; g++) {
            const int32_t *gi = a->idx_shared ? idx : idx + g * n;
            char *base = t + g * a->dst_rows * rb;
            for (int64_t i = 0; i < n; i++)
                if (gi[i] != i) memmove(base + i * rb, base + gi[i] * rb, (size_t)rb);
        }
        return KVS_OK;
    }
    char *tmp = malloc((size_t)(n * rb) * (size_t)G + 1);
    if (!tmp) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_compact (cpu): cannot allocate scratch");
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t e = 0; e < G * n; e++) {
        int64_t g = e / n, i = e % n;
        int64_t j = a->idx_shared ? idx[i] : idx[e];
        memcpy(tmp + e * rb, t + (g * a->dst_rows + j) * rb, (size_t)rb);
    }
    KVS_OMP(parallel for num_threads(nt) schedule(static))
    for (int64_t g = 0; g < G; g++) memcpy(t + g * a->dst_rows * rb, tmp + g * n * rb, (size_t)(n * rb));
    free(tmp);
    return KVS_OK;
}
