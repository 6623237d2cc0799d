/* kvsieve OpenCL kernels: grouped-query attention, tiled, online softmax (FlashAttention, Dao et
 * al. 2022, alg. 1), plus the statistics passes (key mass, probe rows).
 *   q   [n_q][n_heads][HEAD_DIM] f32
 *   k   [n_kv_heads][cap][HEAD_DIM], v [n_kv_heads][cap][HEAD_DIM_V] (d_k, d_v; HEAD_DIM_V defaults
 *       to HEAD_DIM) of types K_T and V_T, chosen separately (qblocks.cl codes):
 *       f32, f16, bf16 (element rows), or q8_0, q4_0, q4_1, iq4_nl (rows of d / 32 blocks,
 *       decoded in 32-value chunks by qblocks.cl's decoders as they are loaded: the quantized
 *       cache is read directly, never copied dequantized); k_off / v_off count elements of the row
 *       type (f32: floats, f16 / bf16: halves, block types: bytes; bytes for every type when the
 *       types are read at run time, K_T = V_T = -1, see KV_RT below); or qh8 (QuantSpec's
 *       hierarchical cache, kt / vt = QT_QH8 at run time): k / v the q4_1 upper planes, klo / vlo
 *       the lower planes [n_kv_heads][cap][d / 2] bytes (klo_off / vlo_off in bytes),
 *       decoded to the 8-bit values (qdec_qh8); without a lower plane the upper one reads as q4_1
 *   out [n_q][n_heads][HEAD_DIM_V] f32
 * Query head g reads kv head g / G (G = n_heads / n_kv_heads); K/V are never expanded.
 * Key j is visible to query row i (head g, kv head h) iff j < min(n_kv, kv_len[h], row_len[i]),
 * (causal) kpos(h, j) <= qpos(i), and its logit scale * q.k + mask[i][j] is > -inf.
 * Running maxima start at -FLT_MAX so fully masked tiles stay finite.
 * Over 600 lines by reason: the backend builds one program from this one source per set of -D
 * values (HEAD_DIM, G, K_T, V_T, tile sizes; qblocks.cl in front); attn_main, attn_dec, attn_combine
 * and the two statistics passes share its visibility rules (key_limit, row_limit, query_pos,
 * key_pos) and K/V loads, which a split into several sources would have to copy. */

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef HEAD_DIM_V
#define HEAD_DIM_V HEAD_DIM /* d_v (v, out); HEAD_DIM is d_k (q, k) */
#endif
#ifndef G
#define G 1               /* query heads per kv head */
#endif
#ifndef BQ
#define BQ 64             /* query rows per work-group (work-group = BQ * G items) */
#endif
#ifndef BK
#define BK 32             /* keys per tile held in local memory */
#endif
#ifndef K_T
#define K_T QT_F32        /* storage of K (qblocks.cl code; -1: read at run time from kt) */
#endif
#ifndef V_T
#define V_T QT_F32        /* storage of V (-1: from vt) */
#endif
#ifndef KM_WG
#define KM_WG 64          /* work-group of the key-mass kernel */
#endif
#ifndef KM_TP
#define KM_TP 16          /* (row, head) pairs per local tile in the key-mass kernel */
#endif

/* f16 bits -> f32, exact, branch-free (see dense.cl). */
inline float f16_to_f32(ushort h) {
    uint em = (uint)(h & 0x7fffu);
    float f = as_float(em << 13) * 0x1.0p112f;
    f = em >= 0x7c00u ? as_float((em << 13) | 0x7f800000u) : f;
    return as_float(as_uint(f) | ((uint)(h & 0x8000u) << 16));
}

/* Per side (K, V): the pointer type, the row stride RS in its units, and either an element loader
 * LOAD_X(p, i) (element rows) or X_Q = 1 (block rows, read in 32-value chunks).
 * KV_RT (K_T == V_T == -1): one program for every pair of types, the kernels' kt / vt arguments
 * choosing the loads at run time (a uniform branch per tile; the host uses it for every pair but
 * f32/f16 ones, so that the 49 pairs of a shape share one program instead of compiling 49);
 * pointers are bytes, offsets in bytes. */
#if K_T < 0
#define KV_RT 1
#define K_PTR qrow_t
#define V_PTR qrow_t
#define K_RS qt_row_bytes(kt, HEAD_DIM)
#define V_RS qt_row_bytes(vt, HEAD_DIM_V)
#define LOAD_K(p, i) qelem(kt, (p), (i))
#define LOAD_V(p, i) qelem(vt, (p), (i))
#define K_Q 0
#define V_Q 0
#else
#define KV_RT 0
#if K_T == QT_F32
#define K_PTR __global const float *
#define LOAD_K(p, i) ((p)[i])
#elif K_T == QT_F16
#define K_PTR __global const ushort *
#define LOAD_K(p, i) f16_to_f32((p)[i])
#elif K_T == QT_BF16
#define K_PTR __global const ushort *
#define LOAD_K(p, i) as_float((uint)(p)[i] << 16)
#else
#define K_PTR __global const uchar *
#define K_Q 1
#endif
#if V_T == QT_F32
#define V_PTR __global const float *
#define LOAD_V(p, i) ((p)[i])
#elif V_T == QT_F16
#define V_PTR __global const ushort *
#define LOAD_V(p, i) f16_to_f32((p)[i])
#elif V_T == QT_BF16
#define V_PTR __global const ushort *
#define LOAD_V(p, i) as_float((uint)(p)[i] << 16)
#else
#define V_PTR __global const uchar *
#define V_Q 1
#endif
#ifndef K_Q
#define K_Q 0
#define K_RS HEAD_DIM
#else
#define K_RS (HEAD_DIM / 32 * qt_bytes(K_T))
#define LOAD_K(p, i) 0.0f /* never reached: block rows are read by chunks */
#endif
#ifndef V_Q
#define V_Q 0
#define V_RS HEAD_DIM_V
#else
#define V_RS (HEAD_DIM_V / 32 * qt_bytes(V_T))
#define LOAD_V(p, i) 0.0f
#endif
#endif
#define HC (HEAD_DIM / 32) /* 32-value chunks per row of a block-type K */

