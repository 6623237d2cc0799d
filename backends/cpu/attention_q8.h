/* CPU backend attention: the 8-bit paths of decode attention over a block-quantized K and V
 * (variants attention:avx512-vnni and attention:avx2-q8; issue 17): 8-bit query codes against a
 * q8_0 / q4_0 K, 8-bit softmax weights against a q8_0 / q4_0 V; and QuantSpec's qh8 (8-bit read)
 * and q4_1 (its 4-bit view) through the same schemes ("qh8 and q4_1" below).
 *
 * Scheme (llama.cpp's CPU attention quantizes Q to K's vec_dot_type, q8_0 for q8_0 / q4_0 caches,
 * and dots it with the K blocks in integers: ggml's quantize_row_q8_0 and vec_dot_q4_0_q8_0 /
 * vec_dot_q8_0_q8_0; the scheme read there, this code our own): each packed query row (the G query
 * heads of a kv head, attention.h) is cut into blocks of 32 values along head_dim, as K is; block b
 * of row r gets dq = amax_b / 127 (f32, not rounded to f16) and codes qq_i = rint(q_i * 127 / amax_b)
 * in [-127, 127]. A key block (d_k, codes c) then contributes d_k * dq * sum_i c_i qq_i, the sum
 * exact in 32-bit integers (vpdpbusd on AVX512-VNNI, vpmaddubsw + vpmaddwd on AVX2), the product
 * and the sum over blocks in f32.
 *
 * Error bound of the query codes (what tests/test_ops_kvquant.c checks for these variants, with the
 * weights' bound below):
 * |q_i - dq qq_i| <= dq (1/2 + 2^-15) (rint of the f32 product q_i * fl(127 / amax), then dq =
 * fl(amax / 127)), so every logit moves by at most
 *     E_rj = scale * sum_b dq_b (1/2 + 2^-15) sum_{i in b} |k_ji|   (k the dequantized key)
 * plus f32 rounding. With E_r = max_j E_rj the softmax weights move by a factor within
 * [e^(-2 E_r), e^(2 E_r)], hence |out - out_exact|_t <= (e^(2 E_r) - 1) sum_j p_j |v_jt|, key_mass
 * and probe probabilities by (e^(2 E_r) - 1) p, row_max by E_r, the argmax's logit is within 2 E_r
 * of the maximum. For unit-normal q and keys of head_dim 128 the bound E_r is about 0.1 (dq ~ 0.018,
 * sum |k| ~ 26 per block, 4 blocks, scale 0.088); the measured error is far smaller (random
 * rounding: output nmse 2e-5 .. 7e-5 in tests/test_ops_kvquant.c).
 *
 * P.V over a q8_0 / q4_0 V (any K type) is in integers as well: V = |d_v| (x - o) per block, x the
 * code (XORed for a negative d_v, so that every weight is >= 0: q4_0 x = 15 - c, o = 7, else x = c,
 * o = 8; q8_0 x = ~c, o = -1, else x = c, o = 0). The weights W = P |d_v| (the softmax numerators
 * of the tile, so P <= 1) of one query row, block b and chunk of AQ8_PV_CH = 64 keys (chunks aligned
 * to key 0: tiles start at multiples of ATT_BK) get s = max W / wmax and w = rint(W / s) in
 * 0..wmax (u8; wmax = 255, 127 for q8_0 on AVX2, whose vpmaddubsw sums two products in 16 bits).
 * V's codes of 4 keys are interleaved into the 4 bytes of each 32-bit lane (lane = column; unpack
 * shuffles on AVX2, one vpermd + one vpshufb on AVX512-VNNI, shared by the M rows), each row's 4
 * weights broadcast as one dword, vpdpbusd (AVX2:
 * vpmaddubsw + vpmaddwd) accumulates sum_j w_j x_jt in int32 over the chunk (|sum| <= 64 * 255 * 128
 * < 2^24: exact in f32), and O_t += s (sum_j w_j x_jt - sum_j w_j o_j) in f32.
 * Error bound of that step: rint of fl(W * fl(wmax / max W)) with W <= max W, then s = fl(max W /
 * wmax): |W - s w| <= s (1/2 + 2^-14), so, with p the normalised weights (p~ the kernel's, within
 * e^(+-2 E_r) of the exact ones), the output moves by at most
 *     B_rt = e^(2 E_r) (1/2 + 2^-14) / wmax sum_chunks max_{j in chunk} p_j |d_v(j, b)| sum_{j in chunk} |x_jt - o_j|
 * (|x_jt - o_j| = |v_jt| / |d_v(j, b)|, b = t / 32), added to the bound above: |out - out_exact|_t
 * <= (e^(2 E_r) - 1) sum_j p_j |v_jt| + B_rt (tests/test_ops_kvquant.c, q8_check). Chunks whose
 * largest weight is below 2^-100 are dropped (their share is below 2^-100 * 64 * 128 |d_v| / l).
 * A tile with a NaN in P or a non-finite V block scale takes the f32 kernel (NaN / inf as there).
 * Not bit-compatible with the f32 path. Chosen by the variants (KVS_VARIANT=attention:avx512-vnni
 * etc.) and by the automatic choice on x86 for these K / V types (kvs_cpu_att_q8, cpu_kernels.h: the
 * VNNI kernels on a CPU with AVX512-VNNI, the AVX2 ones where the ISA is AVX2), as llama.cpp's CPU
 * path does; forcing attention:avx512 / avx2 keeps the f32 query. A row gets the same bits whatever
 * the number of query rows beside it (the codes and weights are per row). */
