/* kvsieve — the KV cache: per-layer K and V on a device, token positions, per-head lengths.
 *
 * Layout per layer l (all on the cache's device):
 *   k[l], v[l]: [n_kv_heads][capacity][head_dim], keys stored after RoPE; element types chosen
 *               separately for K (type_k) and V (type_v): F32, F16, BF16, or one of the GGUF block
 *               types Q8_0, Q4_0, Q4_1, IQ4_NL (blocks of 32 values along head_dim, each row
 *               head_dim/32 whole blocks; layouts: core/quant/quant_blocks.h). New rows are
 *               converted (f16/bf16: round-to-nearest-even) or quantized (per block of 32, the
 *               scale rules of llama.cpp's reference quantizers) when written; the attention op
 *               reads the stored rows directly (CPU backend). Source: llama.cpp's --cache-type-k /
 *               --cache-type-v, and per-block quantization of K and V as in KIVI (Liu et al. 2024;
 *               KIVI groups K per channel, here both are grouped along head_dim as llama.cpp does).
 *               Or KVS_QH8, QuantSpec's hierarchical 4/8-bit type (Tiwari et al. 2025; format:
 *               core/quant/quant_blocks.h): k[l] (v[l]) is then the upper-nibble plane, a Q4_1
 *               tensor that is a valid 4-bit cache by itself (what a draft pass reads), and
 *               k_lo[l] (v_lo[l]) the lower-nibble plane (QH8_LO, same row indexing), which the
 *               attention op adds for the 8-bit values (kvs_attention_params.k_lo / v_lo). Both
 *               planes are coded when written by the backend's converting scatter (on the device
 *               for OpenCL and Vulkan, bit-identical to kvs_qh8_encode_row); on every built-in
 *               backend (kvs_caps.kv_hierarchical: CPU, OpenCL, Vulkan).
 *   pos[l]:     [n_kv_heads][capacity] I32, the original token position held by each row (kept
 *               through eviction/compaction; -1 for an empty row); mirrored on the host. It is the
 *               position the causal mask and the eviction policies read.
 *   rope pos:   host only, [n_kv_heads][capacity] I32, the RoPE position each row's key is rotated
 *               at: the token position unless the forward assigned positions within the cache
 *               (kvs_step_plan.rope_in_cache) or kvs_cache_rerotate renumbered the rows
 *   len[l]:     [n_kv_heads] I32, rows in use per kv head (ragged after head-wise eviction)
 *   x[l]:       optional [capacity][dim] F32, the layer's input hidden state per row
 *               (KVS_CACHE_KEEP_X; Elastic-Cache recomputes deeper layers from it)
 *   delta[l]:   optional [capacity][dim] F32, the residual delta (attention + FFN output) the layer
 *               last added to each row (KVS_CACHE_KEEP_DELTA; SPA-Cache's skipped rows reuse it)
 * Two slot disciplines (kvs_cache_mode):
 *   KVS_CACHE_POSITIONAL: row r holds token position r for every head (diffusion LMs: the whole
 *     sequence is cached and rows are refreshed in place; eviction is not used);
 *   KVS_CACHE_APPEND: new tokens are appended at row len[l][h] of each head (autoregressive decoding;
 *     eviction compacts rows and keeps their positions).
 * Ownership: the caller owns the cache; it must be destroyed before its device.
 * Thread-safety: as its device (one thread at a time).
 */
#ifndef KVSIEVE_CACHE_H
#define KVSIEVE_CACHE_H

#include <stdint.h>

#include "kvsieve/device.h"
#include "kvsieve/export.h"
#include "kvsieve/ops.h"
#include "kvsieve/status.h"
#include "kvsieve/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_cache_mode {
    KVS_CACHE_POSITIONAL = 0,
    KVS_CACHE_APPEND = 1
} kvs_cache_mode;

#define KVS_CACHE_KEEP_X 1u /* also keep each layer's input hidden state per row */
/* Store keys rotated by R (kvs_cache_rotate_rows: an orthonormal block Walsh-Hadamard transform
 * along head_dim, fixed, its own inverse); the model's forward applies the same R to the queries
 * before attention, so q.k and every attention output and statistic are unchanged in exact
 * arithmetic, while a key channel with outliers is spread over its block before quantization
 * (QuaRot, Ashkboos et al. 2024; QuantSpec / KVQuant use such rotations for K). kvs_cache_read_f32
 * returns the keys un-rotated. Needs an even head_dim. Default off. */