/* The 32-value chunk decoder of the cache's block types (q8_0, q4_0, q4_1, iq4_nl, and qh8 whose
 * lower-plane row is lo) for a type known only at run time (KV_RT): a switch over those five
 * alone, not qdec32's fifteen. */
inline void kv_dec32(int qt, qrow_t row, qrow_t lo, int t, float *y) {
    switch (qt) {
    case QT_QH8: qdec_qh8(row + t * 20, lo + t * 16, y); break;
    case QT_Q8_0: qdec_q8_0(row + t * 34, y); break;
    case QT_Q4_0: qdec_q4_0(row + t * 18, y); break;
    case QT_Q4_1: qdec_q4_1(row + t * 20, y); break;
    default: qdec_iq4_nl(row + t * 18, y); break;
    }
}

#if KV_RT
#define QDEC kv_dec32
#else
#define QDEC(qt, row, lo, t, y) qdec32(qt, row, t, y)
#endif
/* bytes of a lower-plane (qh8_lo) row of K / V */
#define LO_RS (HEAD_DIM / 2)
#define LO_RS_V (HEAD_DIM_V / 2)
/* Rows j0 .. j0 + BK - 1 of a head (rows >= jend as 0) of WD values (HEAD_DIM for K, HEAD_DIM_V
 * for V) into a local tile with row stride DS: element rows one value per item-step, block rows
 * one 32-value chunk per item-step (LO: the head's lower plane, read for qh8 only). NTH: the
 * work-group size; uses lid, j0, jend of the caller. */
#define TILE_ELEM(dst, DS, src, LOAD, NTH, WD)                                                       \
    for (int e = lid; e < BK * (WD); e += (NTH)) {                                                   \
        int jj = e / (WD), c = e - jj * (WD);                                                        \
        (dst)[jj * (DS) + c] = j0 + jj < jend ? LOAD(src, (long)(j0 + jj) * (WD) + c) : 0.0f;        \
    }
#define TILE_BLOCKS(dst, DS, src, LO, QTX, RS, NTH, WD)                                              \
    for (int e = lid; e < BK * ((WD) / 32); e += (NTH)) {                                            \
        int jj = e / ((WD) / 32), t = e - jj * ((WD) / 32);                                          \
        float w_[32];                                                                                \
        if (j0 + jj < jend)                                                                          \
            QDEC(QTX, (qrow_t)((src) + (long)(j0 + jj) * (RS)), (LO) + (long)(j0 + jj) * ((WD) / 2), t, w_); \
        else                                                                                         \
            for (int c = 0; c < 32; c++) w_[c] = 0.0f;                                               \
        for (int c = 0; c < 32; c++) (dst)[jj * (DS) + 32 * t + c] = w_[c];                          \
    }

/* dot(qr[0 .. HEAD_DIM), K row j of head pointer kh (lower plane klh for qh8)) for the statistics
 * passes (qr global) */
inline float k_dot(__global const float *qr, K_PTR kh, qrow_t klh, int j, int kt) {
    float d = 0.0f;
#if KV_RT
    if (kt >= QT_Q8_0) {
        qrow_t kr = kh + (long)j * K_RS;
        for (int t = 0; t < HC; t++) {
            float w[32];
            kv_dec32(kt, kr, klh + (long)j * LO_RS, t, w);
            for (int c = 0; c < 32; c++) d += qr[32 * t + c] * w[c];
        }
        return d;
    }
#elif K_Q
    qrow_t kr = (qrow_t)(kh + (long)j * K_RS);
    for (int t = 0; t < HC; t++) {
        float w[32];
        qdec32(K_T, kr, t, w);
        for (int c = 0; c < 32; c++) d += qr[32 * t + c] * w[c];
    }
    return d;
#endif
    for (int c = 0; c < HEAD_DIM; c++) d += qr[c] * LOAD_K(kh, (long)j * HEAD_DIM + c);
    return d;
}

/* flags */
#define F_QPOS 1
#define F_KPOS 2
#define F_KVLEN 4
#define F_ROWLEN 8
#define F_MASK 16
#define F_ROWMAX 32
#define F_ROWSUM 64
#define F_ARGMAX 128
#define F_ML 256
#define F_CAUSAL 512
#define F_UNNORM 1024
#define F_STATROWS 2048
#define F_ACCUM 4096

inline int key_limit(int h, __global const int *kvlen, long kvlen_off, int n_kv, int flags) {
    int klen = n_kv;
    if (flags & F_KVLEN) klen = min(klen, kvlen[kvlen_off + h]);
    return max(klen, 0);
}

