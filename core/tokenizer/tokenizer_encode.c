/* The tokenizer's encoders: SentencePiece BPE (llama.cpp llm_tokenizer_spm), byte-level BPE
 * (GPT-2), WordPiece (llama.cpp llm_tokenizer_wpm) and kvs_tokenizer_encode (special-token
 * partitioning: tokenizer.c). See include/kvsieve/tokenizer.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer_internal.h"
#include "tokenizer/tokenizer_unicode.h"

/* ---- encode ---------------------------------------------------------------------------------- */

typedef struct {
    int32_t *v;
    int64_t n, cap;
} ivec;

static int iv_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 64;
        int32_t *v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

typedef struct {
    int left, right;
    float score;
    size_t size;
} bigram;

typedef struct {
    bigram *v;
    size_t n, cap;
} bheap;

/* a before b: higher score, then smaller left (llama.cpp llm_bigram_spm comparator). */
static int bg_before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static int bh_push(bheap *h, bigram x) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return -1;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_before(&x, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = x;
    return 0;
}

static bigram bh_pop(bheap *h) {
    bigram top = h->v[0];
    bigram x = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bg_before(&h->v[c + 1], &h->v[c])) c++;
        if (!bg_before(&h->v[c], &x)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = x;
    return top;
}

typedef struct {
    size_t start, n;
    int prev, next;
} symbol;

typedef struct {
    const kvs_tokenizer *t;
    const char *s;     /* escaped text */
    symbol *sym;
    bheap heap;
} session;

static int try_bigram(session *ss, int left, int right) {
    if (left < 0 || right < 0) return 0;
    const symbol *a = &ss->sym[left], *b = &ss->sym[right];
    size_t n = a->n + b->n;
    int64_t id = kvs_strhash_find_n(&ss->t->idx, ss->s + a->start, n);
    if (id < 0) return 0;
    bigram bg = {left, right, ss->t->score[id], n};
    return bh_push(&ss->heap, bg);
}

static size_t utf8_len(unsigned char c) {
    static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[c >> 4];
}

/* Tokenizes one escaped fragment s[0..n) into out. */
static kvs_status spm_fragment(const kvs_tokenizer *t, const char *s, size_t n, ivec *out) {
    if (n == 0) return KVS_OK;
    session ss = {t, s, NULL, {0}};
    ss.sym = malloc(n * sizeof *ss.sym);
    if (!ss.sym) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    int count = 0;
    for (size_t off = 0; off < n;) {
        size_t l = utf8_len((unsigned char)s[off]);
        if (l > n - off) l = n - off;
        /* invalid UTF-8: a lead byte without its continuation bytes is a symbol of its own, so the
         * bytes after it (the U+2581 of a space) keep their tokens and decode round-trips (found by
         * tests/fuzz/fuzz_tokenizer: "\xe1 " decoded to "\xe1\xe2\x96\x81") */
        for (size_t k = 1; k < l; k++)
            if (((unsigned char)s[off + k] & 0xC0) != 0x80) {
                l = k;
                break;
            }
        symbol *y = &ss.sym[count];
        y->start = off;
        y->n = l;
        y->prev = count - 1;
        off += l;
        y->next = off == n ? -1 : count + 1;
        count++;
    }
    kvs_status st = KVS_OK;
    for (int i = 1; i < count; i++)
        if (try_bigram(&ss, i - 1, i)) goto oom;
    while (ss.heap.n) {
        bigram bg = bh_pop(&ss.heap);
        symbol *l = &ss.sym[bg.left], *r = &ss.sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) ss.sym[r->next].prev = bg.left;
        if (try_bigram(&ss, l->prev, bg.left) || try_bigram(&ss, bg.left, l->next)) goto oom;
    }
    for (int i = 0; i != -1; i = ss.sym[i].next) {
        const symbol *y = &ss.sym[i];
        int64_t id = kvs_strhash_find_n(&t->idx, s + y->start, y->n);
        if (id >= 0) {
            if (iv_push(out, (int32_t)id)) goto oom;
            continue;
        }
        for (size_t k = 0; k < y->n; k++) {
            unsigned char c = (unsigned char)s[y->start + k];
            int32_t b = t->byte_tok[c] >= 0 ? t->byte_tok[c] : t->unk;
            if (b < 0) {
                st = kvs_error(KVS_ERR_NOT_FOUND, "tokenizer: byte 0x%02X has no <0x%02X> token "
                                                  "and there is no unknown token", c, c);
                goto done;
            }
            if (iv_push(out, b)) goto oom;
        }
    }
    goto done;
