/* kvsieve — tokenizers: SentencePiece-style BPE (llama "SPM" vocabularies), GPT-2 byte-level BPE and
 * BERT WordPiece.
 *
 * Sources: llama.cpp's llm_tokenizer_spm (src/llama-vocab.cpp) and karpathy/llama2.c run.c encode /
 * decode. Encoding of a text:
 *   1. Split out user-defined tokens (token type 4; with KVS_TOKENIZE_PARSE_SPECIAL also control and
 *      unknown tokens) where their text occurs verbatim, longest first (llama.cpp
 *      tokenizer_st_partition).
 *   2. Each remaining text fragment that starts the input or follows a special token gets a dummy
 *      prefix space (when the vocabulary's add_space_prefix, default on); every ' ' becomes U+2581.
 *   3. The fragment is split into UTF-8 characters; adjacent pairs whose concatenation is a token
 *      are merged, highest token score first, the left-most pair first on equal scores, until no
 *      pair merges.
 *   4. A final piece that is not a token is emitted as its bytes' <0xNN> tokens (byte fallback).
 * This reproduces llama.cpp's ids on its test vectors (tests/test_tokenizer.c).
 * Decoding maps U+2581 back to ' ', byte tokens to their byte, control/unused tokens to "" and the
 * unknown token to U+2585 (as llama.cpp); the first piece of a decode (or one after BOS) loses one
 * leading space, undoing the dummy prefix (llama2.c).
 *
 * Sources of vocabularies: GGUF metadata (tokenizer.ggml.model = "llama": tokenizer.ggml.tokens,
 * .scores, .token_type, .bos/eos/unknown/padding/mask_token_id, .add_bos_token, .add_eos_token,
 * .add_space_prefix) or a llama2.c tokenizer file (tok512.bin: i32 max_token_length, then per token
 * f32 score, i32 length, bytes; spaces are stored as ' ' and converted to U+2581 on load; token 0 is
 * <unk>, 1 BOS, 2 EOS, "<0xNN>" tokens are byte tokens).
 * GPT-2 byte-level BPE (tokenizer.ggml.model = "gpt2" with tokenizer.ggml.pre "gpt-2" or absent;
 * openai/gpt-2 encoder.py, llama.cpp llm_tokenizer_bpe): text is split by the GPT-2 regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (Unicode 14 letter/number categories, White_Space), each piece's bytes are mapped to code points
 * (bytes_to_unicode) and merged by tokenizer.ggml.merges rank (lowest first, left-most on ties); no
 * dummy prefix, no BOS by default; decoding maps the code points back to bytes. Reproduces
 * llama.cpp's ggml-vocab-gpt-2 test vectors.
 * BERT WordPiece (tokenizer.ggml.model = "bert"; llama.cpp llm_tokenizer_wpm): each code point is
 * replaced by the first code point of its NFD decomposition (accents dropped) and lowercased;
 * White_Space separates words, control characters, NUL and invalid UTF-8 are dropped, punctuation,
 * ASCII symbols and CJK ideographs are words of their own; each word, prefixed with U+2581, is
 * matched greedily longest-token-first, a word with an unmatched rest becoming [UNK]. BOS/EOS are
 * [CLS]/[SEP] (tokenizer.ggml.cls_token_id / seperator_token_id), both added by default.
 * Reproduces llama.cpp's ggml-vocab-bert-bge test vectors. Unicode tables: Unicode 14
 * (core/tokenizer/tokenizer_unicode.c).
 * Other GGUF tokenizer models (rwkv, ...) and BPE pre-tokenizers other than "gpt-2" (llama-bpe,
 * qwen2, ...) are refused with KVS_ERR_UNSUPPORTED.
 *
 * Ownership: the tokenizer copies everything it needs; the source (GGUF, file) may be closed after
 * creation. Thread-safety: read-only after creation; concurrent encode/decode calls are safe.
 */
#ifndef KVSIEVE_TOKENIZER_H
#define KVSIEVE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "kvsieve/export.h"
#include "kvsieve/gguf.h"
#include "kvsieve/model_file.h"
#include "kvsieve/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvs_tokenizer kvs_tokenizer;

/* Token types (llama.cpp / GGUF tokenizer.ggml.token_type numbers). */
typedef enum kvs_token_type {
    KVS_TOKEN_UNDEFINED = 0,
    KVS_TOKEN_NORMAL = 1,
    KVS_TOKEN_UNKNOWN = 2,
    KVS_TOKEN_CONTROL = 3,
    KVS_TOKEN_USER_DEFINED = 4,
    KVS_TOKEN_UNUSED = 5,
    KVS_TOKEN_BYTE = 6
} kvs_token_type;

