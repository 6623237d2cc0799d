// Block decoders (and the KV-cache encoders) of llama.cpp's quantized types, written once for every
// Vulkan shader. The layouts are those of core/quant/quant_blocks.h (its table of byte offsets and
// its per-type decoders are the reference: this file mirrors them field for field and computes the
// same f32 operations in the same order, so a decoded value equals kvs_dequant_row's unless the
// driver fuses a multiply-add). Storage buffers are read as 32-bit words (`uint d[]`): no 8/16-bit
// storage extension is needed; a field at any byte offset is assembled from at most two words.
//
// Use: the buffer-independent part is included once; then, per storage buffer a shader decodes,
//     #define QB w              // the buffer's instance name (a `buffer { uint d[]; } w;`)
//     #define QFN(x) w_##x      // a name prefix for that buffer's functions
//     #include "quant.glsl"
//     #undef QB
//     #undef QFN
// which defines, for that buffer (boff = the tensor's first byte in the binding; e = element index
// within the tensor, row-major, so element (r, c) of a [rows][k] tensor is r*k + c):
//   vec4  QFN(dq4)(dt, boff, e)   values e..e+3 (e % 4 == 0) of a tensor of block type dt
//   float QFN(dq1)(dt, boff, e)   value e alone
// and the byte readers QFN(b8), QFN(u16), QFN(u32) (byte address b within the binding).
// Every group of 4 values (e % 4 == 0) lies in one block and one sub-block (sub-blocks are 16 or 32
// values), so dq4 reads one scale set and one 32-bit word of codes (two for the 5/6-bit types).
//
//   type    values bytes  value i of a block (byte offsets: quant_blocks.h)
//   q4_0      32    18    d * (nib(i) - 8)
//   q4_1      32    20    d * nib(i) + m
//   q5_0      32    22    d * ((nib(i) | h(i) << 4) - 16)
//   q5_1      32    24    d * (nib(i) | h(i) << 4) + m
//   q8_0      32    34    d * qs[i]
//   iq4_nl    32    18    d * KV[nib(i)]
//   q2_K     256    84    (d * sc_j) * q2 - dmin * m_j           (j = i / 16)
//   q3_K     256   110    (d * (s_j - 32)) * (q2 - 4 * !hbit)    (j = i / 16)
//   q4_K     256   144    (d * sc_j) * q4 - dmin * m_j           (j = i / 32)
//   q5_K     256   176    (d * sc_j) * q5 - dmin * m_j           (j = i / 32)
//   q6_K     256   210    (d * sc_j) * (q6 - 32)                 (j = i / 16)
//   iq4_xs   256   136    (d * (s_j - 32)) * KV[nib]             (j = i / 32)
#ifndef KVS_QUANT_GLSL_COMMON
#define KVS_QUANT_GLSL_COMMON

// The 16 values of iq4_nl / iq4_xs's non-linear code (kvs_iq4_values).
const int KVS_IQ4[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);

// values per block and bytes per block of a block type (vk_params.h codes = kvs_dtype)
uint kvs_qblock(uint dt) { return dt >= KVS_VK_DT_Q2_K ? 256u : 32u; }
uint kvs_qbytes(uint dt) {
    switch (dt) {
    case KVS_VK_DT_Q8_0: return 34u;
    case KVS_VK_DT_Q4_0: return 18u;
    case KVS_VK_DT_Q4_1: return 20u;
    case KVS_VK_DT_Q5_0: return 22u;
    case KVS_VK_DT_Q5_1: return 24u;
    case KVS_VK_DT_IQ4_NL: return 18u;
    case KVS_VK_DT_Q2_K: return 84u;
    case KVS_VK_DT_Q3_K: return 110u;
    case KVS_VK_DT_Q4_K: return 144u;
    case KVS_VK_DT_Q5_K: return 176u;
    case KVS_VK_DT_Q6_K: return 210u;
    default: return 136u; // iq4_xs
    }
}
// byte k (0..3) of word w, as unsigned / as signed
#define KVS_QB(w, k) (((w) >> (8u * (k))) & 0xffu)
#define KVS_QS8(w, k) (int((w) << (24u - 8u * (k))) >> 24)
// the 4 bytes of w as floats, each minus `off`
vec4 kvs_q4f(uint w, int off) {
    return vec4(float(int(KVS_QB(w, 0u)) - off), float(int(KVS_QB(w, 1u)) - off), float(int(KVS_QB(w, 2u)) - off),
                float(int(KVS_QB(w, 3u)) - off));
}
vec4 kvs_q4iq(uint w) {
    return vec4(float(KVS_IQ4[KVS_QB(w, 0u)]), float(KVS_IQ4[KVS_QB(w, 1u)]), float(KVS_IQ4[KVS_QB(w, 2u)]),
                float(KVS_IQ4[KVS_QB(w, 3u)]));
}
#endif