#define KVS_CACHE_ROTATE 2u
/* Also keep, per layer and row, the residual delta the layer last added to the row's hidden state
 * (attention output + FFN output, x_out - x_in; [capacity][dim] F32 per layer, kvs_cache_layer_delta):
 * SPA-Cache's residual cache (Sun et al. 2026, reference wenhao728/spa-cache spac/cache.py
 * SpaCache.get_ff_output, cache "ff_output"): a row a layer does not select gets x_in + its stored
 * delta (kvs_layer_plan.spa_delta). Needs dim. */
#define KVS_CACHE_KEEP_DELTA 4u

typedef struct kvs_cache_params {
    int n_layers;       /* required, >= 1 */
    int n_kv_heads;     /* required, >= 1 */
    int head_dim;       /* required, >= 1 */
    int dim;            /* model width; required with KVS_CACHE_KEEP_X or KVS_CACHE_KEEP_DELTA */
    int64_t capacity;   /* rows per kv head per layer; required, >= 1 */
    kvs_dtype type_k;   /* K element type: KVS_F32 (default), KVS_F16, KVS_BF16, KVS_Q8_0,
                         * KVS_Q4_0, KVS_Q4_1, KVS_IQ4_NL or KVS_QH8; the block types and qh8 need
                         * head_dim % 32 == 0 */
    kvs_dtype type_v;   /* V element type: the same choices, independent of type_k; default KVS_F32 */
    kvs_cache_mode mode;/* default KVS_CACHE_POSITIONAL */
    unsigned flags;     /* KVS_CACHE_KEEP_X | KVS_CACHE_ROTATE | KVS_CACHE_KEEP_DELTA; default 0 */
} kvs_cache_params;

KVS_API kvs_cache_params kvs_cache_params_default(void);

typedef struct kvs_kv_cache kvs_kv_cache;

/* Creates an empty cache (every len 0, every pos -1) on dev.
 * Errors: KVS_ERR_INVALID_ARGUMENT (a required field < 1, unknown mode/flags, KVS_CACHE_ROTATE with
 * an odd head_dim), KVS_ERR_DTYPE
 * (type_k/type_v not one of the eight cache types; a block type or qh8 with head_dim % 32 != 0, the
 * message names the type and head_dim), KVS_ERR_UNSUPPORTED (F16 on a device without fp16 storage;
 * QH8 on a device without kvs_caps.kv_hierarchical (every built-in backend has it), the message says why;
 * a type other than F32 on a backend whose scatter cannot convert rows to it (none of the built-in
 * ones: CPU, OpenCL and Vulkan all convert; the message would give the backend's reason); refused
 * here, never mid-decode),
 * KVS_ERR_OUT_OF_MEMORY (message gives the bytes asked for; a request above this machine's physical
 * memory is refused before anything is allocated). */
KVS_API kvs_status kvs_cache_create(kvs_kv_cache **out, kvs_device *dev, const kvs_cache_params *p);
KVS_API void kvs_cache_destroy(kvs_kv_cache **c);

/* Empties every layer (len 0, pos -1); memory is kept. Errors: KVS_ERR_INVALID_ARGUMENT (NULL c),
 * KVS_ERR_BACKEND (uploading the emptied positions and lengths to the device). */
KVS_API kvs_status kvs_cache_reset(kvs_kv_cache *c);

KVS_API const kvs_cache_params *kvs_cache_get_params(const kvs_kv_cache *c);

/* Device tensors of layer l (borrowed; valid until the cache is destroyed, except kvs_cache_k's:
 * valid until the layer's key layout changes, kvs_cache_prune_keys / kvs_cache_unprune_keys or a write
 * that grows the tail; for a layer in ThinK's pruned layout it is the full-width tail, see there).
 * NULL for a bad layer or an extra the cache does not keep. */
