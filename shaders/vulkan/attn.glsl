// Attention notes shared by attn.comp and attn_stats.comp: key visibility (flags: vk_params.h).
// q: [n_q][n_heads][D] F32; k, v: [n_kv_heads][cap][D] of F32, F16, BF16 or a block type (K and
// V types separately; block types: D % 32 == 0, rows of whole blocks, decoded by quant.glsl); query head g reads kv
// head g / G (GQA, G = n_heads / n_kv_heads). Key j is visible to query row i of kv head h iff
// j < valid(h) = min(kv_len[h], n_kv) (or n_kv), j < row_len[i] (if given), kpos(j) <= qpos(i)
// (if causal) and mask[i][j] != -inf. logit = scale * q.k + mask[i][j].
