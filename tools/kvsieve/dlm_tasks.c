/* kvsieve CLI — task-file reader for `eval --dlm --tasks` (see dlm_tasks.h). Every line is parsed
 * by json-c on its own (depth-limited tokener, whole line consumed), so a bad line is reported with
 * its number and never affects another. */
#include "dlm_tasks.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define JSON_DEPTH 4

void dlm_tasks_free(dlm_task_set *s) {
    if (!s) return;
    for (int64_t i = 0; i < s->n; i++) {
        free(s->cases[i].prompt);
        free(s->cases[i].answer);
    }
    free(s->cases);
    s->cases = NULL;
    s->n = 0;
}

static int name_ok(const char *s, size_t n) {
    if (n == 0 || n > DLM_TASK_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                 c == '.';
        if (!ok) return 0;
    }
    return 1;
}

/* A string field: copies it into *dst (malloc'd, NUL-terminated). */
static kvs_status get_str(json_object *o, const char *key, const char *name, int64_t line, char **dst, size_t *len) {
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v))
        return kvs_error(KVS_ERR_FORMAT, "%s:%lld: missing key \"%s\"", name, (long long)line, key);
    if (!json_object_is_type(v, json_type_string))
        return kvs_error(KVS_ERR_FORMAT, "%s:%lld: \"%s\" must be a string", name, (long long)line, key);
    const char *s = json_object_get_string(v);
    size_t n = (size_t)json_object_get_string_len(v);
    if (memchr(s, '\0', n))
        return kvs_error(KVS_ERR_FORMAT, "%s:%lld: \"%s\" holds a NUL character", name, (long long)line, key);
    *dst = malloc(n + 1);
    if (!*dst) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s:%lld: out of memory", name, (long long)line);
    memcpy(*dst, s, n);
    (*dst)[n] = '\0';
    *len = n;
    return KVS_OK;
}

static kvs_status get_int(json_object *o, const char *key, const char *name, int64_t line, int64_t lo, int64_t hi,
                          int64_t *dst) {
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v))
        return kvs_error(KVS_ERR_FORMAT, "%s:%lld: missing key \"%s\"", name, (long long)line, key);
    if (!json_object_is_type(v, json_type_int))
        return kvs_error(KVS_ERR_FORMAT, "%s:%lld: \"%s\" must be an integer", name, (long long)line, key);
    errno = 0;
    int64_t x = json_object_get_int64(v);
    if (errno != 0 || x < lo || x > hi)
        return kvs_error(KVS_ERR_FORMAT, "%s:%lld: \"%s\" = %s outside [%lld, %lld]", name, (long long)line, key,
                         json_object_to_json_string(v), (long long)lo, (long long)hi);
    *dst = x;
    return KVS_OK;
}

static kvs_status parse_case(json_object *o, const char *name, int64_t line, dlm_task_case *c) {
    static const char *const keys[] = {"task", "prompt", "answer", "gen", "block"};
    json_object_object_foreach(o, k, v) {
        (void)v;
        int known = 0;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) known |= strcmp(k, keys[i]) == 0;
        if (!known)
            return kvs_error(KVS_ERR_FORMAT, "%s:%lld: unknown key \"%.64s\" (task, prompt, answer, gen, block)", name,
                             (long long)line, k);
    }
    char *task = NULL;
    size_t tl = 0;
    KVS_TRY(get_str(o, "task", name, line, &task, &tl));
    int ok = name_ok(task, tl);
    if (ok) memcpy(c->task, task, tl + 1);
    free(task);
    if (!ok)
        return kvs_error(KVS_ERR_FORMAT, "%s:%lld: \"task\" must be 1-%d characters of [A-Za-z0-9_.-]", name,
                         (long long)line, DLM_TASK_NAME_MAX);
    KVS_TRY(get_str(o, "prompt", name, line, &c->prompt, &c->prompt_len));
    KVS_TRY(get_str(o, "answer", name, line, &c->answer, &c->answer_len));
    KVS_TRY(get_int(o, "gen", name, line, 1, DLM_TASK_GEN_MAX, &c->gen));
    KVS_TRY(get_int(o, "block", name, line, 1, c->gen, &c->block));
    if (c->gen % c->block != 0)
        return kvs_error(KVS_ERR_FORMAT, "%s:%lld: \"gen\" %lld is not a multiple of \"block\" %lld", name, (long long)line,
                         (long long)c->gen, (long long)c->block);
    c->line = line;
    return KVS_OK;
}

