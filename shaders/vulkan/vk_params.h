/* The interface between the Vulkan host code (backends/vulkan) and the shaders, defined once and
 * included by both: C (vk_internal.h) and GLSL (every .comp, through GL_GOOGLE_include_directive).
 * Holds every push-constant block, the attention flag bits, the dtype codes passed as
 * specialization constants, the values of each shader's MODE constant and the top-k sentinel.
 *
 * Push constants. Each block is a field list KVS_VK_PC_<NAME>(U, F, FA) where U(x) is a 32-bit
 * unsigned field x, F(x) a float and FA(x, n) a float[n]. GLSL writes it as the shader's
 * `layout(push_constant) uniform P { ... } p;` with KVS_VK_PUSH(KVS_VK_PC_<NAME>); C gets a struct
 * kvs_vk_pc_<name> with the same fields in the same order. Offsets match because push constants use
 * the std430 rules, under which a uint, a float and each element of a float array take 4 bytes at a
 * 4-byte boundary, exactly as C lays them out when the struct has no padding; the asserts below
 * check that (size = sum of the fields, 4-byte fields, at most KVS_VK_PC_MAX_BYTES) for every block.
 * Element offsets (o*) are in the binding's units (see kvs_vk_bind); sizes in elements. */
#ifndef KVS_VK_PARAMS_H
#define KVS_VK_PARAMS_H

/* GLSL compiled for Vulkan defines VULKAN (GL_KHR_vulkan_glsl); C compilers do not. */
#ifdef VULKAN
#define KVS_VK_GLSL 1
#else
#define KVS_VK_GLSL 0
#endif

/* Bytes of push constants every pipeline layout declares (the minimum every device supports). */
#define KVS_VK_PC_MAX_BYTES 128

/* ---- dtype codes (specialization constants DT, KVDT, SD, DD): the kvs_dtype values ---------- */
#define KVS_VK_DT_F32 0u
#define KVS_VK_DT_F16 1u
#define KVS_VK_DT_BF16 2u
#define KVS_VK_DT_I32 3u
#define KVS_VK_DT_Q8_0 4u
/* llama.cpp's other block types (layouts: quant.glsl, core/quant/quant_blocks.h); every code from
 * KVS_VK_DT_Q8_0 up is a block type */
#define KVS_VK_DT_Q4_0 5u
#define KVS_VK_DT_Q4_1 6u
#define KVS_VK_DT_Q5_0 7u
#define KVS_VK_DT_Q5_1 8u
#define KVS_VK_DT_IQ4_NL 9u
#define KVS_VK_DT_Q2_K 10u
#define KVS_VK_DT_Q3_K 11u
#define KVS_VK_DT_Q4_K 12u
#define KVS_VK_DT_Q5_K 13u
#define KVS_VK_DT_Q6_K 14u
#define KVS_VK_DT_IQ4_XS 15u
#define KVS_VK_IS_QUANT(dt) ((dt) >= KVS_VK_DT_Q8_0)
/* scatter_cvt's DD for QuantSpec's hierarchical qh8 cache (kvs_dtype KVS_QH8): f32 rows coded into a
 * q4_1-layout upper plane (binding 2) and a lower plane (binding 4); attention reads a qh8 side as
 * its Q4_1 upper plane plus the lower one (spec constants KLO / VLO), never through this code */
#define KVS_VK_DT_QH8 16u

/* ---- attention flags (attn, attn_stats, attn_combine push constant `flags`) ----------------- */
#define KVS_VK_ATTN_QPOS 1u     /* q_pos given (else query i sits at n_kv - n_q + i) */
#define KVS_VK_ATTN_KPOS 2u     /* k_pos given (else key j sits at j) */
#define KVS_VK_ATTN_KVLEN 4u    /* kv_len given: keys j >= kv_len[h] are invisible */
#define KVS_VK_ATTN_ROWLEN 8u   /* row_len given: keys j >= row_len[i] are invisible */
#define KVS_VK_ATTN_MASK 16u    /* additive mask [n_q][n_kv] given */
#define KVS_VK_ATTN_ARGMAX 32u  /* write argmax */
#define KVS_VK_ATTN_UNNORM 64u  /* write O unnormalised (split-K partials) */
#define KVS_VK_ATTN_CAUSAL 128u /* key visible iff kpos <= qpos */
#define KVS_VK_ATTN_ACCUM 256u  /* attn_stats key mass: add to the output instead of overwriting */
#define KVS_VK_ATTN_ROWS 512u   /* attn_stats: the row list (stat_rows / probe_rows) given */

