/* kvsieve — ops: the compute primitives every backend implements.
 *
 * Each op is validated here, once, at the public boundary (shapes, dtypes, devices, aliasing) and
 * then dispatched to the tensor's backend. All tensors of one call must live on the same device.
 * Ops are enqueued in order (see device.h); outputs are complete when kvs_tensor_download() or
 * kvs_device_sync() returns.
 *
 * Shapes are written slowest-first: [n][dim] is a tensor with ne = {dim, n}. "Rows" of a tensor are
 * its ne[0]-length vectors: a tensor with ne = {a, b, c} has b*c rows of length a.
 *
 * Errors every op may return, in addition to those listed per op:
 *   KVS_ERR_INVALID_ARGUMENT  NULL device/tensor/params, tensors on different devices, bad param value
 *   KVS_ERR_SHAPE             shapes inconsistent with each other (message names both)
 *   KVS_ERR_DTYPE             a dtype the op does not accept
 *   KVS_ERR_UNSUPPORTED       the device cannot run this variant (message says why, e.g. no f16):
 *                             the backend's support query, asked before every call (to ask
 *                             without running: kvs_device_set_query in device.h)
 *   KVS_ERR_BACKEND           driver failure (message names the failing call)
 *   KVS_ERR_OUT_OF_MEMORY     scratch memory could not be allocated
 *
 * Index tensors (I32) that live on the device cannot be checked on the host before an op runs.
 * Contract: backends never read or write outside a tensor; an index outside its valid range makes
 * gather/scatter skip that row (dst row left untouched) and embedding write a zero row. The CPU
 * backend additionally reports KVS_ERR_OUT_OF_RANGE for such indices.
 */
#ifndef KVSIEVE_OPS_H
#define KVSIEVE_OPS_H

#include <stdint.h>

#include "kvsieve/device.h"
#include "kvsieve/export.h"
#include "kvsieve/status.h"
#include "kvsieve/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------------------- */
/* Dense linear algebra and element-wise ops                                                      */

/* Matrix product with a row-major weight, as nn.Linear / llama.cpp's mul_mat:
 *   y[i][r] = sum_c W[r][c] * x[i][c]   (+ y[i][r] if accumulate)
 * W: [m][k] (ne = {k, m}) F32, F16, BF16 or a block type (Q8_0, Q4_0, ..., IQ4_XS; k % block == 0);
 * x: [n][k] F32 (any ndim, flattened to n = nelements/k rows); y: [n][m] F32 with the same row count.
 * Accumulation in f32. y must not alias x or W. Backends: CPU via cblas_sgemm (OpenBLAS) or its own
 * AVX-512 GEMM, every dtype; non-F32 weights are converted to f32 per tile (decoding-sized n <= 4: a
 * block at a time, in registers/L1, then f32 FMA), except that on x86 with AVX2 a block-type W with up
 * to 64 x rows (16 for the 32-value types) multiplies x quantized to 8 bits per block, in integers,
 * as llama.cpp's CPU path does (error <= 0.57 d per x value, d = the block's amax / 127; README
 * "Weight types"; the matmul variants avx512, avx2, portable keep f32 activations). OpenCL: every
 * dtype, F32 via CLBlast (F16/BF16 converted to an f32 copy above 4 rows), the block types read
 * directly by shaders/opencl/qmatmul.cl (GEMV up to 4 rows, 64 x 32 tiles above; f32 activations).
 * Vulkan: its tiled and GEMV shaders, every dtype, the block types decoded from the stored blocks
 * (shaders/vulkan/quant.glsl; f32 activations and accumulation). */
KVS_API kvs_status kvs_matmul(kvs_device *dev, const kvs_tensor *W, const kvs_tensor *x,
                              kvs_tensor *y, int accumulate);

/* y = a + b, element-wise, F32, identical element counts (shapes may differ). y may alias a or b. */
KVS_API kvs_status kvs_add(kvs_device *dev, const kvs_tensor *a, const kvs_tensor *b, kvs_tensor *y);