KVS_API kvs_tensor *kvs_cache_k(kvs_kv_cache *c, int layer);
KVS_API kvs_tensor *kvs_cache_v(kvs_kv_cache *c, int layer);
KVS_API kvs_tensor *kvs_cache_pos_tensor(kvs_kv_cache *c, int layer);
KVS_API kvs_tensor *kvs_cache_len_tensor(kvs_kv_cache *c, int layer);
KVS_API kvs_tensor *kvs_cache_x(kvs_kv_cache *c, int layer);
/* [capacity][dim] F32: the residual delta per row (KVS_CACHE_KEEP_DELTA; row = token position) */
KVS_API kvs_tensor *kvs_cache_layer_delta(kvs_kv_cache *c, int layer);
/* The lower-nibble planes (QH8_LO [n_kv_heads][capacity][head_dim]) of a qh8 K / V; NULL when that
 * type is not qh8 (kvs_cache_k / kvs_cache_v then hold everything). */
KVS_API kvs_tensor *kvs_cache_k_lo(kvs_kv_cache *c, int layer);
KVS_API kvs_tensor *kvs_cache_v_lo(kvs_kv_cache *c, int layer);

/* Host mirrors: rows in use of (layer, head); positions [capacity] of (layer, head). -1 / NULL on
 * bad arguments. */
KVS_API int64_t kvs_cache_len(const kvs_kv_cache *c, int layer, int head);
KVS_API const int32_t *kvs_cache_positions(const kvs_kv_cache *c, int layer, int head);
/* Host mirror of the RoPE positions [capacity] of (layer, head): the position each row's key was
 * rotated at (-1 for an empty row). Equal to kvs_cache_positions unless the rows were written with
 * other RoPE positions (kvs_cache_write_rows_rope) or renumbered (kvs_cache_rerotate). NULL on bad
 * arguments. */
KVS_API const int32_t *kvs_cache_rope_positions(const kvs_kv_cache *c, int layer, int head);
/* max over heads of len (the n_kv an attention over this layer must cover). */
KVS_API int64_t kvs_cache_max_len(const kvs_kv_cache *c, int layer);

/* The position a token appended without an explicit position takes: 1 + the largest token position
 * the cache ever held (survives eviction; 0 when empty or reset). -1 for a NULL cache. */
KVS_API int64_t kvs_cache_next_pos(const kvs_kv_cache *c);

/* Writes n new K/V rows into layer `layer` (the model's forward does, once per layer and step):
 *   k, v:      [n][n_kv_heads][head_dim] F32 on the cache's device (token-major, as the K/V
 *              projections write them; keys after RoPE), converted to type_k / type_v (the block
 *              types: quantized per block of 32 values on append, quant_encode.c's rules);
 *   positions: host [n] token positions of the rows.
 * POSITIONAL: row i goes to cache row positions[i] of every head (overwriting what it held);
 * APPEND: rows go after each head's len, in order. The host mirrors (positions, lengths, the next
 * position) follow, and the device pos/len tensors are uploaded when they changed (a positional
 * cache refreshing rows in place keeps both). The device row indices are kept between calls and
 * re-uploaded only when they change.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, bad layer, n < 1, a position < 0), KVS_ERR_SHAPE (k/v
 * not F32 [n][n_kv_heads][head_dim]), KVS_ERR_OUT_OF_RANGE (a position >= capacity of a positional
 * cache; an append head without room for n rows), the scatter op's and upload errors. */
KVS_API kvs_status kvs_cache_write_rows(kvs_kv_cache *c, int layer, const kvs_tensor *k, const kvs_tensor *v,
                                        const int32_t *positions, int64_t n);

/* As kvs_cache_write_rows, recording rope_positions[i] (host [n], >= 0) as the RoPE position row i's
 * key was rotated at, when it differs from its token position (StreamingLLM-style positions within
 * the cache, kvs_step_plan.rope_in_cache); NULL: the token positions. Errors: as
 * kvs_cache_write_rows, and KVS_ERR_INVALID_ARGUMENT for a RoPE position < 0. */
KVS_API kvs_status kvs_cache_write_rows_rope(kvs_kv_cache *c, int layer, const kvs_tensor *k, const kvs_tensor *v,
                                             const int32_t *positions, const int32_t *rope_positions, int64_t n);

/* The cache types by name, as the CLI's --cache-type-k/-v take them: "f32", "f16", "bf16", "q8_0",
 * "q4_0", "q4_1", "iq4_nl", "qh8". Errors: KVS_ERR_INVALID_ARGUMENT (NULL, or another name: the
 * message lists the eight). */
KVS_API kvs_status kvs_cache_type_from_name(const char *name, kvs_dtype *out);