inline int row_limit(int i, int klen, __global const int *rowlen, long rowlen_off, int flags) {
    int r = klen;
    if (flags & F_ROWLEN) r = min(r, rowlen[rowlen_off + i]);
    return max(r, 0);
}

inline int query_pos(int i, __global const int *qpos, long qpos_off, int n_q, int n_kv, int flags) {
    return (flags & F_QPOS) ? qpos[qpos_off + i] : n_kv - n_q + i;
}

/* The argument list attn_main and attn_dec share (the host sets both through one launcher). */
#define ATTN_PARAMS                                                                                  \
    __global const float *q, long q_off, K_PTR k, long k_off, V_PTR v, long v_off,                  \
    __global float *out, long out_off,                                                                \
    __global const int *qpos, long qpos_off, __global const int *kpos, long kpos_off,                 \
    __global const int *kvlen, long kvlen_off, __global const int *rowlen, long rowlen_off,           \
    __global const float *mask, long mask_off,                                                        \
    __global float *row_max, long rm_off, __global float *row_sum, long rs_off,                       \
    __global int *argmax, long am_off, __global float *ml, __global float *part, int span,            \
    int n_q, int n_heads, int cap, int n_kv, float scale, int flags, int kt, int vt,                 \
    qrow_t klo, long klo_off, qrow_t vlo, long vlo_off

inline int key_pos(int h, int j, __global const int *kpos, long kpos_off, int cap, int flags) {
    return (flags & F_KPOS) ? kpos[kpos_off + (long)h * cap + j] : j;
}

#ifndef ATTN_DEC
/* Main pass. Grid: (ceil(n_q / BQ) * BQ * G, n_kv_heads); work-group (BQ * G, 1). */
__kernel __attribute__((reqd_work_group_size(BQ * G, 1, 1)))
void attn_main(ATTN_PARAMS) {
    __local float Kt[BK * HEAD_DIM];
    __local float Vt[BK * HEAD_DIM_V];
    const int NT = BQ * G;
    int h = get_group_id(1);
    int lid = get_local_id(0);
    int r = lid % BQ, gi = lid / BQ;
    int i = get_group_id(0) * BQ + r;
    int g = h * G + gi;
    int active = i < n_q;

    int klen = key_limit(h, kvlen, kvlen_off, n_kv, flags);
    int rlen = active ? row_limit(i, klen, rowlen, rowlen_off, flags) : 0;
    int qp = active ? query_pos(i, qpos, qpos_off, n_q, n_kv, flags) : 0;
    int causal = (flags & F_CAUSAL) != 0;

    float qv[HEAD_DIM], acc[HEAD_DIM_V];
    if (active) {
        __global const float *qr = q + q_off + ((long)i * n_heads + g) * HEAD_DIM;
        for (int c = 0; c < HEAD_DIM; c++) qv[c] = qr[c];
    }
    for (int c = 0; c < HEAD_DIM_V; c++) acc[c] = 0.0f;
    float m = -FLT_MAX, l = 0.0f;
    int best = -1;

    K_PTR kh = k + k_off + (long)h * cap * K_RS;
    V_PTR vh = v + v_off + (long)h * cap * V_RS;
    qrow_t klh = klo + klo_off + (long)h * cap * LO_RS, vlh = vlo + vlo_off + (long)h * cap * LO_RS_V;
    /* Split-K (flash-decoding): group 2 index s covers keys [s*span, (s+1)*span); span is a
     * multiple of BK. span == 0: one split over all keys, final outputs written here. */
    int split = get_group_id(2);
    int jbeg = span > 0 ? split * span : 0;
    int jend = span > 0 ? min(klen, jbeg + span) : klen;
    /* causal with default positions: keys past the last row's position are invisible to the
     * whole group, so its tiles are skipped (qpos(i) = n_kv - n_q + i) */
    if (causal && !(flags & (F_QPOS | F_KPOS)))
        jend = min(jend, n_kv - n_q + min((int)get_group_id(0) * BQ + BQ, n_q));
    for (int j0 = jbeg; j0 < jend; j0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);
#if KV_RT
        if (kt >= QT_Q8_0) TILE_BLOCKS(Kt, HEAD_DIM, kh, klh, kt, K_RS, NT, HEAD_DIM) else TILE_ELEM(Kt, HEAD_DIM, kh, LOAD_K, NT, HEAD_DIM)
        if (vt >= QT_Q8_0) TILE_BLOCKS(Vt, HEAD_DIM_V, vh, vlh, vt, V_RS, NT, HEAD_DIM_V) else TILE_ELEM(Vt, HEAD_DIM_V, vh, LOAD_V, NT, HEAD_DIM_V)
#else
#if K_Q
        TILE_BLOCKS(Kt, HEAD_DIM, kh, klh, K_T, K_RS, NT, HEAD_DIM);
#else
        TILE_ELEM(Kt, HEAD_DIM, kh, LOAD_K, NT, HEAD_DIM);
#endif
#if V_Q
        TILE_BLOCKS(Vt, HEAD_DIM_V, vh, vlh, V_T, V_RS, NT, HEAD_DIM_V);
#else
        TILE_ELEM(Vt, HEAD_DIM_V, vh, LOAD_V, NT, HEAD_DIM_V);
#endif
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!active || j0 >= rlen) continue;
        float sv[BK];
        float tmax = -FLT_MAX;
        int targ = -1, tnan = 0;
        for (int jj = 0; jj < BK; jj++) {
            int j = j0 + jj;
            float s = -INFINITY;
            if (j < rlen && j < jend && (!causal || key_pos(h, j, kpos, kpos_off, cap, flags) <= qp)) {
                float d = 0.0f;
                for (int c = 0; c < HEAD_DIM; c++) d += qv[c] * Kt[jj * HEAD_DIM + c];
                s = scale * d;
                if (flags & F_MASK) s += mask[mask_off + (long)i * n_kv + j];
                tnan |= isnan(s); /* a NaN logit is kept: exp(NaN) makes the row NaN, as on the CPU */
            }
            sv[jj] = s;
            if (s > -INFINITY && (targ < 0 || s > tmax)) {
                tmax = s;
                targ = j;
            }
        }
        if (targ < 0 && !tnan) continue;
        if (targ >= 0 && (best < 0 || tmax > m)) {
            best = targ; /* strictly larger only: ties keep the lower key */
            float mn = fmax(m, tmax);
            float corr = exp(m - mn);
            l *= corr;
            for (int c = 0; c < HEAD_DIM_V; c++) acc[c] *= corr;
            m = mn;
        }
        for (int jj = 0; jj < BK; jj++) {
            if (sv[jj] == -INFINITY) continue; /* hidden; NaN goes on */
            float p = exp(sv[jj] - m);
            l += p;
            for (int c = 0; c < HEAD_DIM_V; c++) acc[c] += p * Vt[jj * HEAD_DIM_V + c];
        }
    }
    if (!active) return;
    long o = (long)i * n_heads + g;
    if (span > 0) {
        /* partial: part[split][i][g] = {m, l, best, acc[HEAD_DIM_V]} */
        __global float *pp = part + ((long)split * n_q * n_heads + o) * (HEAD_DIM_V + 3);
        pp[0] = m;
        pp[1] = l;
        pp[2] = as_float(best);
        for (int c = 0; c < HEAD_DIM_V; c++) pp[3 + c] = acc[c];
        return;
    }
    __global float *orow = out + out_off + o * HEAD_DIM_V;
    if (l != 0.0f) { /* NaN sums give NaN rows, never zeros */
        if (flags & F_UNNORM)
            for (int c = 0; c < HEAD_DIM_V; c++) orow[c] = acc[c];
        else
            for (int c = 0; c < HEAD_DIM_V; c++) orow[c] = acc[c] / l;
    } else {
        for (int c = 0; c < HEAD_DIM_V; c++) orow[c] = 0.0f;
    }
    if (flags & F_ROWMAX) row_max[rm_off + o] = m;
    if (flags & F_ROWSUM) row_sum[rs_off + o] = l;
    if (flags & F_ARGMAX) argmax[am_off + o] = best;
    if (flags & F_ML) {
        ml[2 * o] = m;
        ml[2 * o + 1] = l;
    }
}
#endif /* !ATTN_DEC */

