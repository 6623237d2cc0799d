/* kvsieve OpenCL kernels: deterministic top-k over rows far longer than a work-group.
 *
 * Each float maps to an order-preserving 32-bit key (NaN -> 0, below every number; -0 -> +0).
 * The k-th largest key T of a row is found by a 4-pass radix select (8 bits per pass: chunked
 * local histograms with integer atomics, summed into a per-row histogram with integer atomics,
 * then a per-row bin choice). The selection is every entry
 * with key > T plus the lowest-index entries with key == T (ties: lowest index). Survivors are
 * written in index order to a candidate array (per-chunk counts + exclusive scan), encoded as
 * 64-bit sort keys, and bitonic-sorted (local memory for blocks, global steps above).
 * Everything is integer arithmetic: the result is identical on every run and device.
 *
 * Row layout: x [rows][n] (element offset x_off); chunk c of a row covers [c*CH, (c+1)*CH).
 * State st[row][4] = {prefix, remaining, len, kk}: len = valid entries, kk = min(k, len). */

#ifndef TK_WG
#define TK_WG 256         /* work-group of the chunk kernels */
#endif
#ifndef LB
#define LB 2048           /* elements per local bitonic block (power of two) */
#endif
#ifndef SORT_WG
#define SORT_WG 256       /* work-group of the local sort */
#endif

