// Attention notes shared by attn.comp and attn_stats.comp: key visibility (flags: vk_params.h).
// q: [n_q][n_heads][D] F32; k, v: [n_kv_heads][cap][D] of F32, F16, BF16 or a block type (K and
// V types separately; block types: D % 32 == 0, rows of whole blocks, decoded by quant.glsl); query head g reads kv
// head g / G (GQA, G = n_heads / n_kv_heads). Key j is visible to query row i of kv head h iff
// j < valid(h) = min(kv_len[h], n_kv) (or n_kv), j < row_len[i] (if given), kpos(j) <= qpos(i)
// (if causal) and mask[i][j] != -inf. logit = scale * q.k + mask[i][j].
// A qh8 side (QuantSpec's hierarchical cache, spec constant KLO / VLO = 1): k (v) is its q4_1 upper
// plane and a second binding its lower plane (16 bytes per 32 values, byte offset oklo / ovlo); the
// values are the 8-bit ones x8 = x4 + (d / 16) (lo - 7.5) (quant_blocks.h, kvs_qb_qh8's order), x4
// the q4_1 decode of the upper block and d its scale; without the lower plane the q4_1 view is read.

// values e..e+3 (e % 4 == 0) of a qh8 side: x4 their q4_1 view, d the block's scale, lw the
// little-endian word of the lower plane's bytes (e % 32) & 15 .. + 3 of the block
vec4 qh8_add_lo(vec4 x4, float d, uint lw, uint e) {
    uint w = (lw >> ((e & 16u) != 0u ? 4u : 0u)) & 0x0f0f0f0fu;
    return x4 + (d * 0.0625) * (vec4(float(w & 0xffu), float((w >> 8u) & 0xffu), float((w >> 16u) & 0xffu),
                                     float(w >> 24u)) - 7.5);
}