/* x[i] = R x[i] in place for n vectors of head_dim floats (host memory): R is the orthonormal
 * Walsh-Hadamard matrix of Sylvester's construction, scaled by 1/sqrt(b), applied to each block of
 * b consecutive values, b the largest power of two dividing head_dim, at most 32 (the quantized
 * cache's block: 8 for head_dim 8, 32 for 64/96/128). R is symmetric and R R = I, so it also undoes
 * itself. A head_dim of 1 or an odd one is left unchanged (b = 1). The rotation of KVS_CACHE_ROTATE. */
KVS_API void kvs_cache_rotate_rows(float *x, int64_t n, int head_dim);

/* Layer `layer`'s K (which = 0) or V (which = 1) as f32, every row of the capacity (rows never
 * written read 0): dst [n_kv_heads][capacity][head_dim] host memory. F16/BF16 rows are converted
 * exactly, block rows decoded with core/quant's reference decoders (the values attention uses).
 * KVS_CACHE_ROTATE caches return the keys un-rotated (R applied again, to f32 rounding).
 * For host-side scorers (key/value norms, learned policies). Errors: KVS_ERR_INVALID_ARGUMENT
 * (NULL, bad layer or which), KVS_ERR_OUT_OF_MEMORY, the download's errors. */
KVS_API kvs_status kvs_cache_read_f32(kvs_kv_cache *c, int layer, int which, float *dst);

/* Bytes of K/V (and x, when kept) for the rows in use, summed over layers and heads: the cache's
 * logical footprint (each row at its stored size: head_dim * 4 for F32, * 2 for F16/BF16 (a key in
 * ThinK's pruned segment: d_k' values, kvs_cache_prune_keys),
 * head_dim / 32 blocks of 34 (q8_0), 18 (q4_0, iq4_nl), 20 (q4_1) or 36 (qh8: 20 + 16) bytes); and the bytes
 * allocated (capacity; for a layer in ThinK's pruned layout its pruned key segment and full-width
 * tail instead of the full-width keys, kvs_cache_prune_keys). */
KVS_API int64_t kvs_cache_bytes_used(const kvs_kv_cache *c);
KVS_API int64_t kvs_cache_bytes_allocated(const kvs_kv_cache *c);

/* Bytes of one cache row (one token's key and value at one kv head of one layer, head_dim values
 * each) for keys of cache type type_k and values of cache type type_v (kvs_cache_params), as a step
 * reads them:
 *  - draft 0 (a plain step; the row as stored, the per-row size kvs_cache_bytes_used counts):
 *    head_dim x 4 bytes for f32, x 2 for f16 / bf16; head_dim / 32 blocks of 34 (q8_0), 18 (q4_0,
 *    iq4_nl), 20 (q4_1) or 36 (qh8: its 20-byte q4_1 upper plane + its 16-byte lower-nibble plane)
 *    bytes, per K and per V;
 *  - draft 1 (a QuantSpec draft step, kvs_step_plan.kv_draft): a qh8 K or V reads its upper plane
 *    alone (20 bytes per 32 values: the 4-bit view); the other types as stored.
 * Not counted: positions, kept layer inputs (KVS_CACHE_KEEP_X / KEEP_DELTA), ThinK's narrower pruned
 * keys (kvs_cache_bytes_used counts those of a cache). Source: the cache's storage (kvs_cache_create;
 * qh8: Tiwari et al. 2025, QuantSpec, format in core/quant/quant_blocks.h). Returns -1 and sets the
 * error: KVS_ERR_DTYPE (a type that is not a cache type, or a block type or qh8 with head_dim not a
 * multiple of 32), KVS_ERR_INVALID_ARGUMENT (head_dim < 1, draft not 0 or 1). */
KVS_API int64_t kvs_cache_row_bytes(kvs_dtype type_k, kvs_dtype type_v, int head_dim, int draft);

/* Rollback (speculative decoding: rows of rejected drafts): every kv head of every layer keeps its
 * first n_rows rows; rows beyond are emptied exactly as if never written (bytes zeroed in every
 * plane, positions -1, len = min(len, n_rows)), and the next position becomes 1 + the largest
 * position still held, so the cache is bit-identical to one that never saw the removed rows (when
 * those were appended after the kept ones). APPEND caches only. A layer in ThinK's pruned key
 * layout (kvs_cache_prune_keys) stays in it (no full-width copy of its keys is made) unless no
 * pruned row is left in any head.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, n_rows < 0), KVS_ERR_STATE (positional cache),
 * KVS_ERR_UNSUPPORTED (KVS_CACHE_KEEP_X caches), KVS_ERR_OUT_OF_MEMORY, upload errors. */