oom:
    st = kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
done:
    free(ss.sym);
    free(ss.heap.v);
    return st;
}

/* ---- byte-level BPE (GPT-2) ---- */

enum { CP_OTHER = 0, CP_LETTER = 1, CP_NUMBER = 2, CP_SPACE = 3 };

static int cp_class(uint32_t cp) {
    if (cp == UINT32_MAX) return CP_OTHER;
    if (kvs_uni_is_space(cp)) return CP_SPACE;
    if (kvs_uni_is_letter(cp)) return CP_LETTER;
    if (kvs_uni_is_number(cp)) return CP_NUMBER;
    return CP_OTHER;
}

/* BPE merges of one pre-token (raw bytes s[0..n)) into out. */
static kvs_status bpe_word(const kvs_tokenizer *t, const unsigned char *s, size_t n, ivec *out,
                           char *mapped, symbol *sym, char *key) {
    /* map bytes to their code points (UTF-8, 1 or 2 bytes each); one symbol per byte */
    size_t m = 0;
    int count = 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t cp = t->byte_cp[s[i]];
        sym[count].start = m;
        if (cp < 0x80) {
            mapped[m++] = (char)cp;
        } else {
            mapped[m++] = (char)(0xC0 | (cp >> 6));
            mapped[m++] = (char)(0x80 | (cp & 0x3F));
        }
        sym[count].n = m - sym[count].start;
        sym[count].prev = count - 1;
        sym[count].next = i + 1 == n ? -1 : count + 1;
        count++;
    }
    bheap heap = {0};
    kvs_status st = KVS_OK;
#define TRY_PAIR(L, R)                                                                             \
    do {                                                                                           \
        int l_ = (L), r_ = (R);                                                                    \
        if (l_ >= 0 && r_ >= 0) {                                                                  \
            size_t ln = sym[l_].n, rn = sym[r_].n;                                                 \
            memcpy(key, mapped + sym[l_].start, ln);                                               \
            key[ln] = ' ';                                                                         \
            memcpy(key + ln + 1, mapped + sym[r_].start, rn);                                      \
            int64_t rank = kvs_strhash_find_n(&t->merges, key, ln + 1 + rn);                       \
            if (rank >= 0) {                                                                       \
                bigram bg_ = {l_, r_, -(float)rank, ln + rn};                                      \
                if (bh_push(&heap, bg_)) goto oom;                                                 \
            }                                                                                      \
        }                                                                                          \
    } while (0)
    for (int i = 1; i < count; i++) TRY_PAIR(i - 1, i);
    while (heap.n) {
        bigram bg = bh_pop(&heap);
        symbol *l = &sym[bg.left], *r = &sym[bg.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != bg.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = bg.left;
        TRY_PAIR(l->prev, bg.left);
        TRY_PAIR(bg.left, l->next);
    }
#undef TRY_PAIR
    for (int i = 0; i != -1; i = sym[i].next) {
        int64_t id = kvs_strhash_find_n(&t->idx, mapped + sym[i].start, sym[i].n);
        if (id >= 0) {
            if (iv_push(out, (int32_t)id)) goto oom;
            continue;
        }
        /* not a token: one token per mapped byte (every GPT-2 byte is one) */
        for (size_t k = 0; k < sym[i].n;) {
            size_t cl = ((unsigned char)mapped[sym[i].start + k] < 0x80) ? 1 : 2;
            id = kvs_strhash_find_n(&t->idx, mapped + sym[i].start + k, cl);
            if (id < 0) id = t->unk;
            if (id < 0) {
                st = kvs_error(KVS_ERR_NOT_FOUND, "tokenizer: a byte has no token and there is no "
                                                  "unknown token");
                goto done;
            }
            if (iv_push(out, (int32_t)id)) goto oom;
            k += cl;
        }
    }
    goto done;
oom:
    st = kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
done:
    free(heap.v);
    return st;
}