/* ---- MODE specialization constant (constant_id 1 unless noted) of the multi-pass shaders ---- */
#define KVS_VK_ROPE_F32 0u        /* rope: f32 in place */
#define KVS_VK_ROPE_F16_ROTATE 1u /* rope: f16/bf16 phase 1, rotated values to f32 scratch */
#define KVS_VK_ROPE_F16_STORE 2u  /* rope: f16/bf16 phase 2, scratch back into x (per 32-bit word) */
#define KVS_VK_STATS_KEY_MASS 0u  /* attn_stats (constant_id 3): key mass */
#define KVS_VK_STATS_PROBS 1u     /* attn_stats (constant_id 3): probabilities of probe rows */
#define KVS_VK_ROWS_GATHER 0u     /* rows_copy: dst[g][i] = src[g][idx[g][i]] */
#define KVS_VK_ROWS_SCATTER 1u    /* rows_copy: dst rows from the scatter winners */
#define KVS_VK_SELECT_DIGIT 0u    /* topk_select: choose the next radix digit */
#define KVS_VK_SELECT_SCAN 1u     /* topk_select: per-chunk counts -> exclusive offsets */
#define KVS_VK_SELECT_INIT 2u     /* topk_select: initialise the row state */
#define KVS_VK_COLLECT_COUNT 0u   /* topk_collect: count gt / eq entries per chunk */
#define KVS_VK_COLLECT_WRITE 1u   /* topk_collect: write the selected entries */
#define KVS_VK_SORT_BLOCKS 0u     /* topk_sort: sort blocks of B in shared memory */
#define KVS_VK_SORT_MERGE 1u      /* topk_sort: finish strides < B of a stage in shared memory */
#define KVS_VK_SORT_GLOBAL 2u     /* topk_sort: one global compare-exchange step */

/* Index of an empty top-k slot in the selected-index scratch (written as idx -1, value -inf). */
#define KVS_VK_TOPK_EMPTY 0x7fffffffu

/* ---- push-constant blocks ------------------------------------------------------------------- */

/* add, swiglu: y = f(a, b) over n floats (swiglu: a = gate, b = up, y = out). */
#define KVS_VK_PC_BINARY(U, F, FA) U(n) U(oa) U(ob) U(oy)
/* copy between dtypes: n elements src -> dst. */
#define KVS_VK_PC_COPY(U, F, FA) U(n) U(os) U(od)
/* rmsnorm: x, y [rows][dim], w [dim]. */
#define KVS_VK_PC_RMSNORM(U, F, FA) U(rows) U(dim) U(ox) U(ow) U(oy) F(eps)
/* softmax of scale * x over rows of n. */
#define KVS_VK_PC_SOFTMAX(U, F, FA) U(rows) U(n) U(ox) U(oy) F(scale)
/* embedding: out [n][dim] = table[ids[i]] (vocab rows). */
#define KVS_VK_PC_EMBEDDING(U, F, FA) U(n) U(dim) U(vocab) U(ot) U(oi) U(oo)
/* matmul and matmul_vec: y [n][m] (+)= x [n][k] W^T, W [m][k]; groups_m: tiles along m (matmul). */
#define KVS_VK_PC_MATMUL(U, F, FA) U(m) U(k) U(n) U(ow) U(ox) U(oy) U(accumulate) U(groups_m)
/* rope: total invocations (see rope.comp), x/pos/freq/scratch offsets, nx = elements of x. */
#define KVS_VK_PC_ROPE(U, F, FA)                                                                    \
    U(total) U(head_dim) U(n_rot) U(pos_div) U(stride) U(n_rows) U(ox) U(op) U(of) U(os) U(nx)
/* attn: offsets of q, k, v, out, q_pos, k_pos, kv_len, row_len, mask, argmax, row_max, row_sum
 * (bindings 0..11), then sizes, KVS_VK_ATTN_* flags, scale and the key split, then the byte
 * offsets of a qh8 K's / V's lower planes (bindings 12, 13; read when spec constants KLO / VLO). */
#define KVS_VK_PC_ATTN(U, F, FA)                                                                    \
    U(oq) U(ok) U(ov) U(oo) U(oqp) U(okp) U(okl) U(orl) U(om) U(oam) U(orm) U(ors)                 \
    U(n_q) U(n_heads) U(G) U(cap) U(n_kv) U(flags) U(n_kvh) F(scale) U(nsplit) U(split_len)       \
    U(oklo) U(ovlo)
/* attn_combine: rows = n_q * n_heads, partial O/m/l/argmax offsets, final out/argmax/max/sum. */
#define KVS_VK_PC_ATTN_COMBINE(U, F, FA)                                                            \
    U(rows) U(D) U(nsplit) U(oop) U(omp) U(olp) U(oap) U(oo) U(oam) U(orm) U(ors) U(flags)
/* attn_lse: rows = n_q * n_heads, D = d_v, offsets of lse_extra, out, row_max, row_sum and the
 * normaliser lt it writes (bindings 0..4). */