// ---- per-buffer readers and decoders (QB, QFN defined by the includer) ---------------------------

uint QFN(b8)(uint b) { return (QB.d[b >> 2u] >> ((b & 3u) * 8u)) & 0xffu; }
// little-endian 16 bits at an even byte address
uint QFN(u16)(uint b) { return (QB.d[b >> 2u] >> ((b & 2u) * 8u)) & 0xffffu; }
// little-endian 32 bits at any byte address (the second word is read only when the field spans it)
uint QFN(u32)(uint b) {
    uint s = (b & 3u) * 8u, w0 = QB.d[b >> 2u];
    return s == 0u ? w0 : (w0 >> s) | (QB.d[(b >> 2u) + 1u] << (32u - s));
}

// 6-bit scale (x) and min (y) of sub-block j < 8 of q4_K / q5_K, scales at byte s (12 bytes)
uvec2 QFN(scmin)(uint s, uint j) {
    if (j < 4u) return uvec2(QFN(b8)(s + j) & 63u, QFN(b8)(s + j + 4u) & 63u);
    uint b = QFN(b8)(s + j + 4u);
    return uvec2((b & 15u) | ((QFN(b8)(s + j - 4u) >> 6u) << 4u), (b >> 4u) | ((QFN(b8)(s + j) >> 6u) << 4u));
}

