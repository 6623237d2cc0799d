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

/* ---- converting scatter: f32 rows -> the KV cache's row type (the cache's append) ----
 * Encoders mirror core/quant/quant_encode.c operation by operation (its scale rules: llama.cpp's
 * reference quantizers): f16 / bf16 round to nearest even; q8_0 d = amax / 127; q4_0 d = m / -8
 * (m the value of largest magnitude); q4_1 d = (max - min) / 15 with the stored min; iq4_nl the
 * weighted least-squares search over 15 candidate scales (in double where the device has fp64,
 * as on the host; else in float); qh8 (QuantSpec's hierarchical type, both planes) d = f16(16 (max -
 * min) / 255), m = f16(min + 7.5 (max - min) / 255), codes round half up against the stored d, m. The coding scale is the f32 one, the stored one its binary16
 * rounding. Divisions follow the device's single-precision rules (correctly rounded on CPU
 * runtimes such as PoCL; OpenCL allows 2.5 ulp elsewhere, which can move a code by one step). */
#ifndef DT
#define DT QT_Q8_0
#endif
#if DT == QT_IQ4_NL && defined(cl_khr_fp64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double acc_t;
#else
typedef float acc_t;
#endif

/* binary32 -> binary16 bits, round to nearest even; NaN stays NaN (quiet), overflow gives inf
 * (as kvs_f32_to_f16 on the host) */
inline ushort f32_to_f16_bits(float f) {
    uint x = as_uint(f);
    uint sign = (x >> 16) & 0x8000u, ex = (x >> 23) & 0xffu, mant = x & 0x7fffffu;
    if (ex == 0xffu) return (ushort)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
    int e = (int)ex - 127 + 15;
    if (e >= 0x1f) return (ushort)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (ushort)sign;
        mant |= 0x800000u;
        uint shift = (uint)(14 - e);
        uint hv = mant >> shift, rem = mant & ((1u << shift) - 1u), mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (hv & 1u))) hv++;
        return (ushort)(sign | hv);
    }
    uint h = ((uint)e << 10) | (mant >> 13), rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (ushort)(sign | h);
}
/* round to nearest even; NaN stays a quiet NaN (as kvs_f32_to_bf16) */
inline ushort f32_to_bf16_bits(float f) {
    uint x = as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (ushort)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (ushort)(x >> 16);
}
inline void put_f16(__global uchar *p, float f) {
    ushort h = f32_to_f16_bits(f);
    p[0] = (uchar)(h & 0xffu);
    p[1] = (uchar)(h >> 8);
}
/* trunc(a) clamped to [0, 15]; NaN gives 0 */
inline int code15(float a) { return !(a >= 0.0f) ? 0 : a >= 15.0f ? 15 : (int)a; }
inline int iq4_nearest(float v) {
    int best = 0;
    float bd = fabs(v - (float)kvs_iq4_values[0]);
    for (int k = 1; k < 16; k++) {
        float e = fabs(v - (float)kvs_iq4_values[k]);
        if (e < bd) {
            bd = e;
            best = k;
        }
    }
    return best;
}

/* one block of 32 values x (private) into b */
inline void enc_block(const float *x, __global uchar *b) {
#if DT == QT_Q8_0
    float amax = 0.0f;
    for (int i = 0; i < 32; i++) amax = fmax(amax, fabs(x[i]));
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int i = 0; i < 32; i++) {
        float q = round(x[i] * id);
        q = q > 127.0f ? 127.0f : q < -127.0f ? -127.0f : q == q ? q : 0.0f;
        b[2 + i] = (uchar)(char)q;
    }
#elif DT == QT_Q4_0
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < 32; i++)
        if (fabs(x[i]) > amax) {
            amax = fabs(x[i]);
            m = x[i];
        }
    const float d = m / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int i = 0; i < 16; i++) b[2 + i] = (uchar)(code15(x[i] * id + 8.5f) | code15(x[i + 16] * id + 8.5f) << 4);
#elif DT == QT_Q4_1
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int i = 0; i < 32; i++) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    const float d = (hi - lo) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, lo);
    for (int i = 0; i < 16; i++)
        b[4 + i] = (uchar)(code15((x[i] - lo) * id + 0.5f) | code15((x[i + 16] - lo) * id + 0.5f) << 4);
#elif DT == QT_IQ4_NL
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < 32; i++)
        if (fabs(x[i]) > amax) {
            amax = fabs(x[i]);
            m = x[i];
        }
    if (amax == 0.0f) {
        b[0] = 0;
        b[1] = 0;
        for (int i = 0; i < 16; i++) b[2 + i] = 0x88; /* code 8 = +1 times d = 0 */
        return;
    }
    float best_d = m / -127.0f, best = -1.0f;
    for (int t = -7; t <= 7; t++) {
        const float id = ((float)t - 127.0f) / m;
        acc_t sqx = 0, sq2 = 0;
        for (int i = 0; i < 32; i++) {
            const acc_t q = kvs_iq4_values[iq4_nearest(x[i] * id)], w = (acc_t)x[i] * x[i];
            sqx += w * q * x[i];
            sq2 += w * q * q;
        }
        if (sq2 > 0 && (best < 0.0f || sqx * sqx > (acc_t)best * sq2)) {
            best_d = (float)(sqx / sq2);
            best = (float)(sqx * sqx / sq2);
        }
    }
    put_f16(b, best_d);
    const float ds = qf16((qrow_t)b), id = ds != 0.0f ? 1.0f / ds : 0.0f;
    for (int i = 0; i < 16; i++) b[2 + i] = (uchar)(iq4_nearest(x[i] * id) | iq4_nearest(x[i + 16] * id) << 4);
