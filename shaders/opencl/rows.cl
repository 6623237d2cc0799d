/* kvsieve OpenCL kernels: gather / scatter / compact of cache rows, bit-exact, in words of WORD_T
 * (uint4 when every row and offset is 16-byte aligned, uint when 4-byte aligned, else ushort).
 * Tensors are [G][N][row_words]; idx is [G][n] (idx_shared = 0) or [n] shared by all groups.
 * Indices outside [0, rows) skip their row (the destination row is left untouched). */

#ifndef WORD_T
#define WORD_T uint
#endif

inline int idx_at(__global const int *idx, long idx_off, int idx_shared, int n, int g, int i) {
    return idx[idx_off + (idx_shared ? 0 : (long)g * n) + i];
}

/* dst[g][i] = src[g][idx[g][i]], i < n. Grid (row_words, n, G). */
__kernel void gather_rows(__global const WORD_T *src, long src_off, __global const int *idx, long idx_off,
                          __global WORD_T *dst, long dst_off, int row_words, int n, int src_rows, int dst_rows,
                          int idx_shared) {
    int w = get_global_id(0), i = get_global_id(1), g = get_global_id(2);
    if (w >= row_words || i >= n) return;
    int s = idx_at(idx, idx_off, idx_shared, n, g, i);
    if (s < 0 || s >= src_rows) return;
    dst[dst_off + ((long)g * dst_rows + i) * row_words + w] = src[src_off + ((long)g * src_rows + s) * row_words + w];
}

/* Scatter, pass 1: winner[g][d] = max i with idx[g][i] == d (deterministic: integer max). */
__kernel void scatter_winners(__global const int *idx, long idx_off, __global int *winner, int n, int dst_rows,
                              int idx_shared) {
    int i = get_global_id(0), g = get_global_id(1);
    if (i >= n) return;
    int d = idx_at(idx, idx_off, idx_shared, n, g, i);
    if (d < 0 || d >= dst_rows) return;
    atomic_max(&winner[(long)g * dst_rows + d], i);
}

/* Scatter, pass 2: dst[g][idx[g][i]] = src row i of group g when i is the winner (highest i).
 * src is [G][n][row] or, token-major, [n][G][row]. winner == NULL-equivalent: use_winner = 0.
 * Grid (row_words, n, G). */
__kernel void scatter_rows(__global const WORD_T *src, long src_off, __global const int *idx, long idx_off,
                           __global WORD_T *dst, long dst_off, __global const int *winner, int use_winner,
                           int row_words, int n, int n_groups, int dst_rows, int idx_shared, int token_major) {
    int w = get_global_id(0), i = get_global_id(1), g = get_global_id(2);
    if (w >= row_words || i >= n) return;
    int d = idx_at(idx, idx_off, idx_shared, n, g, i);
    if (d < 0 || d >= dst_rows) return;
    if (use_winner && winner[(long)g * dst_rows + d] != i) return;
    long srow = token_major ? (long)i * n_groups + g : (long)g * n + i;
    dst[dst_off + ((long)g * dst_rows + d) * row_words + w] = src[src_off + srow * row_words + w];
}

/* Compact, pass 2: t[g][i] = tmp[g][i] for i < n with a valid index (tmp [G][n][row]).
 * Grid (row_words, n, G). */
__kernel void compact_back(__global const WORD_T *tmp, __global const int *idx, long idx_off,
                           __global WORD_T *t, long t_off, int row_words, int n, int rows, int idx_shared) {
    int w = get_global_id(0), i = get_global_id(1), g = get_global_id(2);
    if (w >= row_words || i >= n) return;
    int s = idx_at(idx, idx_off, idx_shared, n, g, i);
    if (s < 0 || s >= rows) return;
    t[t_off + ((long)g * rows + i) * row_words + w] = tmp[((long)g * n + i) * row_words + w];
}