#ifndef KVS_BACKENDS_CPU_ATTENTION_Q8_H
#define KVS_BACKENDS_CPU_ATTENTION_Q8_H

#include <stdint.h>

#include "internal.h"

/* M packed query rows quantized for one task: q [M][d] codes, dq [M][d/32] block scales, corr
 * [M][d/4] the integer start value of every 4-code group's dot product (-off * the sum of the 4
 * codes: the offset of unsigned K codes, 8 for q4_0's 0..15, 128 for q8_0 + 128; AVX2's tails of
 * fewer than 8 keys over q8_0 dot signed codes by the sign trick and ignore corr). */
typedef struct kvs_att_q8 {
    const int8_t *q;
    const float *dq;
    const int32_t *corr;
    const int32_t *corrb; /* [M][d/32]: the sum of each block's 8 corr values */
    int64_t d;
    const uint8_t *pf;    /* rows to prefetch into L2 while the keys are read (the tile's V, row stride pf_rb,
                           * the same count as the keys), or NULL */
    int64_t pf_rb;
} kvs_att_q8;

/* Quantizes Qp [M][d] (d % 32 == 0) as above into q, dq, corr (sizes above); off: the K type's
 * code offset for the kernel (kvs_cpu_att_q8_offset); corrb [M][d/32] the block sums of corr. Portable C (O(M d) per task, against the
 * n_kv d bytes of K the kernels read). */
void kvs_cpu_att_q8_quantize(const float *Qp, int64_t M, int64_t d, int32_t off, int8_t *q, float *dq, int32_t *corr,
                             int32_t *corrb);

/* S[r*lds + j] = scale * sum_b d_k(j, b) dq(r, b) sum_{i in b} c_ji qq_ri for r < M, j < n: K rows
 * of dtype dt (Q8_0 or Q4_0; row stride rb bytes, d = Q->d values, whole blocks). Returns 0
 * (nothing done) for other dtypes. _vnni: AVX512-VNNI + VL (256-bit vpdpbusd; CPUs with
 * kvs_cpu_avx512_vnni), _avx2: AVX2 (vpmaddubsw: |codes| <= 15 for q4_0; q8_0's code + 128 split
 * into two nibbles 0..15, each summed over a block in 16 bits, <= 8 * 2 * 15 * 127 = 30480; the
 * last n % 8 keys by the sign trick, pairs at most 2 * 128 * 127 < 2^15: never saturating). */
int kvs_cpu_att_qk_q8_vnni(kvs_dtype dt, const void *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n,
                           float scale, float *S, int64_t lds);
int kvs_cpu_att_qk_q8_avx2(kvs_dtype dt, const void *K, int64_t rb, const kvs_att_q8 *Q, int64_t M, int64_t n,
                           float scale, float *S, int64_t lds);

/* O[r][:] += sum_{j < n} P[r*ldp + j] V_j for r < M over a q8_0 / q4_0 V (d % 32 == 0, d <= 256,
 * n <= 256; row stride rb bytes; P >= 0, the keys of one tile starting at a multiple of 64) on 8-bit
 * weights as above (x86/att_q8.h: aq8_pv; _vnni: AVX512-VNNI, 4 rows x 32 columns in 512-bit
 * registers; _avx2: 2 rows x 32 columns, 256-bit); a tile with NaN in P or a non-finite block scale
 * takes the f32 kernel (W = P d_v in f32, codes converted: the f32 path's products up to rounding).
 * 0 (nothing done) for other dtypes and sizes. */
int kvs_cpu_att_pv_q8_vnni(kvs_dtype dt, const void *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                           int64_t d, float *O);
int kvs_cpu_att_pv_q8_avx2(kvs_dtype dt, const void *V, int64_t rb, const float *P, int64_t ldp, int64_t M, int64_t n,
                           int64_t d, float *O);