#ifdef ATTN_DEC
/* Cooperative (flash-decoding) pass for few query rows and long key ranges (Dao et al. 2023,
 * "Flash-Decoding"; FlashAttention-2 work partitioning, Dao 2023, sec. 3.2). One work-group of DNT
 * items per (RB query rows, kv head, key split) holds the PB = RB * G query vectors of that kv
 * head's GQA group in local memory; per tile of BK keys the items cooperate:
 *   scores  S[p][jj] = scale q_p . k_jj (+mask): item (jj = lid % BK) computes key jj against
 *           the pairs lid / BK + t * DNT / BK (one K read from local serves several pairs);
 *   max     one item per pair scans its BK scores (running max m, argmax, rescale factor);
 *   exp     S[p][jj] = exp(S - m_p), all items;
 *   PV      item (lane = lid % (HEAD_DIM_V / VW)) owns VW components of the accumulators of the
 *           pairs lid / LANES + t * (DNT / LANES): acc = acc * corr + sum_jj S[p][jj] V[jj][lane].
 * K and V tiles (rows padded to KS floats to spread banks) are both loaded at the start of a tile
 * (SEPV, one memory round trip per tile) or, when local memory is short, share one buffer. The grid is
 * (ceil(n_q / RB) * DNT, n_kv_heads, n_split); with span > 0 each split writes its partial
 * {m, l, argmax, acc} for attn_combine, with span == 0 the final outputs. Same visibility rules,
 * tie-breaking and statistics as attn_main. */
#ifndef DNT
#define DNT 128           /* work-group size of attn_dec */
#endif
#ifndef RB
#define RB 1              /* query rows per attn_dec work-group */
#endif
#ifndef VW
#define VW 1              /* components per lane: 4 (HEAD_DIM and HEAD_DIM_V % 4 == 0) or 1 */
#endif
#ifndef SEPV
#define SEPV 0            /* 1: separate K and V tiles, both loaded at the start of a tile */
#endif
#define PB (RB * G)                         /* query vectors (row, head) per work-group */
#define KVD (HEAD_DIM > HEAD_DIM_V ? HEAD_DIM : HEAD_DIM_V)
#define KS (KVD + (VW == 4 ? 4 : 1))         /* padded K/V tile row */
#define SK (BK + 1)                         /* padded score row */
#define LANES (HEAD_DIM_V / VW)
#define PSTEP_E (DNT / LANES)                /* pairs handled side by side in PV */
#define NACC ((PB + PSTEP_E - 1) / PSTEP_E)
#define PSTEP_S (DNT / BK)                   /* pairs handled side by side in the scores */
#define NSC ((PB + PSTEP_S - 1) / PSTEP_S)
/* K or V rows j0 .. j0 + BK - 1 of a head into a local tile (rows >= jend as 0), VW components
 * per load */