/* The log of an attention call's softmax mass from its row_max m and row_sum l
 * (kvs_attention_params): lse[i] = m[i] + log(l[i]), or -INFINITY where l[i] == 0 (no visible key;
 * a NaN stays NaN), the form kvs_attention_params.lse_extra takes, so one call's mass reaches another
 * without the host (ThinK's pruned attention, core/model/forward_attention.c). All F32 with equal
 * element counts; lse may be row_max or row_sum itself (the same view) but not partly overlap one.
 * Every backend (CPU: logf, as the host would; OpenCL and Vulkan: the device's log, within a few
 * ulp). Errors: KVS_ERR_DTYPE, KVS_ERR_SHAPE, KVS_ERR_INVALID_ARGUMENT (NULL, another device, partial
 * overlap). */
KVS_API kvs_status kvs_log_mass(kvs_device *dev, const kvs_tensor *row_max, const kvs_tensor *row_sum,
                                kvs_tensor *lse);

/* dst = convert(src): element-wise copy between F32, F16 and BF16 (any pair, including the same
 * dtype), identical element counts. Round-to-nearest-even. dst must not alias src. */
KVS_API kvs_status kvs_copy(kvs_device *dev, const kvs_tensor *src, kvs_tensor *dst);

/* RMSNorm (Zhang & Sennrich 2019; llama): y[i] = x[i] / sqrt(mean_c(x[i][c]^2) + eps) * w
 * x, y: [n][dim] F32 (rows of length dim = ne[0]); w: [dim] F32. y may alias x. eps > 0 (1e-5 llama).
 * The mean of squares is accumulated in f32 (CPU: f64). */
KVS_API kvs_status kvs_rmsnorm(kvs_device *dev, const kvs_tensor *x, const kvs_tensor *w,
                               kvs_tensor *y, float eps);

/* SwiGLU (Shazeer 2020, llama FFN): out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
 * gate, up, out: F32, identical shapes. out may alias gate or up. */
KVS_API kvs_status kvs_swiglu(kvs_device *dev, const kvs_tensor *gate, const kvs_tensor *up,
                              kvs_tensor *out);

/* Row softmax: y[i][j] = exp(s*x[i][j] - m_i) / sum_j exp(s*x[i][j] - m_i), m_i = max_j s*x[i][j].
 * x, y: F32 identical shapes, rows along ne[0]; y may alias x. scale s > 0 (1.0 for plain softmax).
 * Rows that contain -inf values are handled (their weight is 0); a row of all -inf gives all 0. */
KVS_API kvs_status kvs_softmax(kvs_device *dev, const kvs_tensor *x, kvs_tensor *y, float scale);

/* Embedding lookup: out[i] = table[ids[i]] converted to f32.
 * table: [vocab][dim] F32, F16, BF16 or a block type (CPU, OpenCL, Vulkan); ids: host array of n token ids, each in [0, vocab)
 * (checked: KVS_ERR_OUT_OF_RANGE names the first bad id); out: [n][dim] F32. */
KVS_API kvs_status kvs_embedding(kvs_device *dev, const kvs_tensor *table, const int32_t *ids,
                                 int64_t n, kvs_tensor *out);

/* ---------------------------------------------------------------------------------------------- */
/* Rotary position embedding                                                                      */

typedef enum kvs_rope_mode {
    /* Meta llama / GGUF layout: rotate adjacent pairs (x[2i], x[2i+1]). */
    KVS_ROPE_ADJACENT = 0,
    /* GPT-NeoX / Hugging Face rotate_half layout: rotate (x[i], x[i + n_rot/2]). */
    KVS_ROPE_NEOX = 1
} kvs_rope_mode;

typedef struct kvs_rope_params {
    kvs_rope_mode mode;   /* default KVS_ROPE_ADJACENT */
    float theta_base;     /* default 10000 */
    int n_rot;            /* rotated dims per head, even, <= head_dim; 0 (default) = head_dim */
    float freq_scale;     /* linear position scaling: angle uses pos * freq_scale; default 1 */
} kvs_rope_params;

KVS_API kvs_rope_params kvs_rope_params_default(void);

/* RoPE (Su et al. 2021, "RoFormer", eq. 34): for pair i < n_rot/2 of each head vector,
 *   theta_i = pos * freq_scale * theta_base^(-2i/n_rot),
 *   (a, b) -> (a cos theta_i - b sin theta_i, a sin theta_i + b cos theta_i),
 * the pair being (x[2i], x[2i+1]) (ADJACENT) or (x[i], x[i+n_rot/2]) (NEOX); dims >= n_rot pass.
 * x: [n][n_heads][head_dim] F32, rotated in place; pos: [n] I32 positions (host-known, uploaded).
 * Angles are computed from an f64 frequency table; backends agree to rounding (bit-identical results
 * are not promised: the tests bound the normalised MSE by 1e-7 for positions up to 8192). */
