/* kvsieve — model files: one in-memory description of a llama-family model from any of three
 * encodings (GGUF, Hugging Face safetensors + config.json, llama2.c checkpoint).
 *
 * Canonical layout (what every loader produces, whatever the file):
 *   weights are host arrays, row-major [rows][cols] with cols (ne[0]) fastest, used as y = W x:
 *   token_embd  [vocab][dim]
 *   per layer:  attn_norm [dim]
 *               wq [n_heads*head_dim][dim], wk [n_kv_heads*head_dim][dim], wv [n_kv_heads*head_dim][dim]
 *               bq [n_heads*head_dim], bk, bv [n_kv_heads*head_dim]  (qkv_bias = 1: qwen2, dream; else
 *                                                                      data NULL)
 *               q_norm, k_norm [head_dim]  (qk_norm = 1: qwen3's per-head RMSNorm of q and k before
 *                                           RoPE; else data NULL)
 *               wo [dim][n_heads*head_dim]
 *               ffn_norm [dim]
 *               w_gate (llama2.c w1) [ffn_dim][dim], w_down (w2) [dim][ffn_dim], w_up (w3) [ffn_dim][dim]
 *   output_norm [dim]
 *   output      [vocab][dim]  (tied models: the same array as token_embd, `tied_output` = 1)
 * RoPE: llama/llada q/k rows are in the Meta/GGUF adjacent-pair layout (rope_mode = KVS_ROPE_ADJACENT):
 * Hugging Face safetensors store rotate-half rows (transformers' convert_llama_weights_to_hf.py
 * permute()); the loader un-permutes them, row (h, p*hd/2 + i) -> (h, 2i + p), so the three
 * encodings of one model load to bit-identical arrays. qwen2/qwen3/dream rows (GGUF or safetensors)
 * are kept as stored
 * (llama.cpp's converter does not permute them) and run with rope_mode = KVS_ROPE_NEOX (rotate-half
 * pairs (i, i + rope_dim/2)), as llama.cpp runs these architectures.
 * Dtypes: GGUF tensors keep their file dtype (F32, F16, BF16 or a block type of tensor.h) unless params.force_f32; other
 * formats are F32. kvs_weight_to_f32() converts any of them.
 *
 * Ownership: the kvs_model_file owns every array (pointers into its file mapping, or heap copies);
 * they are valid until kvs_model_file_close. Thread-safety: read-only after open.
 */
#ifndef KVSIEVE_MODEL_FILE_H
#define KVSIEVE_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "kvsieve/export.h"
#include "kvsieve/gguf.h"
#include "kvsieve/ops.h"
#include "kvsieve/status.h"
#include "kvsieve/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kvs_arch {
    KVS_ARCH_LLAMA = 0,   /* causal LM (general.architecture = llama; llama2.c and HF llama) */
    KVS_ARCH_LLADA = 1,   /* bidirectional masked-diffusion LM (general.architecture = llada) */
    KVS_ARCH_QWEN2 = 2,   /* causal LM, q/k/v biases, NEOX RoPE (Qwen2, Qwen2.5) */
    KVS_ARCH_QWEN3 = 3,   /* causal LM, per-head q/k RMSNorm, NEOX RoPE (Qwen3 dense) */
    KVS_ARCH_DREAM = 4    /* bidirectional masked-diffusion LM on Qwen2 blocks with shifted logits
                           * (Dream-7B, DiffuCoder; general.architecture = dream) */
} kvs_arch;

/* 1 for the masked-diffusion architectures (bidirectional attention, decoded by kvs_generate_dlm:
 * llada, dream), 0 for the causal ones (llama, qwen2, qwen3). */
KVS_API int kvs_arch_is_diffusion(kvs_arch a);

typedef enum kvs_model_format {
    KVS_MODEL_GGUF = 0,
    KVS_MODEL_SAFETENSORS = 1,   /* directory (or model.safetensors / config.json inside it) */
    KVS_MODEL_LLAMA2C = 2        /* llama2.c .bin checkpoint (legacy 7 x int32 header, or v1 "ak42") */
} kvs_model_format;

KVS_API const char *kvs_arch_name(kvs_arch a);            /* "llama", "llada", "qwen2", "qwen3", "dream" */
KVS_API const char *kvs_model_format_name(kvs_model_format f); /* "gguf", "safetensors", "llama2c" */