/* GPT-2 pre-tokenizer (openai/gpt-2 encoder.py regex, as llama.cpp's unicode_regex_split_custom_gpt2):
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * then byte-level BPE of each piece. */
static kvs_status bpe_fragment(const kvs_tokenizer *t, const char *text, size_t n, ivec *out) {
    if (n == 0) return KVS_OK;
    const unsigned char *s = (const unsigned char *)text;
    /* code points: byte offset and class; one extra sentinel */
    size_t *off = malloc((n + 1) * sizeof *off);
    uint32_t *cps = malloc((n + 1) * sizeof *cps);
    char *mapped = malloc(2 * n + 1);
    symbol *sym = malloc((n + 1) * sizeof *sym);
    char *key = malloc(4 * n + 2);
    kvs_status st = KVS_OK;
    if (!off || !cps || !mapped || !sym || !key) {
        st = kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        goto done;
    }
    size_t nc = 0;
    for (size_t i = 0; i < n;) {
        off[nc] = i;
        i += utf8_decode(s + i, n - i, &cps[nc]);
        nc++;
    }
    off[nc] = n;
#define CLS(k) ((k) < nc ? cp_class(cps[k]) : -1)
    for (size_t i = 0; i < nc;) {
        size_t j = i;
        uint32_t c = cps[i];
        int cl = CLS(i);
        if (c == '\'' && i + 1 < nc) {
            uint32_t c1 = cps[i + 1], c2 = i + 2 < nc ? cps[i + 2] : 0;
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') j = i + 2;
            else if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                j = i + 3;
        }
        if (j == i) {
            size_t k = i + (c == ' ' && i + 1 < nc && CLS(i + 1) != CP_SPACE ? 1 : 0);
            int kc = CLS(k);
            if (kc == CP_LETTER || kc == CP_NUMBER || kc == CP_OTHER) {
                j = k;
                while (j < nc && CLS(j) == kc) j++;
            } else if (cl == CP_SPACE) {
                j = i;
                while (j < nc && CLS(j) == CP_SPACE) j++;
                if (j < nc && j - i > 1) j--;   /* \s+(?!\S): leave one space for the next word */
            } else {
                j = i + 1;
            }
        }
        if ((st = bpe_word(t, s + off[i], off[j] - off[i], out, mapped, sym, key)) != KVS_OK) goto done;
        i = j;
    }
#undef CLS
done:
    free(off);
    free(cps);
    free(mapped);
    free(sym);
    free(key);
    return st;
}

/* ---- WordPiece (BERT), as llama.cpp llm_tokenizer_wpm ---- */