KVS_API kvs_status kvs_rope(kvs_device *dev, kvs_tensor *x, const kvs_tensor *pos,
                            const kvs_rope_params *p);

/* Re-rotation of keys already stored after RoPE (StreamingLLM-style position shifting): rotates
 * rows [0, n_rows) of every kv head by their own position delta, using R(a)R(b) = R(a+b):
 * k: [n_kv_heads][capacity][head_dim] F32 or F16 (a KV-cache layer), in place;
 * delta: [n_kv_heads][capacity] I32 (rows >= n_rows ignored). 0 < n_rows <= capacity. */
KVS_API kvs_status kvs_rope_shift(kvs_device *dev, kvs_tensor *k, const kvs_tensor *delta,
                                  int64_t n_rows, const kvs_rope_params *p);

/* ---------------------------------------------------------------------------------------------- */
/* Attention                                                                                      */

typedef struct kvs_attention_params {
    float scale;               /* logit scale; 0 (default) = 1/sqrt(d_q), d_q = q->ne[0] (= d_k, k's
                                * head_dim, unless q_channels is given) */
    int causal;                /* 0 (default): bidirectional; 1: key j visible to query i iff
                                * kpos(j) <= qpos(i) */
    int64_t n_kv;              /* keys used per kv head, <= capacity; 0 (default) = capacity */
    const kvs_tensor *q_pos;   /* I32 [n_q]; qpos(i). NULL: qpos(i) = n_kv - n_q + i */
    const kvs_tensor *k_pos;   /* I32 [n_kv_heads][capacity]; kpos(j) per head. NULL: kpos(j) = j */
    const kvs_tensor *kv_len;  /* I32 [n_kv_heads]: valid keys per kv head (ragged caches after
                                * head-wise eviction), each <= n_kv. NULL: n_kv for every head */
    const kvs_tensor *row_len; /* I32 [n_q]: query row i sees only keys j < row_len[i].
                                * NULL: no limit */
    const kvs_tensor *mask;    /* F32 [n_q][n_kv] additive logit bias, shared by all heads
                                * (-INFINITY hides a key). NULL: none */
    const kvs_tensor *k_lo;    /* QH8_LO [n_kv_heads][capacity][d_k]: the lower-nibble plane of a
                                * hierarchical qh8 K (kvs_cache_k_lo); k is then its upper plane (Q4_1)
                                * and the keys are the 8-bit values (core/quant/quant_blocks.h).
                                * NULL (default): k alone (for a qh8 cache: its 4-bit view) */
    const kvs_tensor *v_lo;    /* the same for V */

    /* ---- statistics written by the same pass (each optional; NULL = not computed) ---- */
    const kvs_tensor *stat_rows; /* I32 [n_sel]: query rows feeding key_mass. NULL: all rows */
    kvs_tensor *key_mass;      /* F32 [n_kv_heads][capacity]: for each kv head h and key j,
                                * (1/G) sum_{heads g of h's group} sum_{i in stat_rows} p[i][g][j],
                                * G = n_heads/n_kv_heads (GQA-group mean). Keys >= the head's valid
                                * length are left untouched. */
    int key_mass_accumulate;   /* 1: add into key_mass instead of overwriting (H2O running sums) */
    const kvs_tensor *probe_rows; /* I32 [n_probe]: query rows whose attention rows are written */
    kvs_tensor *probs;         /* F32 [n_probe][n_heads][capacity]: p[probe_rows[r]][head][j];
                                * invisible and invalid keys are written as 0 */
    kvs_tensor *argmax;        /* I32 [n_q][n_heads]: most-attended key per query row and head
                                * (lowest j on ties; -1 when no key is visible) */
    kvs_tensor *row_max;       /* F32 [n_q][n_heads]: m = max_j scaled logit (+mask); -FLT_MAX
                                * when no key is visible */
    kvs_tensor *row_sum;       /* F32 [n_q][n_heads]: l = sum_j exp(logit_j - m) */
    int unnormalised;          /* 1: out = sum_j exp(logit_j - m) v_j (numerator only), so that
                                * other terms (latent memory) can be merged with row_max/row_sum;
                                * 0 (default): out = numerator / l */
    const int32_t *q_channels; /* host array [n_kv_heads][d_k]: the query channels kv head h's keys
                                * hold (ThinK's pruned keys: k stores d_k < d_q channels of each key);
                                * key channel c of head h pairs with query channel q_channels[h][c],
                                * each in [0, d_q) (any order, repeats allowed). q is then
                                * [n_q][n_heads][d_q] with d_q = q->ne[0] >= d_k, and the result equals
                                * attention over full-width keys holding 0 in the other channels
                                * (default scale 1/sqrt(d_q)). The front-end gathers q into a
                                * temporary [n_q][n_heads][d_k] (kvs_gather, every backend) first.
                                * NULL (default): q->ne[0] == d_k */
    const kvs_tensor *lse_extra; /* F32 [n_q][n_heads]: per query row and head, the log of the softmax
                                * mass of keys outside this call, on this call's logit scale
                                * (log sum_j' exp(logit_j') over the other keys: m + log l of another
                                * call with row_max m and row_sum l; -INFINITY: none). The op then
                                * normalises out and every probability statistic (key_mass, probs) by
                                * l + exp(lse_extra - m) instead of l, so attention over keys split
                                * into two calls (ThinK's pruned rows and the full-width rows appended
                                * since, core/model/forward_attention.c) gives each call's exact share:
                                * out = out_1 + out_2, key_mass and probs exact per key. row_max,
                                * row_sum and argmax stay the call's own. A row with no visible key
                                * keeps out = 0. Not with unnormalised = 1 (KVS_ERR_INVALID_ARGUMENT).
                                * Every backend (cpu with every variant, opencl, vulkan). NULL
                                * (default): none */
} kvs_attention_params;

