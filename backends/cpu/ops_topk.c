/* CPU backend: per-row and global top-k (contract: kvs_topk, kvs_topk_global in include/kvsieve/ops.h).
 *
 * Every score maps to an unsigned 32-bit key whose integer order is the required score order:
 * NaN -> 0 (below everything), -0 and +0 -> the same key, negatives -> ~bits, positives -> bits with
 * the sign bit set. Ties are broken by the lower index, so the selection is a pure function of x.
 * Selection is a radix select: a histogram of the top 11 key bits finds the bucket holding the k-th
 * key; the survivors of that bucket are refined on the next 11 and 10 bits, giving the exact k-th
 * key T. Every key > T is selected, plus the lowest-index entries with key == T until k are chosen.
 * The chosen entries are collected in index order (order_by_index needs nothing more), else sorted
 * by a stable LSD radix sort on the key, descending (stable = lower index first on ties). */
#include <stdlib.h>

#include "cpu_kernels.h"

static inline uint32_t topk_key(float v) {
    uint32_t u = kvs_f32_bits(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0u; /* NaN */
    if (u == 0x80000000u) u = 0u;                     /* -0 == +0 */
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

#define TK_B1 11
#define TK_B2 11
#define TK_B3 10
#define TK_H1 (1u << TK_B1)

typedef struct topk_sel {
    uint32_t thresh;   /* the k-th largest key */
    int64_t n_eq;      /* entries with key == thresh to take (lowest index first) */
} topk_sel;

KVS_CLONES
static void topk_hist(const float *x, int64_t n, uint32_t *h) {
    /* four interleaved sub-histograms hide store-to-load latency on repeated buckets */
    uint32_t *h0 = h, *h1 = h + TK_H1, *h2 = h + 2 * TK_H1, *h3 = h + 3 * TK_H1;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        h0[topk_key(x[i]) >> (32 - TK_B1)]++;
        h1[topk_key(x[i + 1]) >> (32 - TK_B1)]++;
        h2[topk_key(x[i + 2]) >> (32 - TK_B1)]++;
        h3[topk_key(x[i + 3]) >> (32 - TK_B1)]++;
    }
    for (; i < n; i++) h0[topk_key(x[i]) >> (32 - TK_B1)]++;
}

/* Among counts hist[0..nb) find bucket b (from the top) where the running count reaches k:
 * returns b; *above = count in buckets > b. */
static uint32_t topk_find_bucket(const uint32_t *hist, uint32_t nb, int64_t k, int64_t *above) {
    int64_t acc = 0;
    for (uint32_t b = nb; b-- > 0;) {
        if (acc + hist[b] >= k) {
            *above = acc;
            return b;
        }
        acc += hist[b];
    }
    *above = acc;
    return 0;
}

/* Exact threshold among candidate keys cand[0..nc) (all sharing their top 11 bits) for the
 * k2-th largest (1-based). */
static topk_sel topk_refine(const uint32_t *cand, int64_t nc, int64_t k2) {
    uint32_t hist[1u << TK_B2];
    memset(hist, 0, sizeof hist);
    for (int64_t i = 0; i < nc; i++) hist[(cand[i] >> TK_B3) & ((1u << TK_B2) - 1)]++;
    int64_t above;
    uint32_t b2 = topk_find_bucket(hist, 1u << TK_B2, k2, &above);
    k2 -= above;
    uint32_t hist3[1u << TK_B3];
    memset(hist3, 0, sizeof hist3);
    uint32_t prefix = cand[0] >> (32 - TK_B1);
    for (int64_t i = 0; i < nc; i++)
        if (((cand[i] >> TK_B3) & ((1u << TK_B2) - 1)) == b2) hist3[cand[i] & ((1u << TK_B3) - 1)]++;
    uint32_t b3 = topk_find_bucket(hist3, 1u << TK_B3, k2, &above);
    topk_sel s;
    s.thresh = (prefix << (32 - TK_B1)) | (b2 << TK_B3) | b3;
    s.n_eq = k2 - above;
    return s;
}

/* Stable sort of (key, idx) pairs by key descending: LSD radix on ~key, 3 passes. */
static void topk_sort(uint32_t *key, int32_t *idx, uint32_t *tk, int32_t *ti, int64_t n) {
    if (n <= 32) { /* insertion sort: stable, descending */
        for (int64_t i = 1; i < n; i++) {
            uint32_t kk = key[i];
            int32_t ii = idx[i];
            int64_t j = i;
            while (j > 0 && key[j - 1] < kk) {
                key[j] = key[j - 1];
                idx[j] = idx[j - 1];
                j--;
            }
            key[j] = kk;
            idx[j] = ii;
        }
        return;
    }
    static const int shift[3] = {0, 11, 22};
    static const uint32_t mask[3] = {0x7ffu, 0x7ffu, 0x3ffu};
    uint32_t cnt[2048];
    uint32_t *ks = key, *kd = tk;
    int32_t *is = idx, *id = ti;
    for (int pass = 0; pass < 3; pass++) {
        memset(cnt, 0, sizeof cnt);
        for (int64_t i = 0; i < n; i++) cnt[((~ks[i]) >> shift[pass]) & mask[pass]]++;
        uint32_t sum = 0;
        for (uint32_t b = 0; b <= mask[pass]; b++) {
            uint32_t c = cnt[b];
            cnt[b] = sum;
            sum += c;
        }
        for (int64_t i = 0; i < n; i++) {
            uint32_t pos = cnt[((~ks[i]) >> shift[pass]) & mask[pass]]++;
            kd[pos] = ks[i];
            id[pos] = is[i];
        }
        uint32_t *tk2 = ks; ks = kd; kd = tk2;
        int32_t *ti2 = is; is = id; id = ti2;
    }
    /* after 3 passes the result is in the temporaries */
    memcpy(key, ks, (size_t)n * sizeof *key);
    memcpy(idx, is, (size_t)n * sizeof *idx);
}

/* Writes the selection of (keys, idx) (in index order, k entries) to the outputs. */
static void topk_emit(const float *x, uint32_t *key, int32_t *idx, uint32_t *tk, int32_t *ti, int64_t k,
                      int by_index, int32_t *out_idx, float *out_val) {
    if (!by_index) topk_sort(key, idx, tk, ti, k);
    memcpy(out_idx, idx, (size_t)k * sizeof *idx);
    if (out_val)
        for (int64_t i = 0; i < k; i++) out_val[i] = x[idx[i]];
}

/* Single-threaded top-k of x[0..n) (n >= k >= 1). work: >= 4*TK_H1 + 4*n uint32. */
static void topk_row(const float *x, int64_t n, int64_t k, int by_index, uint32_t *work, int32_t *out_idx,
                     float *out_val) {
    uint32_t *hist = work, *cand = work + 4 * TK_H1;
    uint32_t *key = cand + n;
    int32_t *idx = (int32_t *)(key + k);
    uint32_t *tk = (uint32_t *)(idx + k);
    int32_t *ti = (int32_t *)(tk + k);
    memset(hist, 0, 4 * TK_H1 * sizeof *hist);
    topk_hist(x, n, hist);
    for (uint32_t b = 0; b < TK_H1; b++) hist[b] += hist[b + TK_H1] + hist[b + 2 * TK_H1] + hist[b + 3 * TK_H1];
    int64_t above;
    uint32_t b1 = topk_find_bucket(hist, TK_H1, k, &above);
    int64_t nc = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t kk = topk_key(x[i]);
        if ((kk >> (32 - TK_B1)) == b1) cand[nc++] = kk;
    }
    topk_sel s = topk_refine(cand, nc, k - above);
    int64_t m = 0, eq = 0;
    for (int64_t i = 0; i < n && m < k; i++) {
        uint32_t kk = topk_key(x[i]);
        if (kk > s.thresh || (kk == s.thresh && eq < s.n_eq)) {
            if (kk == s.thresh) eq++;
            key[m] = kk;
            idx[m] = (int32_t)i;
            m++;
        }
    }
    topk_emit(x, key, idx, tk, ti, k, by_index, out_idx, out_val);
}