#if VW == 4 && !KV_RT
inline float4 f16x4_to_f32(ushort4 u) {
    return (float4)(f16_to_f32(u.x), f16_to_f32(u.y), f16_to_f32(u.z), f16_to_f32(u.w));
}
inline float4 bf16x4_to_f32(ushort4 u) {
    return (float4)(as_float((uint)u.x << 16), as_float((uint)u.y << 16), as_float((uint)u.z << 16),
                    as_float((uint)u.w << 16));
}
#define LOAD4_0(p, i) vload4(0, (p) + (i))
#define LOAD4_1(p, i) f16x4_to_f32(vload4(0, (p) + (i)))
#define LOAD4_2(p, i) bf16x4_to_f32(vload4(0, (p) + (i)))
#define LOAD4_(t) LOAD4_##t
#define LOAD4(t) LOAD4_(t)
#define TILE_LOAD_E(dst, src, T, WD)                                                             \
    for (int e = lid; e < BK * ((WD) / 4); e += DNT) {                                           \
        int jj = e / ((WD) / 4), c = (e - jj * ((WD) / 4)) * 4;                                  \
        vstore4(j0 + jj < jend ? LOAD4(T)(src, (long)(j0 + jj) * (WD) + c) : (float4)0.0f, 0,   \
                (dst) + jj * KS + c);                                                            \
    }
#define TILE_LOAD_K(dst) TILE_LOAD_E(dst, kh, K_T, HEAD_DIM)
#define TILE_LOAD_V(dst) TILE_LOAD_E(dst, vh, V_T, HEAD_DIM_V)
#else
#define TILE_LOAD_K(dst) TILE_ELEM(dst, KS, kh, LOAD_K, DNT, HEAD_DIM)
#define TILE_LOAD_V(dst) TILE_ELEM(dst, KS, vh, LOAD_V, DNT, HEAD_DIM_V)
#endif
#if K_Q
#undef TILE_LOAD_K
#define TILE_LOAD_K(dst) TILE_BLOCKS(dst, KS, kh, klh, K_T, K_RS, DNT, HEAD_DIM)
#endif
#if V_Q
#undef TILE_LOAD_V
#define TILE_LOAD_V(dst) TILE_BLOCKS(dst, KS, vh, vlh, V_T, V_RS, DNT, HEAD_DIM_V)
#endif
#if KV_RT
#undef TILE_LOAD_K
#undef TILE_LOAD_V
#define TILE_LOAD_K(dst)                                                                          \
    if (kt >= QT_Q8_0) TILE_BLOCKS(dst, KS, kh, klh, kt, K_RS, DNT, HEAD_DIM) else TILE_ELEM(dst, KS, kh, LOAD_K, DNT, HEAD_DIM)
#define TILE_LOAD_V(dst)                                                                          \
    if (vt >= QT_Q8_0) TILE_BLOCKS(dst, KS, vh, vlh, vt, V_RS, DNT, HEAD_DIM_V) else TILE_ELEM(dst, KS, vh, LOAD_V, DNT, HEAD_DIM_V)
#endif
#if VW == 4
typedef float4 floatv;
#define LOADV(ptr) vload4(0, (ptr))
inline float dotv(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }
#else
typedef float floatv;
#define LOADV(ptr) (*(ptr))
inline float dotv(float a, float b) { return a * b; }
#endif