KVS_API kvs_attention_params kvs_attention_params_default(void);

/* Scaled dot-product attention with grouped-query heads (Vaswani et al. 2017 eq. 1; GQA: Ainslie
 * et al. 2023), computed as one tiled online-softmax pass (FlashAttention, Dao et al. 2022, alg. 1)
 * that never expands K/V to n_heads:
 *   q:   [n_q][n_heads][d_q] F32, d_q = d_k (or, with p->q_channels, d_q >= d_k: each kv head's
 *        keys pair with the d_k query channels it lists)
 *   k:   [n_kv_heads][capacity][d_k], v: [n_kv_heads][capacity][d_v], KV-cache layout. d_k =
 *        k->ne[0] and d_v = v->ne[0] = out->ne[0] may differ (MLA-style heads, or ThinK's pruned
 *        keys: core/policy/think.c); every backend (cpu with every variant, opencl, vulkan) and
 *        every statistic takes any pair. Each of K and V (independently) F32,
 *        F16, BF16 or a block type Q8_0, Q4_0, Q4_1, IQ4_NL (that tensor's head_dim % 32 == 0, a row =
 *        head_dim/32 blocks): the CPU backend reads the stored rows directly (f16/bf16 tiles converted, block
 *        rows decoded 32 keys at a time into L1 with core/quant's decoders, never a dequantized copy
 *        of the cache); OpenCL reads every one of these types likewise (tiles decoded 32 values at
 *        a time by shaders/opencl/qblocks.cl), and so does Vulkan (decoded while staging each key
 *        tile, shaders/vulkan/quant.glsl). With p->k_lo (p->v_lo) k (v) must be Q4_1 and the op reads
 *        the qh8 8-bit values of the two planes, x8 = x4 + (d / 16) (lo - 7.5) (quant_blocks.h), in
 *        every kernel and statistic (devices with kvs_caps.kv_hierarchical: the CPU, OpenCL
 *        (shaders/opencl/attention.cl, QT_QH8) and Vulkan (attn.comp / attn_stats.comp, KLO / VLO);
 *        KVS_ERR_UNSUPPORTED on a device without it; KVS_ERR_DTYPE / KVS_ERR_SHAPE for a plane of
 *        another type or shape)
 *   out: [n_q][n_heads][d_v] F32 (must not alias q, k, v)
 *   query head g reads kv head g / (n_heads / n_kv_heads); n_heads % n_kv_heads must be 0
 *   (KVS_ERR_SHAPE otherwise).
 *   logit(i, g, j) = scale * q[i][g] . k[h][j] + mask[i][j], over the visible keys j of row i
 *   (with q_channels: scale * sum_c q[i][g][q_channels[h][c]] k[h][j][c]).
 * A query row with no visible key gets out = 0 (and row_sum = 0).
 * Running maxima start at -FLT_MAX, so fully masked tiles stay finite; no fast-math.
 * Extra errors: KVS_ERR_SHAPE for any statistic tensor of the wrong shape, and for k's head_dim
 * differing from q's (d_k; with q_channels: exceeding q's) or out's from v's (d_v), the message naming
 * the pair; KVS_ERR_OUT_OF_RANGE for a q_channels entry outside [0, d_q);
 * KVS_ERR_OUT_OF_RANGE for n_kv > capacity. */