static int is_chinese_char(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static size_t utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Greedy longest-match of "\u2581" + word (bytes w[0..n), w starting with the marker). */
static kvs_status wpm_word(const kvs_tokenizer *t, const char *w, size_t n, ivec *out) {
    int64_t start = out->n;
    for (size_t i = 0; i < n; i++) {
        int match = 0;
        size_t jmax = i + t->max_len + 1 < n ? i + t->max_len + 1 : n;
        for (size_t j = jmax; j > i; j--) {
            int64_t id = kvs_strhash_find_n(&t->idx, w + i, j - i);
            if (id >= 0) {
                if (iv_push(out, (int32_t)id)) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
                match = 1;
                i = j - 1;
                break;
            }
        }
        if (!match) {
            out->n = start;   /* discard the partial word */
            break;
        }
    }
    if (out->n == start) {
        if (t->unk < 0)
            return kvs_error(KVS_ERR_NOT_FOUND, "tokenizer: word not in the vocabulary and no unknown token");
        if (iv_push(out, t->unk)) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    return KVS_OK;
}

/* BERT pre-processing (llama.cpp llm_tokenizer_wpm::preprocess): each code point -> the first code
 * point of its NFD (accents dropped); White_Space ends a word; NUL, U+FFFD (invalid UTF-8) and
 * control characters are dropped; lowercase; punctuation, ASCII symbols and CJK ideographs are
 * words of their own. Each word is matched greedily, longest token first, with a U+2581 prefix. */
static kvs_status wpm_fragment(const kvs_tokenizer *t, const char *text, size_t n, ivec *out) {
    if (n == 0) return KVS_OK;
    char *w = malloc(3 + 4 * n + 4);
    if (!w) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    memcpy(w, SPACE_ESC, 3);
    size_t wn = 3;
    kvs_status st = KVS_OK;
    for (size_t i = 0; i <= n && st == KVS_OK;) {
        uint32_t cp = 0x20;   /* a final space flushes the last word */
        if (i < n) {
            i += utf8_decode((const unsigned char *)text + i, n - i, &cp);
            if (cp == UINT32_MAX) cp = 0xFFFD;
            cp = kvs_uni_nfd_first(cp);
        } else {
            i++;
        }
        if (kvs_uni_is_space(cp)) {
            if (wn > 3) st = wpm_word(t, w, wn, out);
            wn = 3;
            continue;
        }
        if (cp == 0 || cp == 0xFFFD || kvs_uni_is_control(cp)) continue;
        uint32_t lc = kvs_uni_tolower(cp);
        if (kvs_uni_is_punct(cp) || (cp < 0x7F && kvs_uni_is_symbol(cp)) || is_chinese_char(cp)) {
            if (wn > 3) st = wpm_word(t, w, wn, out);
            if (st != KVS_OK) break;
            wn = 3 + utf8_put(lc, w + 3);
            st = wpm_word(t, w, wn, out);
            wn = 3;
        } else {
            wn += utf8_put(lc, w + wn);
        }
    }
    free(w);
    return st;
}

kvs_status kvs_tokenizer_encode(const kvs_tokenizer *t, const char *text, size_t len, unsigned flags,
                                int32_t *ids, int64_t cap, int64_t *n_out) {
    if (!t || (!text && len) || (!ids && cap) || cap < 0 || !n_out)
        return kvs_error(KVS_ERR_INVALID_ARGUMENT, "kvs_tokenizer_encode: bad argument");
    *n_out = 0;
    ivec out = {0};
    fvec fr = {0};
    char *esc = NULL;
    kvs_status s = KVS_OK;
    if ((flags & KVS_TOKENIZE_ADD_BOS) && t->bos >= 0 && iv_push(&out, t->bos)) goto oom;
    if (len > 0 || (flags & KVS_TOKENIZE_PREFIX_EMPTY)) {
        fragment all = {0, len, -1};
        if (kvs_tok_fv_insert(&fr, 0, all)) goto oom;
        if (len > 0 && kvs_tok_partition(t, text, &fr, flags)) goto oom;
    }
    /* escaped text buffer: worst case every byte a space (3 bytes) + prefix */
    esc = malloc(3 * len + 4);
    if (!esc) goto oom;
    int prev_special = 1;
    for (size_t i = 0; i < fr.n; i++) {
        if (fr.v[i].id >= 0) {
            if (iv_push(&out, fr.v[i].id)) goto oom;
            prev_special = 1;
            continue;
        }
        if (t->bpe || t->wpm) {
            s = t->bpe ? bpe_fragment(t, text + fr.v[i].off, fr.v[i].n, &out)
                       : wpm_fragment(t, text + fr.v[i].off, fr.v[i].n, &out);
            if (s != KVS_OK) goto done;
            prev_special = 0;
            continue;
        }
        size_t n = 0;
        if (t->add_space_prefix && prev_special) {
            memcpy(esc, SPACE_ESC, 3);
            n = 3;
        }
        for (size_t k = 0; k < fr.v[i].n; k++) {
            char c = text[fr.v[i].off + k];
            if (c == ' ') {
                memcpy(esc + n, SPACE_ESC, 3);
                n += 3;
            } else {
                esc[n++] = c;
            }
        }
        if ((s = spm_fragment(t, esc, n, &out)) != KVS_OK) goto done;
        prev_special = 0;
    }
    if ((flags & KVS_TOKENIZE_ADD_EOS) && t->eos >= 0 && iv_push(&out, t->eos)) goto oom;
    *n_out = out.n;
    if (out.n && cap > 0) memcpy(ids, out.v, (size_t)(out.n < cap ? out.n : cap) * sizeof *ids);
    if (out.n > cap)
        s = kvs_error(KVS_ERR_OUT_OF_RANGE, "kvs_tokenizer_encode: %lld ids do not fit %lld",
                      (long long)out.n, (long long)cap);
    goto done;
oom:
    s = kvs_error(KVS_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
done:
    free(out.v);
    free(fr.v);
    free(esc);
    return s;
}