vec4 QFN(dq4)(uint dt, uint boff, uint e) {
    uint QK = kvs_qblock(dt), NB = kvs_qbytes(dt);
    uint blk = e / QK, i = e % QK;
    uint bo = boff + blk * NB;
    switch (dt) {
    case KVS_VK_DT_Q8_0: {
        float d = h2f(QFN(u16)(bo));
        uint w = QFN(u32)(bo + 2u + i);
        return vec4(float(KVS_QS8(w, 0u)), float(KVS_QS8(w, 1u)), float(KVS_QS8(w, 2u)), float(KVS_QS8(w, 3u))) * d;
    }
    case KVS_VK_DT_Q4_0:
    case KVS_VK_DT_IQ4_NL: {
        float d = h2f(QFN(u16)(bo));
        uint w = (QFN(u32)(bo + 2u + (i & 15u)) >> (i >= 16u ? 4u : 0u)) & 0x0f0f0f0fu;
        return dt == KVS_VK_DT_Q4_0 ? d * kvs_q4f(w, 8) : d * kvs_q4iq(w);
    }
    case KVS_VK_DT_Q4_1: {
        float d = h2f(QFN(u16)(bo)), m = h2f(QFN(u16)(bo + 2u));
        uint w = (QFN(u32)(bo + 4u + (i & 15u)) >> (i >= 16u ? 4u : 0u)) & 0x0f0f0f0fu;
        return d * kvs_q4f(w, 0) + m;
    }
    case KVS_VK_DT_Q5_0:
    case KVS_VK_DT_Q5_1: {
        // q5_0: d @0, qh @2, qs @6; q5_1: d @0, m @2, qh @4, qs @8; value i's fifth bit is bit i of qh
        uint o = dt == KVS_VK_DT_Q5_0 ? 2u : 4u;
        float d = h2f(QFN(u16)(bo));
        uint qh = (QFN(u32)(bo + o) >> i) & 15u;
        uint w = (QFN(u32)(bo + o + 4u + (i & 15u)) >> (i >= 16u ? 4u : 0u)) & 0x0f0f0f0fu;
        w |= ((qh & 1u) << 4u) | ((qh & 2u) << 11u) | ((qh & 4u) << 18u) | ((qh & 8u) << 25u);
        if (dt == KVS_VK_DT_Q5_0) return d * kvs_q4f(w, 16);
        return d * kvs_q4f(w, 0) + h2f(QFN(u16)(bo + 2u));
    }
    case KVS_VK_DT_Q2_K: {
        // i = 128g + 32s + l: bits 2s.. of qs[32g + l]; sub-block j = i / 16: scales[j]
        uint g = i >> 7u, s = (i >> 5u) & 3u, l = i & 31u, j = i >> 4u;
        float d = h2f(QFN(u16)(bo + 80u)), dmin = h2f(QFN(u16)(bo + 82u));
        uint sc = QFN(b8)(bo + j);
        float dl = d * float(sc & 15u), ml = dmin * float(sc >> 4u);
        uint w = (QFN(u32)(bo + 16u + 32u * g + l) >> (2u * s)) & 0x03030303u;
        return dl * kvs_q4f(w, 0) - ml;
    }
    case KVS_VK_DT_Q3_K: {
        // low 2 bits as q2_K (qs @32); high bit: bit (i / 32) of hmask[l]; 6-bit scale of j = i / 16
        uint g = i >> 7u, s = (i >> 5u) & 3u, l = i & 31u, j = i >> 4u;
        float d = h2f(QFN(u16)(bo + 108u));
        uint lo = (QFN(b8)(bo + 96u + (j & 7u)) >> (4u * (j >> 3u))) & 15u;
        uint hi = (QFN(b8)(bo + 104u + (j & 3u)) >> (2u * (j >> 2u))) & 3u;
        float dl = d * float(int(lo | (hi << 4u)) - 32);
        uint w = (QFN(u32)(bo + 32u + 32u * g + l) >> (2u * s)) & 0x03030303u;
        uint hm = ~(QFN(u32)(bo + l) >> (i >> 5u)) & 0x01010101u; // 1 where the high bit is clear
        return dl * (kvs_q4f(w, 0) - 4.0 * kvs_q4f(hm, 0));
    }
    case KVS_VK_DT_Q4_K:
    case KVS_VK_DT_Q5_K: {
        // sub-block j = i / 32: nibble (j % 2) of qs[32 * (j / 2) + l]; q5_K: bit j of qh[l] is bit 4
        uint j = i >> 5u, l = i & 31u;
        float d = h2f(QFN(u16)(bo)), dmin = h2f(QFN(u16)(bo + 2u));
        uvec2 sm = QFN(scmin)(bo + 4u, j);
        float dl = d * float(sm.x), ml = dmin * float(sm.y);
        uint qs = dt == KVS_VK_DT_Q4_K ? 16u : 48u;
        uint w = (QFN(u32)(bo + qs + 32u * (j >> 1u) + l) >> (4u * (j & 1u))) & 0x0f0f0f0fu;
        if (dt == KVS_VK_DT_Q5_K) w |= ((QFN(u32)(bo + 16u + l) >> j) & 0x01010101u) << 4u;
        return dl * kvs_q4f(w, 0) - ml;
    }
    case KVS_VK_DT_Q6_K: {
        // i = 128g + 32s + l: low 4 bits nibble (s >> 1) of ql[64g + l + 32(s & 1)], high 2 bits
        // bits 2s.. of qh[32g + l] (qh @128); q - 32 times d * scales[i / 16] (int8 @192, d @208)
        uint g = i >> 7u, s = (i >> 5u) & 3u, l = i & 31u;
        float d = h2f(QFN(u16)(bo + 208u));
        float dl = d * float(KVS_QS8(QFN(b8)(bo + 192u + (i >> 4u)), 0u));
        uint lo = (QFN(u32)(bo + 64u * g + l + 32u * (s & 1u)) >> (4u * (s >> 1u))) & 0x0f0f0f0fu;
        uint hi = (QFN(u32)(bo + 128u + 32u * g + l) >> (2u * s)) & 0x03030303u;
        return dl * kvs_q4f(lo | (hi << 4u), 32);
    }
    default: {
        // iq4_xs: sub-block j = i / 32, 6-bit scale (nibble j % 2 of scales_l[j / 2] @4) | (bits 2j..
        // of scales_h @2) << 4, minus 32; codes as iq4_nl over qs[16j ..] (@8)
        uint j = i >> 5u, ii = i & 31u;
        float d = h2f(QFN(u16)(bo));
        uint sc = ((QFN(b8)(bo + 4u + (j >> 1u)) >> (4u * (j & 1u))) & 15u) | (((QFN(u16)(bo + 2u) >> (2u * j)) & 3u) << 4u);
        float dl = d * float(int(sc) - 32);
        uint w = (QFN(u32)(bo + 8u + 16u * j + (ii & 15u)) >> (ii >= 16u ? 4u : 0u)) & 0x0f0f0f0fu;
        return dl * kvs_q4iq(w);
    }
    }
}

float QFN(dq1)(uint dt, uint boff, uint e) {
    vec4 v = QFN(dq4)(dt, boff, e & ~3u);
    uint k = e & 3u;
    return k == 0u ? v.x : k == 1u ? v.y : k == 2u ? v.z : v.w;
}