KVS_API kvs_status kvs_attention(kvs_device *dev, const kvs_tensor *q, const kvs_tensor *k,
                                 const kvs_tensor *v, kvs_tensor *out,
                                 const kvs_attention_params *p);

/* ---------------------------------------------------------------------------------------------- */
/* Discrete wavelet transform along the token axis                                                */

typedef enum kvs_wavelet {
    KVS_WAVELET_HAAR = 0, /* 2 taps (= db1) */
    KVS_WAVELET_DB2 = 1,  /* Daubechies, 2 vanishing moments, 4 taps */
    KVS_WAVELET_DB4 = 2   /* Daubechies, 4 vanishing moments, 8 taps */
} kvs_wavelet;

#define KVS_DWT_MAX_LEVELS 24

/* "haar", "db2", "db4"; parse accepts the same names (KVS_ERR_INVALID_ARGUMENT otherwise). */
KVS_API const char *kvs_wavelet_name(kvs_wavelet w);
KVS_API kvs_status kvs_wavelet_from_name(const char *name, kvs_wavelet *out);

/* Orthonormal analysis low-pass filter of a family (Daubechies 1992, table 6.1; taps sum to
 * sqrt(2), squares sum to 1). Returns the tap count (2, 4, 8; 0 for an unknown family) and writes
 * the taps into lo[0..L-1] (lo may be NULL). High-pass: hi[t] = (-1)^t lo[L-1-t]. */
KVS_API int kvs_wavelet_filter(kvs_wavelet w, double *lo);

/* Length of level l (1..levels) signals: len_0 = n, len_l = ceil(len_{l-1} / 2). */
KVS_API int64_t kvs_dwt_level_length(int64_t n, int level);

/* Total coefficient count of a `levels`-level transform of n samples:
 * len_levels + sum_{l=1..levels} len_l. Returns -1 for n < 1 or levels outside 1..KVS_DWT_MAX_LEVELS. */
KVS_API int64_t kvs_dwt_length(int64_t n, int levels);

/* Multi-level DWT (Mallat 1989) with periodization boundary handling, per row:
 *   at each level the current signal c of length L (odd L is first extended to L+1 by repeating
 *   its last sample) gives a[i] = sum_t lo[t] c[(2i+t) mod L'], d[i] = sum_t hi[t] c[(2i+t) mod L'],
 *   i < L'/2, L' the (even) extended length; a feeds the next level.
 * Output row layout (as pywt.wavedec): [a_J | d_J | d_{J-1} | ... | d_1], lengths len_J, len_J,
 * len_{J-1} ... len_1 (J = levels).
 * x: [rows][n] F32; y: [rows][kvs_dwt_length(n, J)] F32. Accumulation in f32.
 * The transform is orthogonal for even lengths, so kvs_idwt reconstructs x exactly (to rounding). */
KVS_API kvs_status kvs_dwt(kvs_device *dev, const kvs_tensor *x, kvs_tensor *y, kvs_wavelet w,
                           int levels);

/* Inverse of kvs_dwt: y: [rows][kvs_dwt_length(n, J)] F32 -> x: [rows][n] F32 (n = x->ne[0]);
 * at each level the exact transpose of the analysis step: c[m] = sum_{i,t : (2i+t) mod L' = m}
 * (a[i] lo[t] + d[i] hi[t]) (every wrap counted when the filter is longer than L'), truncated to L.
 * Passing zeroed detail coefficients gives the multi-resolution approximation (WaveFilter skim). */
