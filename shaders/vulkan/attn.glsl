// Attention notes shared by attn.comp and attn_stats.comp: key visibility (flags: vk_params.h).
// q: [n_q][n_heads][D] F32; k, v: [n_kv_heads][cap][D] F32 or F16 (KVDT); query head g reads kv
// head g / G (GQA, G = n_heads / n_kv_heads). Key j is visible to query row i of kv head h iff
// j < valid(h) = min(kv_len[h], n_kv) (or n_kv), j < row_len[i] (if given), kpos(j) <= qpos(i)
// (if causal) and mask[i][j] != -inf. logit = scale * q.k + mask[i][j].