inline uint fkey(float f) {
    uint b = as_uint(f);
    uint a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return 0u;          /* NaN: lowest */
    if (a == 0u) return 0x80000000u;         /* -0 == +0 */
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

/* Inclusive scan (Hillis-Steele) of two TK_WG-entry local arrays at once; every item of the
 * work-group calls it (it holds barriers). */
inline void scan2(__local uint *sg, __local uint *se, int lid) {
    for (int off = 1; off < TK_WG; off <<= 1) {
        uint a = lid >= off ? sg[lid - off] : 0u, b = lid >= off ? se[lid - off] : 0u;
        barrier(CLK_LOCAL_MEM_FENCE);
        sg[lid] += a;
        se[lid] += b;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* Row state, and the row's histogram zeroed. Grid (rows). */
__kernel void tk_init(__global const int *row_len, long rl_off, int has_rl, int n, int k, __global uint *st,
                      int rows, __global uint *H) {
    int r = get_global_id(0);
    if (r >= rows) return;
    for (int b = 0; b < 256; b++) H[(long)r * 256 + b] = 0u;
    int len = n;
    if (has_rl) len = clamp(row_len[rl_off + r], 0, n);
    int kk = min(k, len);
    st[4 * r + 0] = 0u;
    st[4 * r + 1] = (uint)kk;
    st[4 * r + 2] = (uint)len;
    st[4 * r + 3] = (uint)kk;
}

/* Histogram of digit (key >> shift) & 255 over the entries of chunk c whose higher digits equal
 * the prefix, added into the row's histogram H [rows][256] (zero before the pass) with integer
 * atomics: the sums do not depend on the order. Grid (C * TK_WG, rows). The first passes see few distinct digits
 * (the sign and exponent bits of similar numbers), so the work-group counts into HCOPY
 * sub-histograms (item lid into copy lid % HCOPY, copies HSTRIDE apart so that they sit in
 * different banks) and sums them at the end: 1/HCOPY of the atomic contention on a hot bin. */
#define HCOPY (TK_WG >= 8 ? 8 : TK_WG)
#define HSTRIDE 257
__kernel __attribute__((reqd_work_group_size(TK_WG, 1, 1)))
void tk_hist(__global const float *x, long x_off, long n, int CH, int C, __global const uint *st,
             __global uint *H, int shift) {
    __local uint hist[HCOPY * HSTRIDE];
    int lid = get_local_id(0);
    int c = get_group_id(0);
    long r = get_group_id(1);
    for (int b = lid; b < HCOPY * HSTRIDE; b += TK_WG) hist[b] = 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    uint prefix = st[4 * r], len = st[4 * r + 2];
    uint himask = shift >= 24 ? 0u : (0xffffffffu << (shift + 8));
    long j0 = (long)c * CH;
    long j1 = min(j0 + CH, (long)len);
    __global const float *xr = x + x_off + r * n;
    __local uint *hc = hist + (lid % HCOPY) * HSTRIDE;
    for (long j = j0 + lid; j < j1; j += TK_WG) {
        uint key = fkey(xr[j]);
        if ((key & himask) == prefix) atomic_inc(&hc[(key >> shift) & 255u]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    __global uint *h = H + r * 256;
    for (int b = lid; b < 256; b += TK_WG) {
        uint sum = 0u;
        for (int t = 0; t < HCOPY; t++) sum += hist[t * HSTRIDE + b];
        if (sum) atomic_add(&h[b], sum);
    }
}

/* Chooses the digit containing the remaining-th largest entry: the largest digit b whose suffix
 * count (entries with digit >= b) reaches `remaining` (digit 0 when none does), by a parallel
 * suffix scan of the 256 bins; zeroes the row's histogram for the next pass. Grid (TK_WG, rows). */
__kernel __attribute__((reqd_work_group_size(TK_WG, 1, 1)))
void tk_select(__global uint *H, __global uint *st, int shift) {
    __local uint cnt[2][257];
    int lid = get_local_id(0);
    long r = get_group_id(1);
    for (int b = lid; b < 256; b += TK_WG) {
        cnt[0][b] = H[r * 256 + b];
        H[r * 256 + b] = 0u; /* ready for the next pass */
    }
    if (lid == 0) {
        cnt[0][256] = 0u;
        cnt[1][256] = 0u;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int cur = 0;
    for (int off = 1; off < 256; off <<= 1) {
        for (int b = lid; b < 256; b += TK_WG) cnt[cur ^ 1][b] = cnt[cur][b] + (b + off < 256 ? cnt[cur][b + off] : 0u);
        barrier(CLK_LOCAL_MEM_FENCE);
        cur ^= 1;
    }
    uint kr = st[4 * r + 1];
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    for (int b = lid; b < 256; b += TK_WG) {
        uint above = cnt[cur][b + 1]; /* entries with digit > b */
        int pick = b == 0 ? above < kr : (cnt[cur][b] >= kr && above < kr);
        if (pick) {
            st[4 * r] |= ((uint)b) << shift;
            st[4 * r + 1] = kr - above;
        }
    }
}

/* Per-chunk counts of entries with key > T and key == T: CNT [rows][C][2]. Grid (C*TK_WG, rows). */
__kernel __attribute__((reqd_work_group_size(TK_WG, 1, 1)))
void tk_count(__global const float *x, long x_off, long n, int CH, int C, __global const uint *st,
              __global uint *CNT) {
    __local uint sg[TK_WG], se[TK_WG];
    int lid = get_local_id(0);
    int c = get_group_id(0);
    long r = get_group_id(1);
    uint T = st[4 * r], len = st[4 * r + 2];
    long j0 = (long)c * CH;
    long j1 = min(j0 + CH, (long)len);
    __global const float *xr = x + x_off + r * n;
    uint gt = 0u, eq = 0u;
    for (long j = j0 + lid; j < j1; j += TK_WG) {
        uint key = fkey(xr[j]);
        gt += key > T;
        eq += key == T;
    }
    sg[lid] = gt;
    se[lid] = eq;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = TK_WG / 2; s > 0; s >>= 1) {
        if (lid < s) {
            sg[lid] += sg[lid + s];
            se[lid] += se[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        CNT[(r * C + c) * 2] = sg[0];
        CNT[(r * C + c) * 2 + 1] = se[0];
    }
}

/* Exclusive scan of the chunk counts of each row, in place: item t sums a contiguous block of
 * chunks, the block sums are scanned in local memory (Hillis-Steele), then each item writes its
 * block's prefixes. Grid (TK_WG, rows). */
__kernel __attribute__((reqd_work_group_size(TK_WG, 1, 1)))
void tk_scan(__global uint *CNT, int C, int rows) {
    __local uint sg[TK_WG], se[TK_WG];
    int lid = get_local_id(0);
    long r = get_group_id(1);
    if (r >= rows) return;
    int per = (C + TK_WG - 1) / TK_WG;
    int c0 = min(lid * per, C), c1 = min(c0 + per, C);
    __global uint *cr = CNT + r * C * 2;
    uint g = 0u, e = 0u;
    for (int c = c0; c < c1; c++) {
        g += cr[2 * c];
        e += cr[2 * c + 1];
    }
    sg[lid] = g;
    se[lid] = e;
    barrier(CLK_LOCAL_MEM_FENCE);
    scan2(sg, se, lid);
    g = sg[lid] - g;
    e = se[lid] - e;
    for (int c = c0; c < c1; c++) {
        uint a = cr[2 * c], b = cr[2 * c + 1];
        cr[2 * c] = g;
        cr[2 * c + 1] = e;
        g += a;
        e += b;
    }
}

/* Writes the selected entries of chunk c, in index order, to cand [rows][NP]: the entries with
 * key > T at [0, kk - rem), the first rem entries with key == T after them. Sort keys:
 * by_index ? j : (~key << 32 | j) (ascending = larger score first, then lower index).
 * Each work-item owns a contiguous slice of CH / TK_WG entries. Grid (C * TK_WG, rows). */
__kernel __attribute__((reqd_work_group_size(TK_WG, 1, 1)))
void tk_write(__global const float *x, long x_off, long n, int CH, int C, __global const uint *st,
              __global const uint *OFF, __global ulong *cand, int NP, int by_index) {
    __local uint sg[TK_WG], se[TK_WG];
    int lid = get_local_id(0);
    int c = get_group_id(0);
    long r = get_group_id(1);
    uint T = st[4 * r], rem = st[4 * r + 1], len = st[4 * r + 2], kk = st[4 * r + 3];
    int ipt = CH / TK_WG;
    long j0 = (long)c * CH + (long)lid * ipt;
    long j1 = min(j0 + ipt, (long)len);
    __global const float *xr = x + x_off + r * n;
    uint gt = 0u, eq = 0u;
    for (long j = j0; j < j1; j++) {
        uint key = fkey(xr[j]);
        gt += key > T;
        eq += key == T;
    }
    sg[lid] = gt;
    se[lid] = eq;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* inclusive scan of the items' counts (Hillis-Steele), then offsets = chunk offset + scan - own */
    scan2(sg, se, lid);
    if (kk == 0u) return;
    uint pg = OFF[(r * C + c) * 2] + sg[lid] - gt, pe = OFF[(r * C + c) * 2 + 1] + se[lid] - eq, ngt = kk - rem;
    __global ulong *cr = cand + r * NP;
    for (long j = j0; j < j1; j++) {
        uint key = fkey(xr[j]);
        long pos = -1;
        if (key > T) pos = pg++;
        else if (key == T) {
            if (pe < rem) pos = ngt + pe;
            pe++;
        }
        if (pos >= 0) cr[pos] = by_index ? (ulong)j : ((((ulong)(~key)) << 32) | (ulong)j);
    }
}

inline void cmp_swap(__local ulong *a, int i, int l, int asc) {
    ulong u = a[i], v = a[l];
    if (asc ? (u > v) : (u < v)) {
        a[i] = v;
        a[l] = u;
    }
}

/* Bitonic stages in local memory over blocks of LB elements (block b of row r at b * LB): for
 * size = size_start .. size_end (doubling), strides from (size == size_start ? stride_start :
 * size / 2) down to 1; direction from the element's index in the row. Grid (nblocks*SORT_WG, rows). */
__kernel __attribute__((reqd_work_group_size(SORT_WG, 1, 1)))
void tk_sort_local(__global ulong *cand, int NP, int size_start, int size_end, int stride_start) {
    __local ulong a[LB];
    int lid = get_local_id(0);
    long base = (long)get_group_id(1) * NP + (long)get_group_id(0) * LB;
    int gbase = get_group_id(0) * LB;
    int nb = min(LB, NP);
    for (int e = lid; e < nb; e += SORT_WG) a[e] = cand[base + e];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int size = size_start; size <= size_end; size <<= 1) {
        for (int stride = (size == size_start ? stride_start : size / 2); stride > 0; stride >>= 1) {
            for (int t = lid; t < nb / 2; t += SORT_WG) {
                int i = 2 * stride * (t / stride) + (t % stride);
                int asc = ((gbase + i) & size) == 0;
                cmp_swap(a, i, i + stride, asc);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    for (int e = lid; e < nb; e += SORT_WG) cand[base + e] = a[e];
}

/* One global bitonic step (stride >= LB). Grid (NP / 2, rows). */
__kernel void tk_sort_step(__global ulong *cand, int NP, int size, int stride) {
    int t = get_global_id(0);
    if (t >= NP / 2) return;
    __global ulong *a = cand + (long)get_global_id(1) * NP;
    int i = 2 * stride * (t / stride) + (t % stride);
    int l = i + stride;
    int asc = (i & size) == 0;
    ulong u = a[i], v = a[l];
    if (asc ? (u > v) : (u < v)) {
        a[i] = v;
        a[l] = u;
    }
}

/* idx[r][t] / val[r][t] from the sorted candidates; t >= kk: -1 / -inf. Grid (k, rows). */
__kernel void tk_out(__global const float *x, long x_off, long n, __global const uint *st,
                     __global const ulong *cand, int NP, __global int *idx, long idx_off, __global float *val,
                     long val_off, int has_val, int k) {
    int t = get_global_id(0);
    long r = get_global_id(1);
    if (t >= k) return;
    uint kk = st[4 * r + 3];
    int j = -1;
    float v = -INFINITY;
    if ((uint)t < kk) {
        j = (int)(uint)(cand[r * NP + t] & 0xffffffffu);
        v = x[x_off + r * n + j];
    }
    idx[idx_off + r * k + t] = j;
    if (has_val) val[val_off + r * k + t] = v;
}
