/* kvsieve CLI — task files for `kvsieve eval --dlm --tasks FILE`: JSON lines, one case per line,
 *   {"task": "copy", "prompt": "...", "answer": " ...", "gen": 64, "block": 32}
 * task: a name of 1-63 characters [A-Za-z0-9_.-] (cases are grouped by it); prompt: the text after
 * BOS (may be empty); answer: the expected text (compared stripped of surrounding white space
 * with the decoded text up to the first EOS, also stripped); gen: masked tokens to decode (1 ..
 * 2^20); block: the block length, 1 .. gen, dividing gen. No other keys. Blank lines and lines
 * whose first non-blank character is '#' are skipped. */
#ifndef KVS_TOOLS_DLM_TASKS_H
#define KVS_TOOLS_DLM_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "kvsieve/status.h"

#define DLM_TASK_NAME_MAX 63
#define DLM_TASK_GEN_MAX (1 << 20)

typedef struct dlm_task_case {
    char task[DLM_TASK_NAME_MAX + 1];
    char *prompt;      /* NUL-terminated UTF-8 (no NUL inside), owned by the set */
    char *answer;      /* likewise */
    size_t prompt_len, answer_len; /* bytes, without the terminating NUL */
    int64_t gen, block;
    int64_t line;      /* 1-based line number in the file */
} dlm_task_case;

typedef struct dlm_task_set {
    dlm_task_case *cases;
    int64_t n;
} dlm_task_set;

/* Parses len bytes of buf (need not be NUL-terminated; may hold NUL bytes, which are an error) as
 * a task file; name (e.g. the path) starts every error message: "NAME:LINE: reason". On success
 * *out holds n >= 1 cases (free with dlm_tasks_free); on error *out is empty.
 * Errors: KVS_ERR_INVALID_ARGUMENT (out NULL, or buf NULL with len > 0), KVS_ERR_FORMAT (a line that
 * is not a JSON object, a missing, unknown or mistyped key, a value out of range, gen not a
 * multiple of block, a NUL byte, a file without any case), KVS_ERR_OUT_OF_MEMORY. */
kvs_status dlm_tasks_parse(const char *buf, size_t len, const char *name, dlm_task_set *out);

/* Frees the cases; sets s to empty. Accepts NULL and an empty set. */
void dlm_tasks_free(dlm_task_set *s);

#endif