#define KVS_VK_PC_ATTN_LSE(U, F, FA) U(rows) U(D) U(olse) U(oo) U(orm) U(ors) U(olt)
/* attn_stats: offsets of q, k, q_pos, k_pos, kv_len, row_len, mask, row list, output, row_max,
 * row_sum (bindings 0..10), then sizes, flags, n_rows (length of the row list) and scale, then the
 * byte offset of a qh8 K's lower plane (binding 11, read when spec constant KLO). */
#define KVS_VK_PC_ATTN_STATS(U, F, FA)                                                              \
    U(oq) U(ok) U(oqp) U(okp) U(okl) U(orl) U(om) U(orows) U(oout) U(orm) U(ors)                   \
    U(n_q) U(n_heads) U(G) U(cap) U(n_kv) U(flags) U(n_kvh) U(n_rows) F(scale) U(oklo)
/* dwt / idwt, one level over all rows: len L -> half. Bindings 0, 1, 2 at offsets o0/o1/o2 with
 * row strides s0/s1/s2: dwt reads c (0), writes approximation (1) and detail (2); idwt reads
 * approximation (0) and detail (1), writes c (2). T filter taps lo[]/hi[]. */
#define KVS_VK_PC_DWT(U, F, FA)                                                                     \
    U(rows) U(L) U(half_) U(o0) U(s0) U(o1) U(s1) U(o2) U(s2) U(T) FA(lo, 8) FA(hi, 8)
/* rows_copy: G groups, n indices, Ns source rows, Nd destination rows, RU units per row,
 * offsets of src, idx, dst, winners, shared_ (one index list for every group), total units. */
#define KVS_VK_PC_ROWS(U, F, FA)                                                                    \
    U(G) U(n) U(Ns) U(Nd) U(RU) U(os) U(oi) U(od) U(ow) U(shared_) U(total)
/* scatter_win: winners [G][Nd] = highest i with idx[g][i] = t. */
#define KVS_VK_PC_SCATTER_WIN(U, F, FA) U(G) U(n) U(Nd) U(oi) U(ow) U(shared_)
/* scatter_cvt: G groups, n source rows, Nd destination rows of D values (RB bytes), offsets of
 * src (f32 units), idx, dst (bytes), winners; shared_ (one index list), total invocations; odl:
 * byte offset of a qh8 destination's lower plane (binding 4, rows of D / 2 bytes). */
#define KVS_VK_PC_SCATTER_CVT(U, F, FA) U(G) U(n) U(Nd) U(D) U(RB) U(os) U(oi) U(od) U(ow) U(shared_) U(total) U(odl)
/* topk_select: state [rows][4], histograms/counts at oh, row_len at orl when has_rl. */
#define KVS_VK_PC_TOPK_SELECT(U, F, FA)                                                             \
    U(rows) U(nchunks) U(shift) U(ost) U(oh) U(n) U(k) U(orl) U(has_rl)
/* topk_hist: per (row, chunk) histogram of the digit at shift. */
#define KVS_VK_PC_TOPK_HIST(U, F, FA)                                                               \
    U(rows) U(n) U(ox) U(orl) U(has_rl) U(chunk) U(nchunks) U(shift) U(ost) U(oh)
/* topk_collect: counts at oc, selected keys / indices [rows][P_] at osk / osi. */
#define KVS_VK_PC_TOPK_COLLECT(U, F, FA)                                                            \
    U(rows) U(n) U(ox) U(orl) U(has_rl) U(chunk) U(nchunks) U(ost) U(oc) U(osk) U(osi) U(P_)
/* topk_sort: bitonic sort of [rows][P_], block B, stage s, stride j. */
#define KVS_VK_PC_TOPK_SORT(U, F, FA) U(rows) U(P_) U(B) U(s) U(j) U(osk) U(osi) U(by_index)
/* topk_write: idx (and val when has_val) [rows][k] from the sorted indices. */
#define KVS_VK_PC_TOPK_WRITE(U, F, FA) U(rows) U(n) U(k) U(P_) U(ox) U(osi) U(oi) U(ov) U(has_val)
/* topp: x at ox, row_len at orl when has_rl, count at oc, thr at ot when has_thr; p_one: p == 1. */
#define KVS_VK_PC_TOPP(U, F, FA) U(rows) U(n) U(ox) U(orl) U(has_rl) U(oc) U(ot) U(has_thr) U(p_one) F(p)

#if KVS_VK_GLSL
#define KVS_VK_GLSL_U(x) uint x;
#define KVS_VK_GLSL_F(x) float x;
#define KVS_VK_GLSL_FA(x, n) float x[n];
/* The shader's push-constant block `p` from a KVS_VK_PC_* list. */
#define KVS_VK_PUSH(LIST) layout(push_constant) uniform P { LIST(KVS_VK_GLSL_U, KVS_VK_GLSL_F, KVS_VK_GLSL_FA) } p;
#else
#include <stddef.h>
#include <stdint.h>

