/* Internals of kvs_model: device weights, the forward's workspace. */
#ifndef KVS_MODEL_INTERNAL_H
#define KVS_MODEL_INTERNAL_H

#include "internal.h"
#include "kvsieve/model.h"

typedef struct kvs_layer_tensors {
    kvs_tensor *attn_norm;   /* [dim] F32 */
    kvs_tensor *wq;          /* [n_heads*head_dim][dim] */
    kvs_tensor *wk, *wv;     /* [n_kv_heads*head_dim][dim] */
    kvs_tensor *wo;          /* [dim][n_heads*head_dim] */
    kvs_tensor *ffn_norm;    /* [dim] F32 */
    kvs_tensor *w_gate;      /* [ffn_dim][dim]  (w1) */
    kvs_tensor *w_down;      /* [dim][ffn_dim]  (w2) */
    kvs_tensor *w_up;        /* [ffn_dim][dim]  (w3) */
    kvs_tensor *bq, *bk, *bv;   /* [n_heads*head_dim], [n_kv_heads*head_dim] F32 (qkv_bias) or NULL */
    kvs_tensor *q_norm, *k_norm; /* [head_dim] F32 (qk_norm) or NULL */
} kvs_layer_tensors;

/* One layer's SPA-Cache singular proxy (proxy.c; kvs_model_spa_proxy): the top `rank` right singular
 * directions of the value (key = 0) or key (key = 1) projection, scaled by their singular values. */
typedef struct kvs_spa_proxy {
    int rank, key;           /* 0 rank: not made yet */
    kvs_tensor *w;           /* [rank][dim] f32 on the model's device (matmul weight layout) */
    float *w_host;           /* [rank][dim] the same on the host */
    double *sv;              /* [min(dim, kv_dim)] every singular value, descending */
} kvs_spa_proxy;

/* The proxy of layer l (made on first use, remade when rank or key change). Errors: as
 * kvs_model_spa_proxy. */
kvs_status kvs_model_proxy_get(kvs_model *m, int layer, int rank, int key, const kvs_spa_proxy **out);
void kvs_model_proxy_free(kvs_model *m);

#define KVS_WS_VIEWS 64 /* views one layer of the forward may hold at once */

/* What one step of the forward works in, grown on demand and reused (rows = max tokens seen): no
 * allocation per step once the sizes are reached. Device buffers, the views over them (an arena
 * emptied at every layer), and host index buffers. */
typedef struct kvs_workspace {
    int64_t rows;            /* row capacity of the per-token buffers */
    kvs_tensor *x, *xn;      /* [rows][dim] */
    kvs_tensor *q, *att;     /* [rows][n_heads*head_dim] */
    kvs_tensor *qr;          /* [rows][n_heads*head_dim]: queries rotated for a KVS_CACHE_ROTATE cache (made on use) */
    float *h_q;              /* host scratch of the query rotation, h_q_cap floats */
    int64_t qr_rows, h_q_cap;
    kvs_tensor *k, *v;       /* [rows][n_kv_heads*head_dim] */
    kvs_tensor *gate, *up;   /* [rows][ffn_dim] */
    kvs_tensor *pos;         /* [rows] I32 positions of the layer's rows */
    kvs_tensor *rpos;        /* [rows] I32 RoPE positions within the cache (kvs_step_plan.rope_in_cache) */
    kvs_tensor *mpos;        /* [rows] I32 key_limit - 1 of the layer's rows (block-causal mask, as causal q positions) */
    kvs_tensor *rowsel;      /* [rows] I32 generic row selection */
    kvs_tensor *zeros;       /* [rows] I32 zeros (broadcast of a bias row by kvs_gather) */
    kvs_tensor *stat_rows;   /* [rows] I32 */
    kvs_tensor *argmax;      /* [rows][n_heads] I32 */
    int64_t logit_rows;
    kvs_tensor *logits;      /* [logit_rows][vocab] */
    int64_t kv_cap;          /* capacity the statistics buffers were sized for */
    int64_t probe_cap;
    kvs_tensor *key_mass;    /* [n_kv_heads][kv_cap] F32 */
    kvs_tensor *probs;       /* [probe_cap][n_heads][kv_cap] F32 */
    kvs_tensor *probe_rows;  /* [probe_cap] I32 */
    kvs_tensor *ks, *vs, *ks_pos, *ks_len; /* sparse attention: gathered K/V [n_kv_heads][kv_cap][hd] */
    kvs_tensor *ks_lo, *vs_lo; /* the same for a qh8 cache's lower planes (QH8_LO; NULL otherwise) */
    kvs_tensor *keep_idx;    /* [n_kv_heads][kv_cap] I32 */
    int64_t lat_rows;        /* rows the latent-memory buffers hold (0: not made yet) */
    kvs_tensor *lat_max, *lat_sum; /* [lat_rows][n_heads] F32 row max / sum of the unnormalised attention */
    int64_t spa_rows;        /* rows the SPA residual buffers hold (0: not made yet) */
    kvs_tensor *spa_a, *spa_b; /* [spa_rows][dim] F32 (kvs_layer_plan.spa_delta: selected rows' input, deltas) */
    kvs_tensor *spa_idx;     /* [spa_rows] I32 cache rows (positions) of the residual store */
    /* ThinK's pruned keys (forward_attention.c, pruned_attention): per-row statistics [6][rows][n_heads]
     * F32 (row max / sum of the two segments, their log-normalisers), the tail's output
     * [rows][n_heads][head_dim], the pruned rows' argmax [rows][n_heads] I32, the tail's probe rows
     * [probe][n_heads][tk_cap], its gathered values [n_kv_heads][tk_cap][head_dim] (V's type), their
     * cache rows [n_kv_heads][tk_cap] I32 and its key mass [n_kv_heads][tk_cap] F32 */
    int64_t tk_rows, tk_probs_n, tk_cap;
    kvs_tensor *tk_stat, *tk_out, *tk_am, *tk_probs, *tk_v, *tk_idx, *tk_km;
    /* the queries' kept channels gathered [rows][n_heads][head_dim] F32 (a view of d_k' used) and, per
     * layer, their gather index [n_layers][n_heads][head_dim] I32 (flat channel n_heads' g * head_dim +
     * pruned_channels[g / G][t]), and the tail's statistics' cache rows [n_layers][n_kv_heads +
     * n_heads][tk_cap] I32 (h * capacity + P[h] + j: the scatter into the key mass and probe rows);
     * h_tk_qi / h_tk_si hold what was uploaded (re-uploaded only when it changes: at an eviction) */
    kvs_tensor *tk_qg, *tk_qi, *tk_si;
    int32_t *h_tk_qi, *h_tk_si;
    int64_t tk_si_cap;       /* tk_cap that tk_si / h_tk_si were made for (0: none) */
    float *h_tk;             /* host [6][rows][n_heads] */
    int32_t *h_tk_am;        /* host [2][rows][n_heads] */
    float *h_tk_merge;       /* host: a pruned layer's statistics (cache rows + tail rows) while the tail's
                              * are added in when they cannot be scattered on the device, grown on use */
    int64_t h_tk_merge_cap;
    kvs_tensor views[KVS_WS_VIEWS]; /* view arena (kvs_tensor_view_into: no references, never destroyed) */
    int n_views;
    int32_t *h_pos, *h_rows, *h_pos_rows, *h_tmp, *h_keep; /* host: positions, identity rows, rows of ws.pos,
                                                            * scratch, keep-set indices/positions/lengths */
    int64_t h_pos_cap, h_rows_cap, h_pos_rows_cap, h_tmp_cap, h_keep_cap;
    int32_t *h_spa;          /* host: the SPA residual mode's selected rows among the candidates */
    int64_t h_spa_cap;
} kvs_workspace;