__kernel __attribute__((reqd_work_group_size(DNT, 1, 1)))
void attn_dec(ATTN_PARAMS) {
    __local float Qs[PB * HEAD_DIM];
    __local float KVs[BK * KS];
#if SEPV
    __local float Vs[BK * KS];
#else
#define Vs KVs
#endif
    __local float S[PB * SK];
    __local float Mn[PB], Cr[PB], Ls[PB];
    __local int Rl[PB], Qp[PB], Bs[PB];
    int h = get_group_id(1);
    int lid = get_local_id(0);
    int i0 = get_group_id(0) * RB;
    int split = get_group_id(2);
    int causal = (flags & F_CAUSAL) != 0;
    int klen = key_limit(h, kvlen, kvlen_off, n_kv, flags);

    for (int e = lid; e < PB * HEAD_DIM; e += DNT) {
        int r = e / (G * HEAD_DIM), i = i0 + r;
        Qs[e] = i < n_q ? q[q_off + ((long)i * n_heads + h * G) * HEAD_DIM + (e - r * G * HEAD_DIM)] : 0.0f;
    }
    for (int p = lid; p < PB; p += DNT) {
        int i = i0 + p / G;
        Rl[p] = i < n_q ? row_limit(i, klen, rowlen, rowlen_off, flags) : 0;
        Qp[p] = i < n_q ? query_pos(i, qpos, qpos_off, n_q, n_kv, flags) : 0;
    }
    /* the max/argmax state of pair lid (items lid < PB) */
    float m = -FLT_MAX;
    int best = -1;
    /* PV lanes */
    int lane = lid % LANES, pe = lid / LANES;
    if (lid >= PSTEP_E * LANES) pe = PB; /* idle item when LANES does not divide DNT */
    floatv acc[NACC];
    float lsum[NACC];
    for (int t = 0; t < NACC; t++) {
        acc[t] = (floatv)0.0f;
        lsum[t] = 0.0f;
    }
    /* score lanes */
    int js = lid % BK, ps = lid / BK;

    K_PTR kh = k + k_off + (long)h * cap * K_RS;
    V_PTR vh = v + v_off + (long)h * cap * V_RS;
    qrow_t klh = klo + klo_off + (long)h * cap * LO_RS, vlh = vlo + vlo_off + (long)h * cap * LO_RS_V;
    int jbeg = span > 0 ? split * span : 0;
    int jend = span > 0 ? min(klen, jbeg + span) : klen;
    if (causal && !(flags & (F_QPOS | F_KPOS))) /* as in attn_main */
        jend = min(jend, n_kv - n_q + min(i0 + RB, n_q));
    for (int j0 = jbeg; j0 < jend; j0 += BK) {
        barrier(CLK_LOCAL_MEM_FENCE);
        TILE_LOAD_K(KVs);
#if SEPV
        TILE_LOAD_V(Vs);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        {
            float sc[NSC];
            for (int t = 0; t < NSC; t++) sc[t] = 0.0f;
            __local const float *kr = KVs + js * KS;
            for (int c = 0; c < HEAD_DIM; c += VW) {
                floatv kk = LOADV(kr + c);
                for (int t = 0; t < NSC; t++) {
                    int p = min(ps + t * PSTEP_S, PB - 1);
                    sc[t] += dotv(LOADV(Qs + p * HEAD_DIM + c), kk);
                }
            }
            int j = j0 + js;
            int kp = (causal && j < jend) ? key_pos(h, j, kpos, kpos_off, cap, flags) : 0;
            for (int t = 0; t < NSC; t++) {
                int p = ps + t * PSTEP_S;
                if (p >= PB) break;
                float s = -INFINITY;
                if (j < jend && j < Rl[p] && (!causal || kp <= Qp[p])) {
                    s = scale * sc[t];
                    if (flags & F_MASK) s += mask[mask_off + (long)(i0 + p / G) * n_kv + j];
                    /* a NaN logit is kept: its weight below is NaN and so is the row, as on the CPU */
                }
                S[p * SK + js] = s;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#if !SEPV
        TILE_LOAD_V(KVs);
#endif
        if (lid < PB) {
            float tmax = -FLT_MAX;
            int targ = -1;
            for (int jj = 0; jj < BK; jj++) {
                float s = S[lid * SK + jj];
                if (s > -INFINITY && (targ < 0 || s > tmax)) {
                    tmax = s;
                    targ = j0 + jj;
                }
            }
            float corr = 1.0f;
            if (targ >= 0 && (best < 0 || tmax > m)) {
                best = targ; /* strictly larger only: ties keep the lower key */
                float mn = fmax(m, tmax);
                corr = exp(m - mn);
                m = mn;
            }
            Mn[lid] = m;
            Cr[lid] = corr;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < PB * BK; e += DNT) {
            int p = e / BK, jj = e - p * BK;
            float s = S[p * SK + jj];
            S[p * SK + jj] = s > -INFINITY ? exp(s - Mn[p]) : isnan(s) ? s : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int t = 0; t < NACC; t++) {
            int p = min(pe + t * PSTEP_E, PB - 1);
            float cr = Cr[p];
            acc[t] *= cr;
            lsum[t] *= cr;
        }
        for (int jj = 0; jj < BK; jj++) {
            floatv vv = LOADV(Vs + jj * KS + lane * VW);
            for (int t = 0; t < NACC; t++) {
                int p = min(pe + t * PSTEP_E, PB - 1);
                float w = S[p * SK + jj];
                acc[t] += w * vv;
                lsum[t] += w;
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid < PB) {
        Mn[lid] = m;
        Bs[lid] = best;
    }
    if (lane == 0)
        for (int t = 0; t < NACC; t++) {
            int p = pe + t * PSTEP_E;
            if (p < PB) Ls[p] = lsum[t];
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int t = 0; t < NACC; t++) {
        int p = pe + t * PSTEP_E;
        if (p >= PB) break;
        int i = i0 + p / G;
        if (i >= n_q) break;
        long o = (long)i * n_heads + h * G + p % G;
        float l = Ls[p];
        floatv a = acc[t];
        if (span > 0) {
            /* partial: part[split][i][g] = {m, l, best, acc[HEAD_DIM_V]} */
            __global float *pp = part + ((long)split * n_q * n_heads + o) * (HEAD_DIM_V + 3);
#if VW == 4
            vstore4(a, 0, pp + 3 + lane * 4);
#else
            pp[3 + lane] = a;
#endif
            if (lane == 0) {
                pp[0] = Mn[p];
                pp[1] = l;
                pp[2] = as_float(Bs[p]);
            }
            continue;
        }
        floatv r = l != 0.0f ? ((flags & F_UNNORM) ? a : a / l) : (floatv)0.0f;
#if VW == 4
        vstore4(r, 0, out + out_off + o * HEAD_DIM_V + lane * 4);
#else
        out[out_off + o * HEAD_DIM_V + lane] = r;
#endif
        if (lane != 0) continue;
        if (flags & F_ROWMAX) row_max[rm_off + o] = Mn[p];
        if (flags & F_ROWSUM) row_sum[rs_off + o] = l;
        if (flags & F_ARGMAX) argmax[am_off + o] = Bs[p];
        if (flags & F_ML) {
            ml[2 * o] = Mn[p];
            ml[2 * o + 1] = l;
        }
    }
}

#undef Vs
#endif /* ATTN_DEC */

/* Merges the split-K partials of each (row, head) in split order: M = max m_s, l = sum l_s
 * exp(m_s - M), acc likewise; argmax from the first split reaching M (splits are in key order,
 * so this is the lowest key, as without splitting). One work-item per (component c, row-head o):
 * grid (round_up(HEAD_DIM_V, lws), n_q * n_heads); the c == 0 item writes the statistics. */
__kernel void attn_combine(__global const float *part, int n_split, __global float *out, long out_off,
                           __global float *row_max, long rm_off, __global float *row_sum, long rs_off,
                           __global int *argmax, long am_off, __global float *ml, int n_q, int n_heads, int flags) {
    int c = get_global_id(0);
    long o = get_global_id(1);
    if (c >= HEAD_DIM_V || o >= (long)n_q * n_heads) return;
    long stride = (long)n_q * n_heads * (HEAD_DIM_V + 3);
    __global const float *p0 = part + o * (HEAD_DIM_V + 3);
    /* four splits per step, their loads issued before use (the partials are read from L2 with
     * no dependence between splits) */
    float M = -FLT_MAX;
    int best = -1;
    for (int s0 = 0; s0 < n_split; s0 += 4) {
        float mv[4];
        int bv[4];
        for (int u = 0; u < 4; u++) {
            __global const float *pp = p0 + min(s0 + u, n_split - 1) * stride;
            mv[u] = pp[0];
            bv[u] = s0 + u < n_split ? as_int(pp[2]) : -1;
        }
        for (int u = 0; u < 4; u++)
            if (bv[u] >= 0 && (best < 0 || mv[u] > M)) {
                M = mv[u];
                best = bv[u];
            }
    }
    float l = 0.0f, acc = 0.0f;
    for (int s0 = 0; s0 < n_split; s0 += 4) {
        float mv[4], lv[4], av[4];
        int bv[4];
        for (int u = 0; u < 4; u++) {
            __global const float *pp = p0 + min(s0 + u, n_split - 1) * stride;
            mv[u] = pp[0];
            lv[u] = pp[1];
            bv[u] = s0 + u < n_split ? as_int(pp[2]) : -1;
            av[u] = pp[3 + c];
        }
        for (int u = 0; u < 4; u++) {
            if (bv[u] < 0 && !(s0 + u < n_split && isnan(lv[u]))) continue; /* no visible key; a NaN sum goes on */
            float w = exp(mv[u] - M);
            l += lv[u] * w;
            acc += av[u] * w;
        }
    }
    out[out_off + o * HEAD_DIM_V + c] = l != 0.0f ? ((flags & F_UNNORM) ? acc : acc / l) : 0.0f;
    if (c != 0) return;
    if (flags & F_ROWMAX) row_max[rm_off + o] = M;
    if (flags & F_ROWSUM) row_sum[rs_off + o] = l;
    if (flags & F_ARGMAX) argmax[am_off + o] = best;
    if (flags & F_ML) {
        ml[2 * o] = M;
        ml[2 * o + 1] = l;
    }
}

/* External normaliser (kvs_attention_params.lse_extra), after the main pass (and attn_combine):
 * per (row, head) o with a visible key (l != 0), lt = l + exp(lse[o] - m); out[o] *= l / lt (out
 * was acc / l, so it becomes acc / lt) and ml's l becomes lt, the normaliser the statistics passes
 * then divide by (row_sum keeps the call's own l). One work-item per o, grid round_up(n_q * n_heads). */
__kernel void attn_lse(__global const float *lse, long lse_off, __global float *out, long out_off, __global float *ml,
                       int n_q, int n_heads) {
    long o = get_global_id(0);
    if (o >= (long)n_q * n_heads) return;
    float m = ml[2 * o], l = ml[2 * o + 1];
    if (l == 0.0f) return; /* no visible key: out stays 0 */
    float lt = l + exp(lse[lse_off + o] - m);
    float f = l / lt;
    __global float *orow = out + out_off + o * HEAD_DIM_V;
    for (int c = 0; c < HEAD_DIM_V; c++) orow[c] *= f;
    ml[2 * o + 1] = lt;
}

/* Key mass: km[h][j] (+)= (1/G) sum_{g in group h} sum_{i in stat rows} p[i][g][j], for
 * j < klen(h); p = exp(logit - m) / l with (m, l) from the main pass (ml [n_q][n_heads][2]).
 * Grid: (ceil(cap / KM_WG) * KM_WG, n_kv_heads). Sums in a fixed order (rows, then heads). */
__kernel __attribute__((reqd_work_group_size(KM_WG, 1, 1)))
void attn_keymass(__global const float *q, long q_off, K_PTR k, long k_off,
                  __global const int *qpos, long qpos_off, __global const int *kpos, long kpos_off,
                  __global const int *kvlen, long kvlen_off, __global const int *rowlen, long rowlen_off,
                  __global const float *mask, long mask_off, __global const int *stat_rows, long sr_off,
                  int n_sel, __global const float *ml, __global float *km, long km_off,
                  int n_q, int n_heads, int cap, int n_kv, float scale, int flags, int kt, qrow_t klo, long klo_off) {
    __local float Qs[KM_TP * HEAD_DIM];
    __local float Ms[KM_TP], Ls[KM_TP];
    __local int Is[KM_TP];
    int h = get_group_id(1);
    int lid = get_local_id(0);
    int j = get_global_id(0);
    int klen = key_limit(h, kvlen, kvlen_off, n_kv, flags);
    int valid = j < klen;
    int causal = (flags & F_CAUSAL) != 0;
    float kv[HEAD_DIM];
    K_PTR kh = k + k_off + (long)h * cap * K_RS;
    qrow_t klh = klo + klo_off + (long)h * cap * LO_RS;
#if K_Q || KV_RT
    if (KV_RT == 0 || kt >= QT_Q8_0) {
        for (int t = 0; t < HC; t++) {
            if (valid) QDEC(KV_RT ? kt : K_T, (qrow_t)(kh + (long)j * K_RS), klh + (long)j * LO_RS, t, kv + 32 * t);
            else
                for (int c = 0; c < 32; c++) kv[32 * t + c] = 0.0f;
        }
    } else
#endif
    {
        for (int c = 0; c < HEAD_DIM; c++) kv[c] = valid ? LOAD_K(kh, (long)j * HEAD_DIM + c) : 0.0f;
    }
    int kp = valid ? key_pos(h, j, kpos, kpos_off, cap, flags) : 0;
    float sum = 0.0f;
    int P = n_sel * G;
    for (int p0 = 0; p0 < P; p0 += KM_TP) {
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int t = lid; t < KM_TP; t += KM_WG) {
            int p = p0 + t, i = -1, g = 0;
            if (p < P) {
                int s = p / G;
                g = h * G + p % G;
                i = (flags & F_STATROWS) ? stat_rows[sr_off + s] : s;
                if (i < 0 || i >= n_q) i = -1;
            }
            Is[t] = i;
            if (i >= 0) {
                long o = (long)i * n_heads + g;
                Ms[t] = ml[2 * o];
                Ls[t] = ml[2 * o + 1];
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int e = lid; e < KM_TP * HEAD_DIM; e += KM_WG) {
            int t = e / HEAD_DIM, p = p0 + t;
            float val = 0.0f;
            if (Is[t] >= 0) {
                int g = h * G + p % G;
                val = q[q_off + ((long)Is[t] * n_heads + g) * HEAD_DIM + e % HEAD_DIM];
            }
            Qs[e] = val;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!valid) continue;
        int tn = min(KM_TP, P - p0);
        for (int t = 0; t < tn; t++) {
            int i = Is[t];
            if (i < 0 || !(Ls[t] > 0.0f)) continue;
            if (j >= row_limit(i, klen, rowlen, rowlen_off, flags)) continue;
            if (causal && kp > query_pos(i, qpos, qpos_off, n_q, n_kv, flags)) continue;
            float d = 0.0f;
            for (int c = 0; c < HEAD_DIM; c++) d += Qs[t * HEAD_DIM + c] * kv[c];
            float s = scale * d;
            if (flags & F_MASK) s += mask[mask_off + (long)i * n_kv + j];
            if (!(s > -INFINITY)) continue;
            sum += exp(s - Ms[t]) / Ls[t];
        }
    }
    if (!valid) return;
    float val = sum / (float)G;
    long o = km_off + (long)h * cap + j;
    km[o] = (flags & F_ACCUM) ? km[o] + val : val;
}

/* Probe rows: probs[r][g][j] = p[probe_rows[r]][g][j] for every j < cap (0 when invisible).
 * Grid: (ceil(cap / 64) * 64, n_heads, n_probe). */
__kernel void attn_probs(__global const float *q, long q_off, K_PTR k, long k_off,
                         __global const int *qpos, long qpos_off, __global const int *kpos, long kpos_off,
                         __global const int *kvlen, long kvlen_off, __global const int *rowlen, long rowlen_off,
                         __global const float *mask, long mask_off, __global const int *probe_rows, long pr_off,
                         __global const float *ml, __global float *probs, long probs_off,
                         int n_q, int n_heads, int cap, int n_kv, float scale, int flags, int kt, qrow_t klo, long klo_off) {
    int j = get_global_id(0);
    int g = get_global_id(1);
    int r = get_global_id(2);
    if (j >= cap) return;
    int h = g / G;
    int i = probe_rows[pr_off + r];
    float val = 0.0f;
    if (i >= 0 && i < n_q) {
        int klen = key_limit(h, kvlen, kvlen_off, n_kv, flags);
        int rlen = row_limit(i, klen, rowlen, rowlen_off, flags);
        long o = (long)i * n_heads + g;
        float M = ml[2 * o], L = ml[2 * o + 1];
        int vis = j < rlen && L > 0.0f;
        if (vis && (flags & F_CAUSAL))
            vis = key_pos(h, j, kpos, kpos_off, cap, flags) <= query_pos(i, qpos, qpos_off, n_q, n_kv, flags);
        if (vis) {
            float d = k_dot(q + q_off + o * HEAD_DIM, k + k_off + (long)h * cap * K_RS, klo + klo_off + (long)h * cap * LO_RS, j, kt);
            float s = scale * d;
            if (flags & F_MASK) s += mask[mask_off + (long)i * n_kv + j];
            if (s > -INFINITY) val = exp(s - M) / L;
        }
    }
    probs[probs_off + ((long)r * n_heads + g) * cap + j] = val;
}
