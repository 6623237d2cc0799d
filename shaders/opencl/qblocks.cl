/* kvsieve OpenCL: the block decoders of llama.cpp's quantized types, written once for every OpenCL
 * kernel that reads them (qmatmul.cl: products and embedding; attention.cl: the quantized K/V
 * cache; rows.cl: the cache's converting scatter). The host puts this file in front of those
 * sources (opencl.c, ocl_build); it declares no kernel.
 *
 * Layouts: exactly core/quant/quant_blocks.h (GGUF's, little-endian, packed; that header's table
 * gives every byte offset). Multi-byte fields are read byte by byte (blocks of 18, 22, ... bytes
 * leave u32 fields unaligned). The float operations are the reference decoders' (gguf-py's order,
 * each rounded to binary32) and contraction into fma is switched off below, so every value decodes
 * bit-identically to kvs_qb_* on the host.
 *
 * One primitive: qdec32(QT, row, t, y) writes the 32 values [32 t, 32 t + 32) of a row stored as
 * consecutive blocks of type QT starting at byte pointer `row` (a 256-value block holds 8 such
 * chunks), for every block type; f32 / f16 / bf16 rows are read the same way (32 elements). The
 * type codes QT_* are this file's own; the host maps kvs_dtype to them (kvs_ocl_qt, opencl.c). */
#pragma OPENCL FP_CONTRACT OFF

#define QT_F32 0
#define QT_F16 1
#define QT_BF16 2
#define QT_Q8_0 3
#define QT_Q4_0 4
#define QT_Q4_1 5
#define QT_Q5_0 6
#define QT_Q5_1 7
#define QT_IQ4_NL 8
#define QT_Q2_K 9
#define QT_Q3_K 10
#define QT_Q4_K 11
#define QT_Q5_K 12
#define QT_Q6_K 13
#define QT_IQ4_XS 14
/* QuantSpec's hierarchical qh8 KV-cache type (quant_blocks.h): rows of 20-byte q4_1 upper blocks,
 * read together with a second row of 16-byte lower blocks (the qh8_lo plane); a cache type only
 * (attention.cl's run-time K/V type, rows.cl's converting scatter), never a weight type */
#define QT_QH8 15

typedef __global const uchar *qrow_t;

/* values per block and bytes per block of a type code (elements: 1 value, 4 or 2 bytes) */
inline int qt_block(int qt) { return qt == QT_QH8 ? 32 : qt >= QT_Q2_K ? 256 : qt >= QT_Q8_0 ? 32 : 1; }
inline int qt_bytes(int qt) {
    switch (qt) {
    case QT_F32: return 4;
    case QT_F16: case QT_BF16: return 2;
    case QT_Q8_0: return 34;
    case QT_Q4_0: case QT_IQ4_NL: return 18;
    case QT_Q4_1: case QT_QH8: return 20; /* qh8: its upper block (the lower one: 16 bytes) */
    case QT_Q5_0: return 22;
    case QT_Q5_1: return 24;
    case QT_Q2_K: return 84;
    case QT_Q3_K: return 110;
    case QT_Q4_K: return 144;
    case QT_Q5_K: return 176;
    case QT_Q6_K: return 210;
    default: return 136; /* QT_IQ4_XS */
    }
}
/* bytes of a row of n values (n a whole number of blocks) */
inline long qt_row_bytes(int qt, long n) { return n / qt_block(qt) * qt_bytes(qt); }

__constant char kvs_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* binary16 / bfloat16 bits -> f32, exact (normals, subnormals, inf, NaN), branch-free: the
 * exponent is rebiased by a multiply by 2^112, which also normalises subnormals */
inline float qh2f(uint h) {
    uint em = h & 0x7fffu;
    float f = as_float(em << 13) * 0x1.0p112f;
    f = em >= 0x7c00u ? as_float((em << 13) | 0x7f800000u) : f;
    return as_float(as_uint(f) | ((h & 0x8000u) << 16));
}
inline uint qu16(qrow_t p) { return (uint)p[0] | (uint)p[1] << 8; }
inline uint qu32(qrow_t p) { return qu16(p) | qu16(p + 2) << 16; }
inline float qf16(qrow_t p) { return qh2f(qu16(p)); }