struct kvs_model {
    kvs_device *dev;
    kvs_model_hparams hp;
    kvs_tensor *tok_embd;    /* [vocab][dim] */
    kvs_tensor *out_norm;    /* [dim] F32 */
    kvs_tensor *output;      /* [vocab][dim]; may be tok_embd (tied) */
    int output_tied;
    kvs_layer_tensors *layers; /* [n_layers] */
    int64_t weight_bytes;
    int64_t mapped_bytes;    /* of weight_bytes, used in place from the model file (map_weights) */
    kvs_model_file *own_mf;  /* the file kvs_model_load opened, kept for the mapped weights */
    int map_weights;         /* kvs_model_params.map_weights on a CPU device */
    kvs_workspace ws;
    /* host result buffers */
    float *logits_host;
    int64_t logits_host_cap;
    kvs_layer_stats *stats;  /* [n_layers] */
    float **key_mass_host, **probs_host;
    int32_t **argmax_host;
    int64_t *key_mass_cap, *probs_cap, *argmax_cap;
    float **x_host;          /* [n_layers] want_x copies of the normalised layer inputs */
    int64_t *x_cap;
    float **q_host;          /* [n_layers] want_q copies of the rotated queries */
    int64_t *q_cap;
    kvs_spa_proxy *spa;      /* [n_layers] SPA-Cache singular proxies (proxy.c), made on first use */
    float *proxy_host;       /* [rows][rank] the forward's proxy scores (kvs_layer_plan.select) */
    int64_t proxy_host_cap;
    /* QuantSpec's draft weights (kvs_model_set_draft_weights; model_weights.c): what a kv_draft
     * forward multiplies by. NULL: the draft uses the model's own. A matrix not copied (already of
     * the type, rows not whole blocks) points to the model's tensor; norms and biases always do. */
    kvs_layer_tensors *draft_layers; /* [n_layers] */
    kvs_tensor *draft_output;
    kvs_dtype draft_type;
    int64_t draft_bytes;     /* bytes of the copies */
};

/* Frees the draft weights (kvs_model_destroy). */
void kvs_model_draft_free(kvs_model *m);

void kvs_workspace_free(kvs_workspace *ws);

/* model_weights.c: an attention weight of `layer` read to the host as f32, row-major as stored:
 * which 'q' -> Wq [n_heads*head_dim][dim], 'o' -> Wo [dim][n_heads*head_dim], 'k' / 'v' -> Wk / Wv
 * [n_kv_heads*head_dim][dim]. dst holds as many floats as the weight has. Used by the eviction policies that read weights (critical,
 * expected). Errors: KVS_ERR_INVALID_ARGUMENT (NULL, bad layer or which), KVS_ERR_DTYPE (a weight
 * dtype other than f32/f16/bf16), KVS_ERR_OUT_OF_MEMORY, the device's. */
kvs_status kvs_model_attn_weight_f32(const kvs_model *m, int layer, char which, float *dst);

/* A model with its host arrays allocated for hp (no weights yet): kvs_model_create and
 * kvs_model_create_random fill the weights. Errors: KVS_ERR_OUT_OF_MEMORY. */
kvs_status kvs_model_alloc(kvs_model **out, kvs_device *dev, const kvs_model_hparams *hp);
/* KVS_OK when the device can multiply W (a matrix, allocated, not yet filled; the token table also
 * looked up), else KVS_ERR_UNSUPPORTED naming the weight and the backend's reason. */
kvs_status kvs_model_weight_supported(kvs_model *m, kvs_tensor *W, const char *name);

#endif