KVS_API kvs_status kvs_idwt(kvs_device *dev, const kvs_tensor *y, kvs_tensor *x, kvs_wavelet w,
                            int levels);

/* ---------------------------------------------------------------------------------------------- */
/* Top-k selection                                                                                */

typedef struct kvs_topk_params {
    int64_t k;                 /* entries to select, 1 <= k <= n (KVS_ERR_OUT_OF_RANGE otherwise) */
    int order_by_index;        /* 0 (default): output sorted by score, descending;
                                * 1: the same selection, output sorted by index, ascending */
    const kvs_tensor *row_len; /* per-row top-k only: I32 [rows] valid entries per row (entries at
                                * j >= row_len[r] are never selected; if a row has fewer than k
                                * valid entries the tail is idx -1, value -INFINITY). NULL: n */
} kvs_topk_params;

KVS_API kvs_topk_params kvs_topk_params_default(void);

/* Per-row top-k: for each row r of x ([rows][n] F32) select the k largest entries.
 * Order: larger score first; equal scores: lower index first; NaN ranks below every number
 * (including -INFINITY). idx: [rows][k] I32 column indices; val: [rows][k] F32 or NULL.
 * Deterministic: every backend returns identical idx for identical x.
 * Extra errors: KVS_ERR_OUT_OF_RANGE for k outside [1, n] or n > 2^31-1; KVS_ERR_SHAPE for
 * idx/val/row_len of the wrong size; KVS_ERR_INVALID_ARGUMENT when idx or val aliases x or each other.
 * Method: threshold selection as in sample-select (Sanders & Winkel 2004) and GPU radix select
 * (Alabi et al. 2012, "Fast k-selection algorithms for graphics processing units"): a threshold from
 * a sample or from key-digit histograms, one pass collecting the candidates, then an exact select and
 * sort over those few; each backend's top-k source file describes its variant. */
KVS_API kvs_status kvs_topk(kvs_device *dev, const kvs_tensor *x, kvs_tensor *idx, kvs_tensor *val,
                            const kvs_topk_params *p);

/* Global top-k over all elements of x (any shape, flattened in memory order, n = nelements up to
 * 2^31-1): idx: [k] I32 flat indices, val: [k] F32 or NULL. Same ordering and tie rules as
 * kvs_topk; p->row_len must be NULL. Used for one budget across layers and heads.
 * Errors as kvs_topk, and KVS_ERR_INVALID_ARGUMENT for a row_len. Method as kvs_topk, the collecting
 * pass split over the whole tensor. */
KVS_API kvs_status kvs_topk_global(kvs_device *dev, const kvs_tensor *x, kvs_tensor *idx,
                                   kvs_tensor *val, const kvs_topk_params *p);

/* ---------------------------------------------------------------------------------------------- */
/* Top-p over attention mass: the sorted prefix-sum threshold                                     */

typedef struct kvs_topp_params {
    double p;                  /* share of the row's mass to cover, (0, 1] (KVS_ERR_OUT_OF_RANGE
                                * otherwise); default 0.9 */
    const kvs_tensor *row_len; /* I32 [rows] valid entries per row (entries at j >= row_len[r] have
                                * no mass); NULL: n. As kvs_topk_params.row_len */
} kvs_topp_params;

KVS_API kvs_topp_params kvs_topp_params_default(void);