/* Parses one line (not blank, not a comment) into c. */
static kvs_status parse_line(const char *s, size_t n, const char *name, int64_t line, dlm_task_case *c) {
    if (memchr(s, '\0', n)) return kvs_error(KVS_ERR_FORMAT, "%s:%lld: NUL byte in the line", name, (long long)line);
    if (n > (size_t)INT32_MAX) return kvs_error(KVS_ERR_FORMAT, "%s:%lld: line too long", name, (long long)line);
    json_tokener *tk = json_tokener_new_ex(JSON_DEPTH);
    if (!tk) return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s:%lld: out of memory", name, (long long)line);
    json_object *o = json_tokener_parse_ex(tk, s, (int)n);
    enum json_tokener_error je = json_tokener_get_error(tk);
    size_t end = json_tokener_get_parse_end(tk);
    json_tokener_free(tk);
    kvs_status st = KVS_OK;
    if (!o || je != json_tokener_success) {
        /* json_tokener_continue: the object never closed on this line */
        st = kvs_error(KVS_ERR_FORMAT, "%s:%lld: not a JSON object: %s", name, (long long)line,
                       je == json_tokener_continue ? "unexpected end of line" : json_tokener_error_desc(je));
    } else if (!json_object_is_type(o, json_type_object)) {
        st = kvs_error(KVS_ERR_FORMAT, "%s:%lld: a case must be a JSON object {\"task\", \"prompt\", \"answer\", "
                                       "\"gen\", \"block\"}", name, (long long)line);
    } else {
        for (size_t i = end; i < n && st == KVS_OK; i++)
            if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
                st = kvs_error(KVS_ERR_FORMAT, "%s:%lld: text after the JSON object", name, (long long)line);
        if (st == KVS_OK) st = parse_case(o, name, line, c);
    }
    json_object_put(o);
    if (st != KVS_OK) {
        free(c->prompt);
        free(c->answer);
        memset(c, 0, sizeof *c);
    }
    return st;
}

kvs_status dlm_tasks_parse(const char *buf, size_t len, const char *name, dlm_task_set *out) {
    if (!out || (!buf && len)) return kvs_error(KVS_ERR_INVALID_ARGUMENT, "dlm_tasks_parse: bad argument");
    if (!name) name = "task file";
    out->cases = NULL;
    out->n = 0;
    size_t cap = 0;
    int64_t line = 0;
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        const char *s = buf + pos;
        size_t n = end - pos;
        pos = end + 1;
        line++;
        size_t k = 0;
        while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
        if (k == n || s[k] == '#') continue;
        if ((size_t)out->n == cap) {
            size_t nc = cap ? 2 * cap : 64;
            dlm_task_case *v = realloc(out->cases, nc * sizeof *v);
            if (!v) {
                dlm_tasks_free(out);
                return kvs_error(KVS_ERR_OUT_OF_MEMORY, "%s:%lld: out of memory", name, (long long)line);
            }
            out->cases = v;
            cap = nc;
        }
        dlm_task_case *c = &out->cases[out->n];
        memset(c, 0, sizeof *c);
        kvs_status st = parse_line(s + k, n - k, name, line, c);
        if (st != KVS_OK) {
            dlm_tasks_free(out);
            return st;
        }
        out->n++;
    }
    if (out->n == 0) {
        dlm_tasks_free(out);
        return kvs_error(KVS_ERR_FORMAT, "%s: no case (JSON lines {\"task\", \"prompt\", \"answer\", \"gen\", \"block\"})",
                         name);
    }
    return KVS_OK;
}
