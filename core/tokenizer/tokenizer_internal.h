/* Internals of kvs_tokenizer shared by tokenizer.c (construction, accessors, decode) and
 * tokenizer_encode.c (the SentencePiece, byte-level BPE and WordPiece encoders). Not installed. */
#ifndef KVS_TOKENIZER_INTERNAL_H
#define KVS_TOKENIZER_INTERNAL_H

#include <stdint.h>

#include "internal.h"
#include "kvsieve/tokenizer.h"
#include "format/format.h"

#define SPACE_ESC "\xe2\x96\x81"   /* U+2581 LOWER ONE EIGHTH BLOCK */
#define UNK_PIECE "\xe2\x96\x85"   /* U+2585, llama.cpp's rendering of the unknown token */

struct kvs_tokenizer {
    int32_t n;
    char **text;        /* [n] NUL-terminated raw token texts */
    uint32_t *len;      /* [n] */
    float *score;       /* [n] */
    uint8_t *type;      /* [n] kvs_token_type */
    uint32_t max_len;
    kvs_strhash idx;
    int32_t byte_tok[256];
    int32_t bos, eos, unk, mask;
    int add_bos, add_eos, add_space_prefix;
    int32_t *special;   /* user-defined, control, unknown token ids, longest text first */
    int32_t n_special;
    /* byte-level BPE (GPT-2) / WordPiece (BERT) */
    int bpe, wpm;
    char **merge_text;  /* [n_merges] "left right" */
    int32_t n_merges;
    kvs_strhash merges; /* "left right" -> rank */
    uint16_t byte_cp[256];   /* GPT-2 bytes_to_unicode(): byte -> code point (< 512) */
    int16_t cp_byte[512];    /* inverse; -1 where none */
};

/* Decodes one UTF-8 code point at s[0..n) into *cp; returns the bytes used (1 with *cp = UINT32_MAX
 * for an invalid or truncated sequence). */
static inline size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    size_t l = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (l == 0 || l > n) {
        *cp = UINT32_MAX;
        return 1;
    }
    uint32_t v = l == 1 ? c : l == 2 ? (c & 0x1F) : l == 3 ? (c & 0x0F) : (c & 0x07);
    for (size_t i = 1; i < l; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = UINT32_MAX;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    *cp = v;
    return l;
}

/* A fragment of the text being encoded: raw bytes [off, off + n) or one special token. */
typedef struct {
    size_t off, n;    /* raw text range, or */
    int32_t id;       /* >= 0: a special token */
} fragment;

typedef struct {
    fragment *v;
    size_t n, cap;
} fvec;

/* Inserts x at index at of f. Returns 0, or -1 out of memory (tokenizer.c). */
int kvs_tok_fv_insert(fvec *f, size_t at, fragment x);

/* Splits the raw fragments of f at occurrences of special-token texts (llama.cpp
 * tokenizer_st_partition; tokenizer.c). Returns 0, or -1 out of memory. */
int kvs_tok_partition(const kvs_tokenizer *t, const char *text, fvec *f, unsigned flags);

#endif