/* 32-value types: b is the block */
inline void qdec_q8_0(qrow_t b, float *y) {
    const float d = qf16(b);
    for (int i = 0; i < 32; i++) y[i] = d * (float)(char)b[2 + i];
}
inline void qdec_q4_0(qrow_t b, float *y) {
    const float d = qf16(b);
    for (int i = 0; i < 16; i++) {
        y[i] = d * (float)((b[2 + i] & 0x0f) - 8);
        y[i + 16] = d * (float)((b[2 + i] >> 4) - 8);
    }
}
inline void qdec_q4_1(qrow_t b, float *y) {
    const float d = qf16(b), m = qf16(b + 2);
    for (int i = 0; i < 16; i++) {
        y[i] = d * (float)(b[4 + i] & 0x0f) + m;
        y[i + 16] = d * (float)(b[4 + i] >> 4) + m;
    }
}
/* qh8's 8-bit values (kvs_qb_qh8): b the upper (q4_1) block, lo the lower block (16 bytes); in
 * this order (d * hi + m) + (d * 0.0625f) * (lo - 7.5f) */
inline void qdec_qh8(qrow_t b, qrow_t lo, float *y) {
    const float d = qf16(b), m = qf16(b + 2), s = d * 0.0625f;
    for (int i = 0; i < 16; i++) {
        y[i] = (d * (float)(b[4 + i] & 0x0f) + m) + s * ((float)(lo[i] & 0x0f) - 7.5f);
        y[i + 16] = (d * (float)(b[4 + i] >> 4) + m) + s * ((float)(lo[i] >> 4) - 7.5f);
    }
}
inline void qdec_q5_0(qrow_t b, float *y) {
    const float d = qf16(b);
    const uint qh = qu32(b + 2);
    for (int i = 0; i < 16; i++) {
        int lo = (b[6 + i] & 0x0f) | (int)((qh >> i) & 1u) << 4;
        int hi = (b[6 + i] >> 4) | (int)((qh >> (i + 16)) & 1u) << 4;
        y[i] = d * (float)(lo - 16);
        y[i + 16] = d * (float)(hi - 16);
    }
}
inline void qdec_q5_1(qrow_t b, float *y) {
    const float d = qf16(b), m = qf16(b + 2);
    const uint qh = qu32(b + 4);
    for (int i = 0; i < 16; i++) {
        int lo = (b[8 + i] & 0x0f) | (int)((qh >> i) & 1u) << 4;
        int hi = (b[8 + i] >> 4) | (int)((qh >> (i + 16)) & 1u) << 4;
        y[i] = d * (float)lo + m;
        y[i + 16] = d * (float)hi + m;
    }
}
inline void qdec_iq4_nl(qrow_t b, float *y) {
    const float d = qf16(b);
    for (int i = 0; i < 16; i++) {
        y[i] = d * (float)kvs_iq4_values[b[2 + i] & 0x0f];
        y[i + 16] = d * (float)kvs_iq4_values[b[2 + i] >> 4];
    }
}

/* 256-value types: chunk s < 8 of block b (values 32 s .. 32 s + 31). Sub-block j of the 16-value
 * types is 2 s + l / 16; value i = 32 s + l sits at group g = s / 4, shift 2 (s % 4). */