static size_t topk_work_words(int64_t n, int64_t k) { return (size_t)(4 * TK_H1 + n + 4 * k + 16); }

kvs_status kvs_cpu_topk(kvs_device *dev, const kvs_topk_args *a) {
    const float *x = kvs_tensor_host_ptr(a->x);
    int32_t *oi = kvs_tensor_host_ptr(a->idx);
    float *ov = a->val ? kvs_tensor_host_ptr(a->val) : NULL;
    const int32_t *row_len = kvs_i32(a->p.row_len);
    const int64_t n = a->n, k = a->k;
    int nt = kvs_cpu_nt(dev, (double)a->rows * (double)n * 4.0);
    if (nt > a->rows) nt = (int)a->rows;
    size_t per = topk_work_words(n, k);
    uint32_t *scr = malloc((size_t)nt * per * sizeof(uint32_t));
    if (!scr) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_topk (cpu): cannot allocate scratch");
    KVS_OMP(parallel num_threads(nt))
    {
        uint32_t *work = scr + (size_t)kvs_omp_tid() * per;
        KVS_OMP(for schedule(dynamic, 4))
        for (int64_t r = 0; r < a->rows; r++) {
            int64_t len = n;
            if (row_len) {
                len = row_len[r];
                if (len < 0) len = 0;
                if (len > n) len = n;
            }
            int64_t kk = k < len ? k : len;
            int32_t *ri = oi + r * k;
            float *rv = ov ? ov + r * k : NULL;
            if (kk > 0) topk_row(x + r * n, len, kk, a->p.order_by_index, work, ri, rv);
            for (int64_t t = kk; t < k; t++) {
                ri[t] = -1;
                if (rv) rv[t] = -INFINITY;
            }
        }
    }
    free(scr);
    return KVS_OK;
}