/* From GGUF metadata. Errors: KVS_ERR_UNSUPPORTED (tokenizer.ggml.model other than "llama", "gpt2"
 * or "bert", or a BPE pre-tokenizer other than "gpt-2"; the message names it), KVS_ERR_NOT_FOUND (tokenizer.ggml.tokens, or a BPE vocabulary's merges, missing), KVS_ERR_FORMAT (array
 * lengths differ, ids out of range, a token with a NUL byte), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_tokenizer_from_gguf(kvs_tokenizer **out, const kvs_gguf *g);

/* From a llama2.c tokenizer file with vocab_size tokens (0: read tokens until the end of the file).
 * Errors: KVS_ERR_IO, KVS_ERR_FORMAT (truncated: the message names the byte offset and the token
 * index; negative lengths), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_tokenizer_from_llama2c(kvs_tokenizer **out, const char *path, int vocab_size);

/* The tokenizer of a model file: GGUF metadata, or the llama2.c tokenizer found by
 * kvs_model_file_tokenizer_path. Errors: as the two functions above, KVS_ERR_NOT_FOUND, and
 * KVS_ERR_FORMAT when the tokenizer's vocabulary size differs from the model's. */
KVS_API kvs_status kvs_tokenizer_from_model_file(kvs_tokenizer **out, const kvs_model_file *mf);

/* Frees; sets *t = NULL. Accepts NULL and *t == NULL. */
KVS_API void kvs_tokenizer_destroy(kvs_tokenizer **t);

KVS_API int32_t kvs_tokenizer_n_vocab(const kvs_tokenizer *t);
KVS_API int32_t kvs_tokenizer_bos(const kvs_tokenizer *t);   /* -1 when none */
KVS_API int32_t kvs_tokenizer_eos(const kvs_tokenizer *t);   /* -1 when none */
KVS_API int32_t kvs_tokenizer_unk(const kvs_tokenizer *t);   /* -1 when none */
KVS_API int32_t kvs_tokenizer_mask(const kvs_tokenizer *t);  /* -1 when none (LLaDA mask token) */
/* The vocabulary's own flags (tokenizer.ggml.add_bos_token, default 1; add_eos_token, default 0). */
KVS_API int kvs_tokenizer_wants_bos(const kvs_tokenizer *t);
KVS_API int kvs_tokenizer_wants_eos(const kvs_tokenizer *t);

/* Raw token text (U+2581 for spaces; NUL-terminated) and its byte length; NULL if id out of range. */
KVS_API const char *kvs_tokenizer_token_text(const kvs_tokenizer *t, int32_t id, size_t *len);
KVS_API float kvs_tokenizer_token_score(const kvs_tokenizer *t, int32_t id);
KVS_API kvs_token_type kvs_tokenizer_token_type(const kvs_tokenizer *t, int32_t id);
/* Id of a token's exact raw text, or -1. */
KVS_API int32_t kvs_tokenizer_find(const kvs_tokenizer *t, const char *text, size_t len);

/* encode flags */
#define KVS_TOKENIZE_ADD_BOS 1u        /* prepend BOS (if the vocabulary has one) */
#define KVS_TOKENIZE_ADD_EOS 2u        /* append EOS (if the vocabulary has one) */
#define KVS_TOKENIZE_PARSE_SPECIAL 4u  /* also match control/unknown token texts ("<s>") in text */
/* An empty text still gets the dummy prefix: "" -> [U+2581] (the convention of
 * stories260K-llada-ref.json's "spm_encode"; llama.cpp and llama2.c give [] for ""). */
#define KVS_TOKENIZE_PREFIX_EMPTY 8u

/* Encodes len bytes of text (need not be NUL-terminated or valid UTF-8) into ids[0..cap).
 * *n_out = the number of ids the text encodes to, also when it exceeds cap (then
 * KVS_ERR_OUT_OF_RANGE is returned and ids holds the first cap). ids may be NULL with cap 0 to
 * query the count (returns KVS_ERR_OUT_OF_RANGE unless the count is 0).
 * Errors: KVS_ERR_INVALID_ARGUMENT (NULL), KVS_ERR_OUT_OF_RANGE, KVS_ERR_NOT_FOUND (a byte with no
 * <0xNN> token and no unknown token), KVS_ERR_OUT_OF_MEMORY. */
KVS_API kvs_status kvs_tokenizer_encode(const kvs_tokenizer *t, const char *text, size_t len,
                                        unsigned flags, int32_t *ids, int64_t cap, int64_t *n_out);

/* The text of one token as a stream decoder prints it (llama2.c decode()): the piece of `id`, with
 * one leading space removed when prev is BOS. Writes at most cap-1 bytes + NUL into buf; *len = the
 * piece length (bytes; a byte token yields 1 byte, possibly NUL). Errors: KVS_ERR_OUT_OF_RANGE (id
 * not in the vocabulary, or cap too small), KVS_ERR_INVALID_ARGUMENT. */
KVS_API kvs_status kvs_tokenizer_token_to_piece(const kvs_tokenizer *t, int32_t prev, int32_t id,
                                                char *buf, size_t cap, size_t *len);

/* Decodes n ids to text: concatenated pieces, the first piece (at the start or after BOS) without
 * its leading dummy-prefix space. Output NUL-terminated in buf; *len = bytes (excluding NUL);
 * when cap is too small, KVS_ERR_OUT_OF_RANGE with *len = the size needed.
 * Errors: KVS_ERR_OUT_OF_RANGE (id outside the vocabulary, or cap), KVS_ERR_INVALID_ARGUMENT. */
KVS_API kvs_status kvs_tokenizer_decode(const kvs_tokenizer *t, const int32_t *ids, int64_t n,
                                        char *buf, size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