KVS_API kvs_status kvs_cache_truncate(kvs_kv_cache *c, int64_t n_rows);

/* Eviction: keeps, for every kv head h of `layer`, the rows keep[h][0..n_keep[h]) (strictly
 * increasing row indices < len), compacting them to rows 0..n_keep[h]-1 with their positions.
 * keep: host array [n_kv_heads][keep_stride] I32. APPEND caches only. A layer in ThinK's pruned
 * key layout stays in it (kvs_cache_prune_keys) unless no kept row is a pruned one.
 * Errors: KVS_ERR_STATE (positional cache), KVS_ERR_OUT_OF_RANGE (row >= len or not increasing). */
KVS_API kvs_status kvs_cache_keep(kvs_kv_cache *c, int layer, const int32_t *keep, const int64_t *n_keep,
                                  int64_t keep_stride);

/* Key re-rotation after eviction (StreamingLLM, Xiao et al. 2023, sec. 3.2: positions are assigned
 * within the cache, not the text; kvpress KeyRerotationPress): renumbers the RoPE positions of every
 * kv head h of `layer` to 0..len[h]-1 in row order and rotates each stored key in place by
 * delta = r - old RoPE position of row r (kvs_rope_shift, R(a)R(b) = R(a+b)), so that row r's key
 * equals RoPE(unrotated key, r) up to rounding. The token positions (kvs_cache_positions: the causal
 * mask, the policies) are left alone; values are not touched. p: the model's RoPE parameters (mode,
 * theta base, n_rot). A layer already numbered 0..len-1 runs nothing. *n_shifted (optional): rows
 * whose key was rotated (delta != 0).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL c or p, bad layer), KVS_ERR_STATE (positional cache), KVS_ERR_UNSUPPORTED
 * (keys of a block type or bf16, or a KVS_CACHE_ROTATE cache: only plain f32/f16 keys are shifted),
 * KVS_ERR_OUT_OF_MEMORY, and kvs_rope_shift's and the upload's errors. */
KVS_API kvs_status kvs_cache_rerotate(kvs_kv_cache *c, int layer, const kvs_rope_params *p, int64_t *n_shifted);

/* ThinK's pruned key storage (Xu et al. 2024, arXiv 2407.21018, sec. 3: the pruned channels are not
 * stored; core/policy/think.c chooses them). After kvs_cache_prune_keys a layer's keys live in two
 * tensors instead of the full-width [n_kv_heads][capacity][head_dim] one (which is freed):
 *  - the pruned segment kvs_cache_k_pruned(c, l) [n_kv_heads][capacity][d_k'] (type_k): per kv head h
 *    its rows [0, P[h]) hold only d_k' = head_dim - (pruned channels) key channels, channel t being
 *    key channel kvs_cache_pruned_channels(c, l)[h * d_k' + t] (ascending);
 *  - the tail, which kvs_cache_k(c, l) then returns: [n_kv_heads][T][head_dim] (type_k), T =
 *    kvs_cache_tail_capacity(c, l); its row j of head h is cache row P[h] + j (rows appended since;
 *    an append adds one row to every head, so all heads hold len - P of them).
 * Values stay full width in kvs_cache_v [n_kv_heads][capacity][head_dim], rows as before (row r of
 * head h is cache row r). T is capacity - max_h P[h] (the most rows an append can add before the cache
 * is full), or kvs_cache_set_tail_rows's count when smaller (the evictor sets its buffer: the rows
 * appended between two evictions); a write needing more rows grows the tail (at least doubled, at most
 * capacity - max P). kvs_cache_read_f32 returns the keys in the full-width layout (the pruned rows with
 * 0 in the channels they do not hold: exactly the keys with those channels zeroed in place).
 * kvs_cache_bytes_used counts a pruned row's key at d_k' values; kvs_cache_bytes_allocated counts, for a
 * pruned layer, the pruned segment and the tail instead of the full-width keys.
 *
 * kvs_cache_prune_keys: moves every row in use of layer l into the pruned segment, keeping the
 * channels c with pruned[h * head_dim + c] == 0 (pruned: host [n_kv_heads][head_dim], 1 = drop; the
 * same count per head), and makes an empty tail. Rows pruned before are expanded first (0 outside
 * their old channels; on the host, no full-width device tensor), so a channel kept now that they did
 * not hold reads 0. Afterwards P[h] = len[h]. A layer at full width has its full-width keys freed
 * before the segment is made (the device never holds both; restored on failure).
 * With every head empty it only records the channels (the layer stays full width).
 * kvs_cache_unprune_keys: back to the full-width key tensor (capacity rows; the pruned rows with 0
 * outside their channels, the tail's rows at P[h] + j); the segment and the tail are freed (P = 0);
 * kvs_cache_rerotate and kvs_cache_reset call it first (it holds both key layouts on the device for
 * the duration of the call). kvs_cache_keep keeps the layout (per head the kept rows below P[h]
 * compact in the pruned segment, the others in the tail; P[h] becomes the count of the former) and
 * kvs_cache_truncate too (the dropped rows leave the tail, and below P[h] the pruned segment, P[h]
 * becoming n_rows); both call it only for a layer left with no pruned row in any head. A layer
 * without the pruned layout runs nothing.
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL, bad layer, counts differing between heads, every channel
 * pruned), KVS_ERR_STATE (positional cache), KVS_ERR_UNSUPPORTED (keys other than plain f32 / f16:
 * block types, bf16, KVS_CACHE_ROTATE), KVS_ERR_OUT_OF_MEMORY, transfer errors. */