/* qh8 and q4_1 (QuantSpec's 8-bit read, k_lo / v_lo given, and its 4-bit view, the draft's q4_1):
 * the same 8-bit schemes through the q8_0 / q4_0 kernels above. A qh8 value is an unsigned 8-bit
 * code u = 16 hi + lo on a step s = d/16 (core/quant/quant_blocks.h): x8 = s (u - 128) + cst with
 * cst = m + 120.5 s, i.e. a q8_0 block (code u - 128, scale s) plus a per-(key, block) constant; a
 * q4_1 value d c + m = d (c - 8) + cst with cst = m + 8 d, a q4_0 block plus a constant.
 * Read in place where a kernel takes the layout (x86/att_q8.h): on AVX512-VNNI Q.K^T in groups of
 * 16 keys (aq8h_tile16: both planes transposed as q4_0's, u = 16 hi + lo formed by vpternlogd, the
 * unsigned u or c dotted by vpdpbusd, x = step * code + cst' with step d/16 or d, cst' = m - 7.5 d/16
 * or m: the same products), P.V of a q4_1 V on every ISA (q4_0's chunk kernel at shifted block
 * addresses) and of a qh8 V on VNNI up to 4 query rows (aq8h_pv_chunk512: codes formed per 4 keys);
 * otherwise (the last n % 16 keys, AVX2's qh8, a qh8 V with more rows, whose codes are then formed
 * once) the tile is repacked into those blocks in the caller's scratch (aq8h_repack; the q8_0 block
 * keeps the f16 d, so the kernels run with scale / 16 and on 16 O, exact powers of two). The
 * constants are added in f32: S[r][j] += scale sum_b cst_jb
 * dq_rb sum_{i in b} qq_ri (sum_i qq_i cst dq = sum_i (dq qq_i) cst: q.x8 with the same quantized
 * query, so the query's error bound above holds unchanged with k the dequantized key, x8 or the
 * q4_1 value) and O[r][b*32 + t] += sum_j P[r][j] cst_jb (f32, from the unquantized weights).
 * The weights' bound above holds with |d_v| read as the repacked scale delta_jb (|s| for qh8, |d|
 * for q4_1) and |x_jt - o_j| = |v_jt - cst_jb| / delta_jb (|u - 128| <= 128, |c - 8| <= 8):
 *     B_rt = e^(2 E_r) (1/2 + 2^-14) / wmax sum_chunks max_{j in chunk} p_j delta_jb sum_{j in chunk} |v_jt - cst_jb| / delta_jb
 * (wmax as for q8_0 / q4_0: 255; qh8 on AVX2 127, the q8_0 kernel's). The constants' f32 products
 * add rounding only (relative 2^-24 of |cst| sum_j p_j: f32 tolerances). A non-finite block
 * scale or min gives non-finite output in that block's columns (the q8_0 / q4_0 f32 fallback and
 * the constant). Scratch: AQ8H_SCRATCH(head_dim / 32) bytes (x86/att_q8.h: 256 x 38 bytes per
 * block of a row; the attention's K / V tile buffers of 256 x head_dim floats hold it). dt must
 * be Q4_1 (the upper plane, row stride rb; the lower plane's rows are head_dim/2 bytes); head_dim
 * <= 256, n <= 256. Returns 0 (nothing done) otherwise. */
int kvs_cpu_att_qk_qh8_vnni(kvs_dtype dt, const void *K, const void *K_lo, int64_t rb, const kvs_att_q8 *Q, int64_t M,
                            int64_t n, float scale, float *S, int64_t lds, void *scratch);
int kvs_cpu_att_qk_qh8_avx2(kvs_dtype dt, const void *K, const void *K_lo, int64_t rb, const kvs_att_q8 *Q, int64_t M,
                            int64_t n, float scale, float *S, int64_t lds, void *scratch);
int kvs_cpu_att_pv_qh8_vnni(kvs_dtype dt, const void *V, const void *V_lo, int64_t rb, const float *P, int64_t ldp,
                            int64_t M, int64_t n, int64_t d, float *O, void *scratch);
int kvs_cpu_att_pv_qh8_avx2(kvs_dtype dt, const void *V, const void *V_lo, int64_t rb, const float *P, int64_t ldp,
                            int64_t M, int64_t n, int64_t d, float *O, void *scratch);

/* The code offset the kernel of `vnni` (1) or AVX2 (0) expects in corr for K of dtype dt: 8 for
 * Q4_0, 128 for Q8_0 (both ISAs); -1 when dt has no 8-bit kernel. */
static inline int32_t kvs_cpu_att_q8_offset(kvs_dtype dt, int vnni) {
    if (dt == KVS_Q4_0) return 8;
    if (dt == KVS_Q8_0) return 128;
    (void)vnni;
    return -1;
}

#endif
