/* kvsieve CLI — what every model-running command (generate, eval, eval --dlm, eval --dlm --tasks,
 * train) shares: the device options (-b/--backend, -t/--threads) and opening a model with its
 * tokenizer on that device. Each command keeps only its own options and its own run.
 *
 * Exit codes follow cli.h: CLI_EXIT_USAGE for a model that is not found, a file that cannot be
 * used (malformed, an unsupported architecture or tensor type, no tokenizer) or a device that does
 * not exist; CLI_EXIT_FAIL for a failure while loading (out of memory, a device error). Every
 * failure prints one line "PROG: ..." on stderr first. */
#ifndef KVS_TOOLS_OPTS_COMMON_H
#define KVS_TOOLS_OPTS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "kvsieve/cache.h"
#include "kvsieve/model.h"
#include "kvsieve/model_file.h"
#include "kvsieve/tokenizer.h"

/* The device options: spec "cpu", "opencl:1", "vulkan" (NULL = cpu), CPU threads (0 = all cores). */
typedef struct device_opts {
    const char *backend;
    int threads;
} device_opts;

/* The cli_opt rows of -b/--backend and -t/--threads, writing into the device_opts `d`
 * (DEVICE_BACKEND_OPT alone for a command with its own thread default, as train). */
#define DEVICE_BACKEND_OPT(d)                                                                                      \
    {"backend", 'b', CLI_STRING, &(d).backend, "B[:I]", "cpu | opencl | vulkan, optional device index (default cpu)"}
#define DEVICE_OPTS(d)                                                                                             \
    DEVICE_BACKEND_OPT(d), {"threads", 't', CLI_INT, &(d).threads, "N", "CPU backend threads (default: all cores)"}

/* The KV cache element types (--cache-type-k T --cache-type-v T, llama.cpp's names and choices; NULL
 * = f32): f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, qh8 (QuantSpec's hierarchical 4/8-bit type). The
 * block types and qh8 need head_dim % 32 == 0 and
 * the CPU backend (kvs_cache_create refuses them otherwise, before decoding). */
typedef struct cache_type_opts {
    const char *k, *v;
    int rotate; /* --kv-rotate: KVS_CACHE_ROTATE (keys and queries rotated per head; off by default) */
} cache_type_opts;
#define KV_ROTATE_OPT(c)                                                                                           \
    {"kv-rotate", 0, CLI_FLAG, &(c).rotate, NULL,                                                                  \
     "store keys rotated by a fixed orthonormal Hadamard transform per head (queries too: same scores; spreads "   \
     "outlier channels before quantization; default off)"}
#define CACHE_TYPE_OPTS(c)                                                                                         \
    {"cache-type-k", 0, CLI_STRING, &(c).k, "T",                                                                   \
     "K cache type: f32 (default), f16, bf16, q8_0, q4_0, q4_1, iq4_nl, qh8 (blocks of 32 along head_dim; qh8: "   \
     "hierarchical 4/8-bit, for --speculative)"},                                                                  \
    {"cache-type-v", 0, CLI_STRING, &(c).v, "T", "V cache type, the same choices (default f32)"}
/* Parses o into types[0] (K) and types[1] (V). CLI_EXIT_OK, or CLI_EXIT_USAGE after
 * "PROG: --cache-type-k: unknown cache type ..." for a name that is not one of the eight. */
int cli_cache_types(const char *prog, const cache_type_opts *o, kvs_dtype types[2]);
/* CLI_EXIT_OK when the model's head_dim takes the block types among types (a multiple of 32), else
 * CLI_EXIT_USAGE after "PROG: --cache-type-k q8_0 stores blocks of 32 values along head_dim; this
 * model's head_dim is 8 ...", or, when chosen_by names an option that picked the types itself (the
 * user gave no --cache-type), "PROG: CHOSEN_BY cache (blocks of 32 values ...); ...". */
int cli_cache_types_fit(const char *prog, const kvs_dtype types[2], const kvs_model_hparams *hp, const char *chosen_by);
/* kvs_cache_params_default() with the parsed types and --kv-rotate (KVS_CACHE_ROTATE): what the
 * library's key-layout checks take (kvs_cache_check_rerotate, kvs_think_check_cache) before a model's
 * cache exists. */
kvs_cache_params cli_cache_key_params(const cache_type_opts *o, const kvs_dtype types[2]);
/* --draft-weights T (kvs_model_set_draft_weights): *out = q8_0, q4_0, q4_1 or iq4_nl by name;
 * CLI_EXIT_OK, or CLI_EXIT_USAGE after "PROG: --draft-weights: ..." for any other name. */
int cli_draft_weight_type(const char *prog, const char *name, kvs_dtype *out);

/* An open model: its file, tokenizer, device and weights on it. Zero-initialise, then
 * cli_model_open (or its two halves); cli_model_close releases whatever is set. */
typedef struct cli_model {
    char path[4096];             /* the located file or directory */
    kvs_model_file *mf;
    kvs_tokenizer *tok;
    kvs_device *dev;
    kvs_model *m;
    const kvs_model_hparams *hp; /* of m, once created */
    double load_s;               /* wall seconds of cli_model_open: file open, tokenizer, weights to the device */
} cli_model;

/* First half: finds `name` (kvs_model_locate: a path, else $KVSIEVE_MODELS, models/, then
 * ../shared/models), opens the file and makes its tokenizer: cm->path, cm->mf, cm->tok.
 * CLI_EXIT_OK or CLI_EXIT_USAGE (not found; unreadable or malformed file; no tokenizer). */
int cli_model_open_file(const char *prog, const char *name, cli_model *cm);

/* Second half: opens the device of d and creates the model from cm->mf on it: cm->dev, cm->m,
 * cm->hp. CLI_EXIT_OK; cli_open_device's codes; CLI_EXIT_USAGE when the library cannot use the
 * file (KVS_ERR_FORMAT, _UNSUPPORTED, _DTYPE, _IO, _NOT_FOUND); CLI_EXIT_FAIL otherwise. */
int cli_model_create(const char *prog, const device_opts *d, cli_model *cm);

/* Both halves. */
int cli_model_open(const char *prog, const char *name, const device_opts *d, cli_model *cm);

/* CLI_EXIT_OK when cm's model is a masked-diffusion (llada) model, else CLI_EXIT_USAGE after
 * "PROG: NAME is not a masked-diffusion (llada) model". */
int cli_model_require_dlm(const char *prog, const char *name, const cli_model *cm);

/* Reads the text file `path` (given by --text) and tokenizes it with cm->tok, no BOS, into *ids
 * (malloc'ed) / *n. CLI_EXIT_OK; cli_read_file's codes; CLI_EXIT_FAIL when tokenizing fails. */
int cli_model_read_tokens(const char *prog, const cli_model *cm, const char *path, int32_t **ids, int64_t *n);

/* Releases the model, device, tokenizer and file (each may be unset); cm can be opened again. */
void cli_model_close(cli_model *cm);

#endif