/* Per-row top-p over mass (the progressive, mass-covering selection of PSA-style sparse attention
 * and of nucleus sampling, Holtzman et al. 2020 sec. 3.1, applied to attention mass): for each row
 * r of x ([rows][n] F32), the mass of entry j is m_j = x_j when x_j is finite and > 0, else 0
 * (negative, zero, NaN and infinite scores carry no mass; j >= row_len[r] neither); T = sum_j m_j.
 * Ranked as kvs_topk ranks (larger first, equal values lower index first), count[r] is the
 * smallest k such that the k highest masses sum to at least p * T: the fewest entries whose mass
 * reaches the share p. thr[r] is the value of the count[r]-th ranked entry, so the keep-set is
 * every entry with x > thr plus the lowest-index (count - #{x > thr}) entries equal to thr, which is
 * also kvs_topk with k = count. A row without mass (T = 0, row_len 0) gives count 0, thr +INFINITY.
 * p = 1 gives the number of entries with positive mass (exactly). count: [rows] I32; thr: [rows]
 * F32 or NULL.
 * Precision: the CPU backend sums in float64 over the sorted masses; OpenCL and Vulkan sum in f32
 * in a fixed order, so where the float64 prefix sum lies within about 1e-5 * T of p * T a count
 * may differ by one from the CPU's; thr is always the value of the count-th ranked entry.
 * Errors: KVS_ERR_DTYPE (x not F32, count or row_len not I32, thr not F32), KVS_ERR_SHAPE
 * (count, thr or row_len not [rows]), KVS_ERR_OUT_OF_RANGE (p outside (0, 1], n > 2^31-1),
 * KVS_ERR_INVALID_ARGUMENT (NULL x/count/p, tensors of another device, outputs aliasing x or each
 * other). Method: CPU sorts the positive masses and scans the prefix sums; OpenCL and Vulkan run one
 * work-group per row: a bisection over the bits of the threshold value (31 masked sums M(t) =
 * sum of m_j with m_j >= t, keeping the largest t with M(t) >= p T), then the ties at t.
 * Source: PSA, Progressive Sparse Attention (Zhou et al. 2025, arXiv 2503.00392): KV blocks are
 * selected in order of their attention weight until the accumulated weight reaches a threshold,
 * instead of a fixed top-k budget (no public code: this op is the selection rule alone). */
KVS_API kvs_status kvs_topp(kvs_device *dev, const kvs_tensor *x, kvs_tensor *count, kvs_tensor *thr,
                            const kvs_topp_params *p);

/* ---------------------------------------------------------------------------------------------- */
/* Gather / scatter / compact of cache rows                                                       */

/* In these three ops a tensor is seen as G groups of rows: t: [G][N][row] (ne = {row, N, G}, or
 * ne = {row, N} with G = 1); typically one KV-cache layer [n_kv_heads][capacity][head_dim]. Rows are
 * copied bit-exactly, any dtype (F32, F16, BF16, I32, and the block types, whose rows are whole
 * blocks: a quantized cache row moves with its scales). idx is I32, either [G][n] (one index
 * list per group, e.g. per kv head after head-wise eviction) or [n] (shared by all groups). */

/* dst[g][i] = src[g][idx[g][i]] for i < n. src: [G][Ns][row], dst: [G][Nd][row], n <= Nd.
 * Rows i >= n of dst are untouched. dst must not alias src. */
KVS_API kvs_status kvs_gather(kvs_device *dev, const kvs_tensor *src, const kvs_tensor *idx,
                              kvs_tensor *dst);

/* dst[g][idx[g][i]] = src[g][i] for i < n (writing new tokens' K/V into cache slots).
 * src: [G][n][row], or with src_token_major = 1 [n][G][row] (the layout of a k/v projection,
 * [n_tokens][n_kv_heads][head_dim]); dst: [G][Nd][row]. Duplicate indices within a group: the
 * highest i wins. dst must not alias src. src and dst have the same dtype (bit-exact copy), or src
 * is F32 and dst F16/BF16 (round-to-nearest-even) or Q8_0/Q4_0/Q4_1/IQ4_NL (each row quantized per
 * block of 32, core/quant/quant_encode.c: the quantized KV cache's append); other pairs:
 * KVS_ERR_DTYPE. OpenCL converts on the device (shaders/opencl/rows.cl, the same encoders), and so
 * does Vulkan (shaders/vulkan/scatter_cvt.comp, the same scale rules). */
KVS_API kvs_status kvs_scatter(kvs_device *dev, const kvs_tensor *src, const kvs_tensor *idx,
                               kvs_tensor *dst, int src_token_major);

/* In-place compaction (eviction): t[g][i] = old t[g][idx[g][i]] for every i < n with
 * idx[g][i] >= i (a keep-set in increasing order, as kvs_topk with order_by_index gives, satisfies
 * this for all i); rows i with idx[g][i] < i (padding) and rows >= n get unspecified contents.
 * Backends may use scratch memory or copy in increasing i. */
KVS_API kvs_status kvs_compact(kvs_device *dev, kvs_tensor *t, const kvs_tensor *idx);

#ifdef __cplusplus
}
#endif
#endif
