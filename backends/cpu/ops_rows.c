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

/* What the row loops below read: the op's arguments and its resolved pointers. */
typedef struct rows_ctx {
    const kvs_rows_args *a;
    const int32_t *idx;
    const char *src;
    char *dst, *tmp;
    int64_t rb, sb, n, G;
} rows_ctx;

/* gather: output row t = (group g, row i) */
static void gather_row(void *cv, int tid, int64_t t) {
    const rows_ctx *c = cv;
    const kvs_rows_args *a = c->a;
    (void)tid;
    int64_t g = t / c->n, i = t % c->n;
    int64_t j = a->idx_shared ? c->idx[i] : c->idx[t];
    row_copy(c->dst + (g * a->dst_rows + i) * c->rb, c->src + (g * a->src_rows + j) * c->rb, c->rb);
}

kvs_status kvs_cpu_gather(kvs_device *dev, const kvs_rows_args *a) {
    const int32_t *idx = kvs_i32(a->idx);
    KVS_TRY(rows_check("kvs_gather (cpu)", a, idx, a->src_rows));
    rows_ctx c = {.a = a, .idx = idx, .src = kvs_tensor_host_ptr(a->src), .dst = kvs_tensor_host_ptr(a->dst),
                  .rb = a->row_bytes, .n = a->n};
    const int64_t total = a->groups * a->n;
    kvs_par_for(kvs_cpu_nt(dev, (double)total * (double)c.rb / 4.0), total, 0, gather_row, &c);
    return KVS_OK;
}

/* scatter, [n][G][row] source: thread tid of team takes a range of groups and walks the tokens in
 * order, so it reads src sequentially (a per-group walk would stride by G rows) */
static void scatter_token_major(void *cv, int tid, int team) {
    const rows_ctx *c = cv;
    const kvs_rows_args *a = c->a;
    const int64_t G = c->G, rb = c->rb;
    int64_t g0 = G * tid / team, g1 = G * (tid + 1) / team;
    for (int64_t i = 0; i < c->n; i++)
        for (int64_t g = g0; g < g1; g++) {
            int64_t j = a->idx_shared ? c->idx[i] : c->idx[g * c->n + i];
            row_put(a, g * a->dst_rows + j, c->dst + (g * a->dst_rows + j) * rb, c->src + (i * G + g) * c->sb, rb);
        }
}

/* scatter, [G][n][row] source: group g */
static void scatter_group(void *cv, int tid, int64_t g) {
    const rows_ctx *c = cv;
    const kvs_rows_args *a = c->a;
    (void)tid;
    const int32_t *gi = a->idx_shared ? c->idx : c->idx + g * c->n;
    for (int64_t i = 0; i < c->n; i++)
        row_put(a, g * a->dst_rows + gi[i], c->dst + (g * a->dst_rows + gi[i]) * c->rb,
                c->src + (g * c->n + i) * c->sb, c->rb);
}

kvs_status kvs_cpu_scatter(kvs_device *dev, const kvs_rows_args *a) {
    const int32_t *idx = kvs_i32(a->idx);
    KVS_TRY(rows_check("kvs_scatter (cpu)", a, idx, a->dst_rows));
    const int64_t rb = a->row_bytes, n = a->n, G = a->groups;
    rows_ctx c = {.a = a, .idx = idx, .src = kvs_tensor_host_ptr(a->src), .dst = kvs_tensor_host_ptr(a->dst),
                  .rb = rb, .sb = a->convert ? a->dst->ne[0] * 4 : rb /* bytes of one src row */, .n = n, .G = G};
    /* Within a group rows are written in order i = 0..n-1, so a duplicate's highest i wins;
     * groups write disjoint memory and run in parallel. */
    int nt = kvs_cpu_nt(dev, (double)G * (double)n * (double)rb / 4.0);
    if (nt > G) nt = (int)G;
    if (a->src_token_major)
        kvs_par_team(nt, scatter_token_major, &c);
    else
        kvs_par_for(nt, G, 0, scatter_group, &c);
    return KVS_OK;
}

/* compact in place, strictly increasing lists: group g front to back (row i reads idx[i] >= i,
 * never a row already overwritten) */
static void compact_group(void *cv, int tid, int64_t g) {
    const rows_ctx *c = cv;
    const kvs_rows_args *a = c->a;
    (void)tid;
    const int32_t *gi = a->idx_shared ? c->idx : c->idx + g * c->n;
    char *base = c->dst + g * a->dst_rows * c->rb;
    for (int64_t i = 0; i < c->n; i++)
        if (gi[i] != i) memmove(base + i * c->rb, base + gi[i] * c->rb, (size_t)c->rb);
}

/* compact through scratch: row e = (group g, row i) into tmp, then each group's rows back */
static void compact_to_tmp(void *cv, int tid, int64_t e) {
    const rows_ctx *c = cv;
    const kvs_rows_args *a = c->a;
    (void)tid;
    int64_t g = e / c->n, i = e % c->n;
    int64_t j = a->idx_shared ? c->idx[i] : c->idx[e];
    memcpy(c->tmp + e * c->rb, c->dst + (g * a->dst_rows + j) * c->rb, (size_t)c->rb);
}

static void compact_from_tmp(void *cv, int tid, int64_t g) {
    const rows_ctx *c = cv;
    (void)tid;
    memcpy(c->dst + g * c->a->dst_rows * c->rb, c->tmp + g * c->n * c->rb, (size_t)(c->n * c->rb));
}

kvs_status kvs_cpu_compact(kvs_device *dev, const kvs_rows_args *a) {
    const int32_t *idx = kvs_i32(a->idx);
    KVS_TRY(rows_check("kvs_compact (cpu)", a, idx, a->src_rows));
    const int64_t rb = a->row_bytes, n = a->n, G = a->groups;
    rows_ctx c = {.a = a, .idx = idx, .dst = kvs_tensor_host_ptr(a->dst), .rb = rb, .n = n, .G = G};
    /* Strictly increasing lists (the contract) compact in place front to back. Other lists go
     * through scratch. */
    int64_t lists = a->idx_shared ? 1 : G;
    int increasing = 1;
    for (int64_t g = 0; g < lists && increasing; g++)
        for (int64_t i = 1; i < n; i++)
            if (idx[g * n + i] <= idx[g * n + i - 1]) {
                increasing = 0;
                break;
            }
    int nt = kvs_cpu_nt(dev, (double)G * (double)n * (double)rb / 4.0);
    if (increasing) {
        kvs_par_for(nt > G ? (int)G : nt, G, 0, compact_group, &c);
        return KVS_OK;
    }
    c.tmp = malloc((size_t)(n * rb) * (size_t)G + 1);
    if (!c.tmp) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_compact (cpu): cannot allocate scratch");
    kvs_par_for(nt, G * n, 0, compact_to_tmp, &c);
    kvs_par_for(nt, G, 0, compact_from_tmp, &c);
    free(c.tmp);
    return KVS_OK;
}