inline void qdec_q2_k(qrow_t b, int s, float *y) {
    qrow_t sc = b, qs = b + 16;
    const float d = qf16(b + 80), dmin = qf16(b + 82);
    const int g = s >> 2, sh = 2 * (s & 3);
    for (int h = 0; h < 2; h++) {
        const int j = 2 * s + h;
        const float dl = d * (float)(sc[j] & 0x0f), ml = dmin * (float)(sc[j] >> 4);
        for (int l = 16 * h; l < 16 * h + 16; l++) y[l] = dl * (float)((qs[32 * g + l] >> sh) & 3) - ml;
    }
}
inline void qdec_q3_k(qrow_t b, int s, float *y) {
    qrow_t hm = b, qs = b + 32, sc = b + 96;
    const float d = qf16(b + 108);
    const int g = s >> 2, sh = 2 * (s & 3);
    for (int h = 0; h < 2; h++) {
        const int j = 2 * s + h;
        int lo = (sc[j % 8] >> (4 * (j / 8))) & 0x0f, hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        const float dl = d * (float)((lo | hi << 4) - 32);
        for (int l = 16 * h; l < 16 * h + 16; l++) {
            int q = (qs[32 * g + l] >> sh) & 3;
            q -= (hm[l] >> s) & 1 ? 0 : 4;
            y[l] = dl * (float)q;
        }
    }
}
/* the 6-bit scale and min of sub-block j < 8 of q4_K / q5_K (12 packed bytes at s) */
inline void q_scale_min_k4(qrow_t s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
inline void qdec_q4_k(qrow_t b, int j, float *y) {
    const float d = qf16(b), dmin = qf16(b + 2);
    int sc, m;
    q_scale_min_k4(b + 4, j, &sc, &m);
    const float dl = d * (float)sc, ml = dmin * (float)m;
    qrow_t q = b + 16 + 32 * (j / 2);
    const int sh = 4 * (j % 2);
    for (int l = 0; l < 32; l++) y[l] = dl * (float)((q[l] >> sh) & 0x0f) - ml;
}
inline void qdec_q5_k(qrow_t b, int j, float *y) {
    const float d = qf16(b), dmin = qf16(b + 2);
    int sc, m;
    q_scale_min_k4(b + 4, j, &sc, &m);
    const float dl = d * (float)sc, ml = dmin * (float)m;
    qrow_t qh = b + 16, q = b + 48 + 32 * (j / 2);
    const int sh = 4 * (j % 2);
    for (int l = 0; l < 32; l++) y[l] = dl * (float)(((q[l] >> sh) & 0x0f) | ((qh[l] >> j) & 1) << 4) - ml;
}
inline void qdec_q6_k(qrow_t b, int s, float *y) {
    qrow_t ql = b, qh = b + 128;
    const float d = qf16(b + 208);
    const int g = s >> 2, sh = s & 3;
    for (int h = 0; h < 2; h++) {
        const float dl = d * (float)(char)b[192 + 2 * s + h];
        for (int l = 16 * h; l < 16 * h + 16; l++) {
            int lo = (ql[64 * g + l + 32 * (sh & 1)] >> (4 * (sh >> 1))) & 0x0f;
            int hi = (qh[32 * g + l] >> (2 * sh)) & 3;
            y[l] = dl * (float)((lo | hi << 4) - 32);
        }
    }
}
inline void qdec_iq4_xs(qrow_t b, int j, float *y) {
    const float d = qf16(b);
    const uint shi = qu16(b + 2);
    int s = ((b[4 + j / 2] >> (4 * (j % 2))) & 0x0f) | (int)((shi >> (2 * j)) & 3) << 4;
    const float dl = d * (float)(s - 32);
    qrow_t qs = b + 8 + 16 * j;
    for (int i = 0; i < 16; i++) {
        y[i] = dl * (float)kvs_iq4_values[qs[i] & 0x0f];
        y[i + 16] = dl * (float)kvs_iq4_values[qs[i] >> 4];
    }
}

/* y[0..32) = values [32 t, 32 t + 32) of a row of type qt at `row`. With qt a compile-time
 * constant (every caller's case) the switch folds away. */
inline void qdec32(int qt, qrow_t row, long t, float *y) {
    switch (qt) {
    case QT_F32: {
        __global const float *p = (__global const float *)row + 32 * t;
        for (int i = 0; i < 32; i++) y[i] = p[i];
        break;
    }
    case QT_F16: {
        __global const ushort *p = (__global const ushort *)row + 32 * t;
        for (int i = 0; i < 32; i++) y[i] = qh2f(p[i]);
        break;
    }
    case QT_BF16: {
        __global const ushort *p = (__global const ushort *)row + 32 * t;
        for (int i = 0; i < 32; i++) y[i] = as_float((uint)p[i] << 16);
        break;
    }
    case QT_Q8_0: qdec_q8_0(row + t * 34, y); break;
    case QT_Q4_0: qdec_q4_0(row + t * 18, y); break;
    case QT_Q4_1: qdec_q4_1(row + t * 20, y); break;
    case QT_Q5_0: qdec_q5_0(row + t * 22, y); break;
    case QT_Q5_1: qdec_q5_1(row + t * 24, y); break;
    case QT_IQ4_NL: qdec_iq4_nl(row + t * 18, y); break;
    case QT_Q2_K: qdec_q2_k(row + (t >> 3) * 84, (int)(t & 7), y); break;
    case QT_Q3_K: qdec_q3_k(row + (t >> 3) * 110, (int)(t & 7), y); break;
    case QT_Q4_K: qdec_q4_k(row + (t >> 3) * 144, (int)(t & 7), y); break;
    case QT_Q5_K: qdec_q5_k(row + (t >> 3) * 176, (int)(t & 7), y); break;
    case QT_Q6_K: qdec_q6_k(row + (t >> 3) * 210, (int)(t & 7), y); break;
    default: qdec_iq4_xs(row + (t >> 3) * 136, (int)(t & 7), y); break;
    }
}

/* One element (index c) of a row of an element type (f32, f16, bf16), for rows whose length is
 * not a multiple of 32 (plain types only). */
inline float qelem(int qt, qrow_t row, long c) {
    if (qt == QT_F32) return ((__global const float *)row)[c];
    uint h = ((__global const ushort *)row)[c];
    return qt == QT_F16 ? qh2f(h) : as_float(h << 16);
}