KVS_API kvs_status kvs_cache_prune_keys(kvs_kv_cache *c, int layer, const uint8_t *pruned);
KVS_API kvs_status kvs_cache_unprune_keys(kvs_kv_cache *c, int layer);
/* The tail capacity later prunings make: rows >= 1, or 0 (default) for capacity - max P. Errors:
 * KVS_ERR_INVALID_ARGUMENT (NULL cache, rows < 0). */
KVS_API kvs_status kvs_cache_set_tail_rows(kvs_kv_cache *c, int64_t rows);
/* d_k' of layer l's last pruning, 0 when the layer was never pruned (or bad arguments). */
KVS_API int kvs_cache_pruned_dim(const kvs_kv_cache *c, int layer);
/* P[h]: rows of (layer, head) in the pruned segment (0: not in the pruned layout); -1 on bad arguments. */
KVS_API int64_t kvs_cache_pruned_rows(const kvs_kv_cache *c, int layer, int head);
/* T: rows of layer l's tail (0: not in the pruned layout, or bad arguments). */
KVS_API int64_t kvs_cache_tail_capacity(const kvs_kv_cache *c, int layer);
/* The pruned layout's tensors (NULL when the layer is not in it; the channel list is that of the
 * last pruning, NULL when never pruned): the keys [n_kv_heads][capacity][d_k']; the host channel lists
 * [n_kv_heads][d_k']; P as I32 [n_kv_heads] on the device (an attention's kv_len over the segment);
 * the tail's positions [n_kv_heads][T] I32 (INT32_MAX beyond its rows) and its row counts
 * [n_kv_heads] I32 (len - P): a causal attention's k_pos and kv_len over the tail. */
KVS_API kvs_tensor *kvs_cache_k_pruned(kvs_kv_cache *c, int layer);
KVS_API const int32_t *kvs_cache_pruned_channels(const kvs_kv_cache *c, int layer);
KVS_API kvs_tensor *kvs_cache_pruned_len_tensor(kvs_kv_cache *c, int layer);
KVS_API kvs_tensor *kvs_cache_tail_pos_tensor(kvs_kv_cache *c, int layer);
KVS_API kvs_tensor *kvs_cache_tail_len_tensor(kvs_kv_cache *c, int layer);

/* Whether caches made with params p can be re-rotated (kvs_cache_rerotate): KVS_OK for plain F32/F16
 * keys; KVS_ERR_UNSUPPORTED with the reason for block-type or BF16 keys (a decode/re-quantize round
 * trip would add rounding error at every eviction) and for KVS_CACHE_ROTATE caches (Hadamard-rotated
 * keys no longer hold RoPE's pairs). Lets a caller refuse before decoding; KVS_ERR_INVALID_ARGUMENT
 * for NULL. */
KVS_API kvs_status kvs_cache_check_rerotate(const kvs_cache_params *p);

#ifdef __cplusplus
}
#endif
#endif