typedef struct kvs_model_hparams {
    kvs_arch arch;
    int n_layers;
    int dim;            /* embedding width */
    int n_heads;
    int n_kv_heads;     /* n_heads % n_kv_heads == 0 (checked) */
    int head_dim;       /* dim / n_heads unless the file says otherwise */
    int ffn_dim;        /* SwiGLU hidden width */
    int vocab;
    int ctx_len;        /* trained context length */
    float rms_eps;      /* RMSNorm epsilon; default 1e-5 (llama2.c's value) */
    float rope_base;    /* RoPE theta base; default 10000 */
    int rope_dim;       /* rotated dims per head; default head_dim */
    kvs_rope_mode rope_mode;  /* KVS_ROPE_ADJACENT (llama, llada) or KVS_ROPE_NEOX (qwen2, qwen3, dream) */
    int bos_id;         /* -1 when unknown; default 1 for llama2.c / HF without ids */
    int eos_id;         /* -1 when unknown */
    int mask_id;        /* LLaDA mask token (tokenizer.ggml.mask_token_id); -1 when none */
    int tied_output;    /* 1: output is token_embd */
    int qkv_bias;       /* 1: the q/k/v projections add biases bq/bk/bv (qwen2, dream) */
    int qk_norm;        /* 1: per-head RMSNorm of q and k (weights q_norm/k_norm [head_dim], eps
                         * rms_eps) between the projection and RoPE (qwen3) */
    int logit_shift;    /* 1: the logits of position i are read from row i-1 (Dream's shifted
                         * prediction; GGUF diffusion.shift_logits, default 1 for dream, 0 else) */
} kvs_model_hparams;

/* One host array. ne[0] = columns (fastest), ne[1] = rows (1 for vectors). */
typedef struct kvs_weight {
    kvs_dtype dtype;
    int64_t ne[2];
    const void *data;
    size_t nbytes;
} kvs_weight;

typedef struct kvs_layer_weights {
    kvs_weight attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_down, w_up;
    kvs_weight bq, bk, bv;     /* q/k/v biases (hparams.qkv_bias; data NULL otherwise) */
    kvs_weight q_norm, k_norm; /* per-head q/k RMSNorm weights (hparams.qk_norm; data NULL otherwise) */
} kvs_layer_weights;

typedef struct kvs_model_weights {
    kvs_weight token_embd;
    kvs_weight output_norm;
    kvs_weight output;
    int n_layers;
    const kvs_layer_weights *layers;   /* [n_layers] */
} kvs_model_weights;

typedef struct kvs_model_file_params {
    int force_f32;               /* 1: convert every weight to F32 (owned copies); default 0 */
    const char *tokenizer_path;  /* llama2.c / safetensors: tokenizer .bin; NULL = search (see
                                    kvs_model_file_tokenizer_path); ignored for GGUF */
} kvs_model_file_params;

KVS_API kvs_model_file_params kvs_model_file_params_default(void);

typedef struct kvs_model_file kvs_model_file;