kvs_status kvs_cpu_topk_global(kvs_device *dev, const kvs_topk_args *a) {
    const float *x = kvs_tensor_host_ptr(a->x);
    int32_t *oi = kvs_tensor_host_ptr(a->idx);
    float *ov = a->val ? kvs_tensor_host_ptr(a->val) : NULL;
    const int64_t n = a->n, k = a->k;
    int nt = kvs_cpu_nt(dev, (double)n * 4.0);
    if (nt < 2 || n < 65536) {
        uint32_t *work = malloc(topk_work_words(n, k) * sizeof(uint32_t));
        if (!work) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_topk_global (cpu): cannot allocate scratch");
        topk_row(x, n, k, a->p.order_by_index, work, oi, ov);
        free(work);
        return KVS_OK;
    }
    /* Parallel: per-thread histograms over contiguous chunks, merged; per-thread candidate and
     * selection lists, concatenated in chunk order (= index order). */
    const int64_t chunk = (n + nt - 1) / nt;
    uint32_t *hist = calloc((size_t)nt * 4 * TK_H1, sizeof(uint32_t));
    int64_t *cnt = calloc((size_t)nt * 3 + 3, sizeof(int64_t));
    uint32_t *cand = malloc((size_t)n * sizeof(uint32_t));
    uint32_t *key = malloc((size_t)(4 * k + 16) * sizeof(uint32_t));
    if (!hist || !cnt || !cand || !key) {
        free(hist); free(cnt); free(cand); free(key);
        return kvs_error(KVS_ERR_OUT_OF_MEMORY, "kvs_topk_global (cpu): cannot allocate scratch");
    }
    int32_t *idx = (int32_t *)(key + k);
    uint32_t *tk = (uint32_t *)(idx + k);
    int32_t *ti = (int32_t *)(tk + k);
    uint32_t b1 = 0;
    int64_t above = 0;
    topk_sel s = {0, 0};
    KVS_OMP(parallel num_threads(nt))
    {
        int tid = kvs_omp_tid();
        int64_t c0 = (int64_t)tid * chunk, c1 = c0 + chunk < n ? c0 + chunk : n;
        if (c0 > c1) c0 = c1;
        uint32_t *h = hist + (size_t)tid * 4 * TK_H1;
        topk_hist(x + c0, c1 - c0, h);
        KVS_OMP(barrier)
        KVS_OMP(single)
        {
            for (int t = 0; t < nt; t++) {
                uint32_t *ht = hist + (size_t)t * 4 * TK_H1;
                for (uint32_t b = 0; b < TK_H1; b++) {
                    uint32_t v = ht[b] + ht[b + TK_H1] + ht[b + 2 * TK_H1] + ht[b + 3 * TK_H1];
                    if (t) hist[b] += v; else hist[b] = v;
                }
            }
            b1 = topk_find_bucket(hist, TK_H1, k, &above);
        }
        /* candidates of bucket b1, in place within this chunk's range of cand */
        int64_t nc = 0;
        for (int64_t i = c0; i < c1; i++) {
            uint32_t kk = topk_key(x[i]);
            if ((kk >> (32 - TK_B1)) == b1) cand[c0 + nc++] = kk;
        }
        cnt[tid] = nc;
        KVS_OMP(barrier)
        KVS_OMP(single)
        {
            int64_t tot = 0;
            for (int t = 0; t < nt; t++) {
                int64_t t0 = (int64_t)t * chunk;
                if (t0 != tot) memmove(cand + tot, cand + t0, (size_t)cnt[t] * sizeof *cand);
                tot += cnt[t];
            }
            s = topk_refine(cand, tot, k - above);
        }
        /* count, per chunk, keys > thresh and keys == thresh */
        int64_t gt = 0, eq = 0;
        for (int64_t i = c0; i < c1; i++) {
            uint32_t kk = topk_key(x[i]);
            gt += kk > s.thresh;
            eq += kk == s.thresh;
        }
        cnt[nt + tid] = gt;
        cnt[2 * nt + tid] = eq;
        KVS_OMP(barrier)
        int64_t out0 = 0, eq_before = 0;
        for (int t = 0; t < tid; t++) {
            int64_t e = cnt[2 * nt + t];
            int64_t take = s.n_eq - eq_before < e ? s.n_eq - eq_before : e;
            if (take < 0) take = 0;
            out0 += cnt[nt + t] + take;
            eq_before += e;
        }
        int64_t eq_allow = s.n_eq - eq_before;
        int64_t m = out0, eqn = 0;
        for (int64_t i = c0; i < c1; i++) {
            uint32_t kk = topk_key(x[i]);
            if (kk > s.thresh || (kk == s.thresh && eqn < eq_allow)) {
                if (kk == s.thresh) eqn++;
                key[m] = kk;
                idx[m] = (int32_t)i;
                m++;
            }
        }
    }
    topk_emit(x, key, idx, tk, ti, k, a->p.order_by_index, oi, ov);
    free(hist); free(cnt); free(cand); free(key);
    return KVS_OK;
}