#endif
}

/* qh8 (kvs_qh8_encode_row, operation by operation): one block of 32 values x into the upper block
 * H (a q4_1 block: d, m, upper nibbles) and the lower block L (16 bytes of lower nibbles) */
inline void enc_qh8(const float *x, __global uchar *H, __global uchar *L) {
    float mn = FLT_MAX, mx = -FLT_MAX;
    for (int i = 0; i < 32; i++) {
        if (x[i] < mn) mn = x[i];
        if (x[i] > mx) mx = x[i];
    }
    if (!(mn <= mx)) mn = mx = 0.0f; /* all NaN */
    const float s0 = (mx - mn) / 255.0f;
    const ushort hd = f32_to_f16_bits(16.0f * s0), hm = f32_to_f16_bits(mn + 7.5f * s0);
    H[0] = (uchar)(hd & 0xffu);
    H[1] = (uchar)(hd >> 8);
    H[2] = (uchar)(hm & 0xffu);
    H[3] = (uchar)(hm >> 8);
    const float d = qh2f(hd), m = qh2f(hm), is = d > 0.0f ? 16.0f / d : 0.0f;
    int u[32];
    for (int i = 0; i < 32; i++) {
        const float a = (x[i] - m) * is + 8.0f; /* round half up of (x - m)/s + 7.5 */
        u[i] = !(a >= 0.0f) ? 0 : a >= 255.0f ? 255 : (int)a;
    }
    for (int i = 0; i < 16; i++) {
        H[4 + i] = (uchar)((u[i] >> 4) | (u[i + 16] >> 4) << 4);
        L[i] = (uchar)((u[i] & 15) | (u[i + 16] & 15) << 4);
    }
}

/* Scatter with conversion: dst row idx[g][i] (or idx[i]) = src row i of group g converted to DT,
 * src f32 [G][n][nv] or token-major [n][G][nv] (src_off in floats), dst [G][dst_rows] rows of
 * row_bytes (dst_off in bytes); DT == QT_QH8: dst the upper plane (row_bytes = nv / 32 * 20), dlo
 * the lower plane (rows of nv / 2 bytes, dlo_off in bytes; unused for the other types).
 * Duplicates: the winner pass above (highest i). One item per value (f16, bf16) or per 32-value
 * block (block types). Grid (units per row, n, G). */
__kernel void scatter_convert(__global const float *src, long src_off, __global const int *idx, long idx_off,
                              __global uchar *dst, long dst_off, __global const int *winner, int use_winner, int nv,
                              int row_bytes, int n, int n_groups, int dst_rows, int idx_shared, int token_major,
                              __global uchar *dlo, long dlo_off) {
    int w = get_global_id(0), i = get_global_id(1), g = get_global_id(2);
    if (i >= n || w >= (DT <= QT_BF16 ? nv : nv / 32)) return;
    int d = idx_at(idx, idx_off, idx_shared, n, g, i);
    if (d < 0 || d >= dst_rows) return;
    if (use_winner && winner[(long)g * dst_rows + d] != i) return;
    long srow = token_major ? (long)i * n_groups + g : (long)g * n + i;
    __global const float *x = src + src_off + srow * nv;
    __global uchar *drow = dst + dst_off + ((long)g * dst_rows + d) * row_bytes;
#if DT == QT_F16 || DT == QT_BF16
    ushort h = DT == QT_F16 ? f32_to_f16_bits(x[w]) : f32_to_bf16_bits(x[w]);
    ((__global ushort *)drow)[w] = h;
#else
    float v[32];
    int finite = 1;
    for (int c = 0; c < 32; c++) {
        v[c] = x[32 * w + c];
        finite &= fabs(v[c]) <= FLT_MAX;
    }
    if (!finite) { /* the NaN block (quant_encode.c): zero bytes, f16 NaN 0x7e00 as d (and m) */
        __global uchar *b = drow + (long)w * (DT == QT_QH8 ? 20 : qt_bytes(DT));
        const int nbytes = DT == QT_QH8 ? 20 : qt_bytes(DT);
        for (int c = 0; c < nbytes; c++) b[c] = 0;
        b[1] = 0x7e;
#if DT == QT_QH8 || DT == QT_Q4_1 /* a preprocessor test: a C || of constants warns in clang (PoCL) */
        b[3] = 0x7e;
#endif
#if DT == QT_QH8
        __global uchar *L = dlo + dlo_off + ((long)g * dst_rows + d) * (nv / 2) + (long)w * 16;
        for (int c = 0; c < 16; c++) L[c] = 0;
#endif
        return;
    }
#if DT == QT_QH8
    enc_qh8(v, drow + (long)w * 20, dlo + dlo_off + ((long)g * dst_rows + d) * (nv / 2) + (long)w * 16);
#else
    enc_block(v, drow + (long)w * qt_bytes(DT));
#endif
#endif
}