/* Opens a model file of any supported encoding, detected from the content: GGUF magic; a directory
 * holding model.safetensors + config.json (or the path of either file); otherwise a llama2.c
 * checkpoint. p may be NULL (defaults).
 * Checks: architecture llama, llada, qwen2, qwen3 or dream (llada/dream: GGUF only; safetensors:
 * llama, qwen2, qwen3; others: KVS_ERR_UNSUPPORTED naming it), positive hparams,
 * n_heads % n_kv_heads == 0, every required tensor present (KVS_ERR_NOT_FOUND naming it) with the
 * canonical shape (KVS_ERR_SHAPE naming the tensor, expected and found), supported dtypes
 * (KVS_ERR_DTYPE naming the tensor and the ggml type number), file sizes (KVS_ERR_FORMAT with the
 * byte offset), and that the file describes what it holds (KVS_ERR_FORMAT, naming the file): RoPE
 * base finite and > 1, BOS/EOS/mask ids inside the vocabulary (the key named), no GGUF blk.N tensor
 * at or beyond {arch}.block_count, a llama2.c file ending where its weights end. GGUF hparams beyond
 * the llama set: {arch}.attention.key_length sets head_dim (value_length must equal it, else
 * KVS_ERR_UNSUPPORTED); RoPE scaling ({arch}.rope.scaling.type other than none/linear, or a scaling
 * factor other than 1 in {arch}.rope.scaling.factor / {arch}.rope.scale_linear: KVS_ERR_UNSUPPORTED
 * naming the type and factor: only unscaled RoPE is implemented); {arch}.attention.causal
 * contradicting the architecture (KVS_ERR_UNSUPPORTED); q/k/v biases all three or none
 * (KVS_ERR_NOT_FOUND naming the missing one); qwen3 needs attn_q_norm/attn_k_norm [head_dim]; a
 * tensor the architecture does not read (an attn_output bias, rope_freqs, ...) is KVS_ERR_UNSUPPORTED
 * naming it. Safetensors:
 * hidden_act silu, model_type llama/qwen2/qwen3 and architectures LlamaForCausalLM/Qwen2ForCausalLM/
 * Qwen3ForCausalLM when given and agreeing, rope_scaling / rope_parameters of rope_type default only,
 * use_sliding_window not true (each else KVS_ERR_UNSUPPORTED), lm_head.weight present unless
 * tie_word_embeddings is true (KVS_ERR_NOT_FOUND); Qwen2 q/k/v biases and Qwen3 q/k norms required. Only regular files are read
 * (KVS_ERR_IO for a directory). Errors also: KVS_ERR_INVALID_ARGUMENT, KVS_ERR_IO,
 * KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_model_file_open(kvs_model_file **out, const char *path,
                                       const kvs_model_file_params *p);

/* Frees everything; sets *m = NULL. Accepts NULL and *m == NULL. */
KVS_API void kvs_model_file_close(kvs_model_file **m);

KVS_API kvs_model_format kvs_model_file_format(const kvs_model_file *m);
KVS_API const kvs_model_hparams *kvs_model_file_hparams(const kvs_model_file *m);
KVS_API const kvs_model_weights *kvs_model_file_weights(const kvs_model_file *m);
/* The GGUF handle of a GGUF model (for extra metadata and the tokenizer); NULL for other formats. */
KVS_API const kvs_gguf *kvs_model_file_gguf(const kvs_model_file *m);
/* The path the model was opened from. */
KVS_API const char *kvs_model_file_path(const kvs_model_file *m);
/* Total bytes of all weight arrays (tied output counted once). */
KVS_API size_t kvs_model_file_weight_bytes(const kvs_model_file *m);

/* The llama2.c tokenizer for a non-GGUF model: params.tokenizer_path if given, else the first file
 * that exists of: DIR/tokenizer.bin, DIR/tok<vocab>.bin, DIR/../tok<vocab>.bin (DIR = the model's
 * directory). Writes it into buf (cap bytes). Errors: KVS_ERR_NOT_FOUND (names the paths tried),
 * KVS_ERR_OUT_OF_RANGE (buffer), KVS_ERR_INVALID_ARGUMENT (GGUF model: its tokenizer is inside). */
KVS_API kvs_status kvs_model_file_tokenizer_path(const kvs_model_file *m, char *buf, size_t cap);

/* Converts a weight to f32: dst holds ne[0]*ne[1] floats. Errors: KVS_ERR_DTYPE. */
KVS_API kvs_status kvs_weight_to_f32(const kvs_weight *w, float *dst);

/* Model lookup: resolves `name` to an existing path. In order: name itself if it exists (absolute,
 * or relative to the working directory); $KVSIEVE_MODELS/name; KVS_SOURCE_ROOT/models/name (the
 * small models bundled in the repository); KVS_SOURCE_ROOT/../shared/models/name (the full fixture
 * set next to the source tree, where CI has it). An absolute name is tried only as itself.
 * name = NULL or "" resolves the first models directory that exists (so, without $KVSIEVE_MODELS,
 * the repository's models/).
 * Errors: KVS_ERR_NOT_FOUND (message lists every path tried), KVS_ERR_OUT_OF_RANGE (cap too small),
 * KVS_ERR_INVALID_ARGUMENT. */
KVS_API kvs_status kvs_model_locate(const char *name, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