#define KVS_VK_C_U(x) uint32_t x;
#define KVS_VK_C_F(x) float x;
#define KVS_VK_C_FA(x, n) float x[n];
#define KVS_VK_SZ_U(x) +4
#define KVS_VK_SZ_F(x) +4
#define KVS_VK_SZ_FA(x, n) +4 * (n)
/* typedef struct kvs_vk_pc_NAME from a list, with its layout asserts. */
#define KVS_VK_PC_STRUCT(type, LIST)                                                                \
    typedef struct type {                                                                           \
        LIST(KVS_VK_C_U, KVS_VK_C_F, KVS_VK_C_FA)                                                   \
    } type;                                                                                         \
    _Static_assert(sizeof(type) == 0 LIST(KVS_VK_SZ_U, KVS_VK_SZ_F, KVS_VK_SZ_FA),                  \
                   #type " has padding: its layout would differ from the shader's (std430)");       \
    _Static_assert(sizeof(type) <= KVS_VK_PC_MAX_BYTES, #type " exceeds the push-constant bytes")

_Static_assert(sizeof(uint32_t) == 4 && _Alignof(uint32_t) == 4, "uint32_t is not a 4-byte std430 uint");
_Static_assert(sizeof(float) == 4 && _Alignof(float) == 4, "float is not a 4-byte std430 float");

KVS_VK_PC_STRUCT(kvs_vk_pc_binary, KVS_VK_PC_BINARY);
KVS_VK_PC_STRUCT(kvs_vk_pc_copy, KVS_VK_PC_COPY);
KVS_VK_PC_STRUCT(kvs_vk_pc_rmsnorm, KVS_VK_PC_RMSNORM);
KVS_VK_PC_STRUCT(kvs_vk_pc_softmax, KVS_VK_PC_SOFTMAX);
KVS_VK_PC_STRUCT(kvs_vk_pc_embedding, KVS_VK_PC_EMBEDDING);
KVS_VK_PC_STRUCT(kvs_vk_pc_matmul, KVS_VK_PC_MATMUL);
KVS_VK_PC_STRUCT(kvs_vk_pc_rope, KVS_VK_PC_ROPE);
KVS_VK_PC_STRUCT(kvs_vk_pc_attn, KVS_VK_PC_ATTN);
KVS_VK_PC_STRUCT(kvs_vk_pc_attn_combine, KVS_VK_PC_ATTN_COMBINE);
KVS_VK_PC_STRUCT(kvs_vk_pc_attn_stats, KVS_VK_PC_ATTN_STATS);
KVS_VK_PC_STRUCT(kvs_vk_pc_attn_lse, KVS_VK_PC_ATTN_LSE);
KVS_VK_PC_STRUCT(kvs_vk_pc_dwt, KVS_VK_PC_DWT);
KVS_VK_PC_STRUCT(kvs_vk_pc_rows, KVS_VK_PC_ROWS);
KVS_VK_PC_STRUCT(kvs_vk_pc_scatter_win, KVS_VK_PC_SCATTER_WIN);
KVS_VK_PC_STRUCT(kvs_vk_pc_scatter_cvt, KVS_VK_PC_SCATTER_CVT);
KVS_VK_PC_STRUCT(kvs_vk_pc_topk_select, KVS_VK_PC_TOPK_SELECT);
KVS_VK_PC_STRUCT(kvs_vk_pc_topk_hist, KVS_VK_PC_TOPK_HIST);
KVS_VK_PC_STRUCT(kvs_vk_pc_topk_collect, KVS_VK_PC_TOPK_COLLECT);
KVS_VK_PC_STRUCT(kvs_vk_pc_topk_sort, KVS_VK_PC_TOPK_SORT);
KVS_VK_PC_STRUCT(kvs_vk_pc_topk_write, KVS_VK_PC_TOPK_WRITE);
KVS_VK_PC_STRUCT(kvs_vk_pc_topp, KVS_VK_PC_TOPP);

/* Spot checks of offsets the shaders' std430 blocks give (worked out by hand). */
_Static_assert(offsetof(kvs_vk_pc_attn, scale) == 76, "attn: scale not at byte 76");
_Static_assert(offsetof(kvs_vk_pc_attn_stats, scale) == 76, "attn_stats: scale not at byte 76");
_Static_assert(offsetof(kvs_vk_pc_dwt, hi) == 72, "dwt: hi[] not at byte 72");
_Static_assert(sizeof(kvs_vk_pc_dwt) == 104, "dwt: block is not 104 bytes");
#endif

#endif
