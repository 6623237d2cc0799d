/* kvsieve OpenCL kernels: products and embedding lookups with block-quantized weights (Q4_0, Q4_1,
 * Q5_0, Q5_1, Q8_0, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS), reading the blocks directly
 * through qblocks.cl's decoder (the host puts qblocks.cl in front of this file): no dequantized copy
 * of a weight is ever made. Each weight value is decoded to f32 exactly as on the host, multiplied
 * by the f32 activation and accumulated in f32 (activations are never quantized).
 *   W [m][k] of type QT, rows of k / block blocks (w_off: byte offset); x [n][k], y [n][m] f32.
 * Knobs (host #defines, defaults below): QT, WG (qgemv's work-group), NR (qgemv rows per group). */

#ifndef QT
#define QT QT_Q8_0
#endif
#ifndef WG
#define WG 64
#endif
#ifndef NR
#define NR 4
#endif

/* Matrix-vector path for decoding-sized batches (n <= a few rows): one work-group per (output r,
 * NR rows of x); item lid takes the 32-value chunks lid, lid + WG, ... of W's row r, decodes each
 * once and applies it to the NR rows; a fixed-order tree sum per row (deterministic).
 * Grid (m * WG, ceil(n / NR)). */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void qgemv(__global const uchar *W, long w_off, __global const float *x, long x_off, __global float *y,
           long y_off, int m, int k, int n, int accumulate) {
    __local float sh[NR][WG];
    const int r = get_group_id(0), lid = get_local_id(0);
    const int i0 = get_group_id(1) * NR;
    const int nr = min(NR, n - i0);
    qrow_t wr = W + w_off + (long)r * qt_row_bytes(QT, k);
    __global const float *xr = x + x_off + (long)i0 * k;
    float acc[NR];
    for (int i = 0; i < NR; i++) acc[i] = 0.0f;
    float w[32];
    for (int t = lid; t < k / 32; t += WG) {
        qdec32(QT, wr, t, w);
        for (int i = 0; i < NR; i++) {
            if (i >= nr) break;
            __global const float *xc = xr + (long)i * k + 32 * t;
            float s = 0.0f;
            for (int c = 0; c < 32; c++) s += w[c] * xc[c];
            acc[i] += s;
        }
    }
    for (int i = 0; i < NR; i++) sh[i][lid] = acc[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = WG / 2; s > 0; s >>= 1) {
        if (lid < s)
            for (int i = 0; i < NR; i++) sh[i][lid] += sh[i][lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = lid; i < nr; i += WG) {
        long o = y_off + (long)(i0 + i) * m + r;
        y[o] = accumulate ? y[o] + sh[i][0] : sh[i][0];
    }
}

/* Matrix-matrix path (prefill, diffusion steps): a work-group of 64 items computes a tile of
 * TM = 64 outputs (rows of W) by TN = 32 rows of x. Per 32-value step of k, each item decodes one
 * W chunk (row lid of the tile) into local memory and loads 16 x values; then item (tx = lid % 16,
 * ty = lid / 16) accumulates its 4 W rows x 8 x rows. Tiles past m or n are zero-filled and not
 * written. Grid (ceil(m / 64) * 64, ceil(n / 32)); work-group (64, 1). */
#define TM 64
#define TN 32
__kernel __attribute__((reqd_work_group_size(64, 1, 1)))
void qgemm(__global const uchar *W, long w_off, __global const float *x, long x_off, __global float *y,
           long y_off, int m, int k, int n, int accumulate) {
    __local float Ws[TM][33];
    __local float Xs[TN][33];
    const int lid = get_local_id(0);
    const int r0 = get_group_id(0) * TM, i0 = get_group_id(1) * TN;
    const int tx = lid % 16, ty = lid / 16;
    const long rowb = qt_row_bytes(QT, k);
    const int wr = r0 + lid;
    qrow_t wrow = W + w_off + (long)min(wr, m - 1) * rowb;
    float acc[8][4];
    for (int a = 0; a < 8; a++)
        for (int b = 0; b < 4; b++) acc[a][b] = 0.0f;
    float w[32];
    for (int t = 0; t < k / 32; t++) {
        barrier(CLK_LOCAL_MEM_FENCE);
        if (wr < m) {
            qdec32(QT, wrow, t, w);
            for (int c = 0; c < 32; c++) Ws[lid][c] = w[c];
        } else {
            for (int c = 0; c < 32; c++) Ws[lid][c] = 0.0f;
        }
        for (int e = lid; e < TN * 32; e += 64) {
            int i = e / 32, c = e % 32;
            Xs[i][c] = i0 + i < n ? x[x_off + (long)(i0 + i) * k + 32 * t + c] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int c = 0; c < 32; c++) {
            float wv[4], xv[8];
            for (int b = 0; b < 4; b++) wv[b] = Ws[tx + 16 * b][c];
            for (int a = 0; a < 8; a++) xv[a] = Xs[ty + 4 * a][c];
            for (int a = 0; a < 8; a++)
                for (int b = 0; b < 4; b++) acc[a][b] += xv[a] * wv[b];
        }
    }
    for (int a = 0; a < 8; a++) {
        int i = i0 + ty + 4 * a;
        if (i >= n) break;
        for (int b = 0; b < 4; b++) {
            int r = r0 + tx + 16 * b;
            if (r >= m) continue;
            long o = y_off + (long)i * m + r;
            y[o] = accumulate ? y[o] + acc[a][b] : acc[a][b];
        }
    }
}

/* out[i][32 t + c] = table[ids[i]][32 t + c]: one item per 32-value chunk of a row; ids outside
 * [0, vocab) write a zero row (as the other embedding kernels). Grid (dim / 32, n). */
__kernel void qembedding(__global const uchar *table, long t_off, __global const int *ids, __global float *out,
                         long o_off, int dim, int vocab) {
    const int t = get_global_id(0), i = get_global_id(1);
    if (t >= dim / 32) return;
    const int id = ids[i];
    float v[32];
    if (id >= 0 && id < vocab)
        qdec32(QT, table + t_off + (long)id * qt_row_bytes(QT, dim), t, v);
    else
        for (int c = 0; c < 32; c++) v[c] = 0.0f;
    __global float *o = out + o_off + (long)i * dim + 32 * t;
    for (int c = 0; c < 32; c++) o[c] = v[c];
}
