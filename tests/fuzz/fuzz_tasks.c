/* Fuzz target: the task-file reader of `kvsieve eval --dlm --tasks` (tools/kvsieve/dlm_tasks.c,
 * JSON lines {"task","prompt","answer","gen","block"}). Input: the file's bytes, as given.
 * Checks on success: at least one case; every case has a valid name, NUL-free prompt/answer of the
 * stated lengths, 1 <= block <= gen <= DLM_TASK_GEN_MAX with gen a multiple of block, and a line
 * number inside the input. Seeds: tests/data/fuzz/corpus/tasks (cut from models/task-dlm/dev.jsonl). */
#include <string.h>

#include "dlm_tasks.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dlm_task_set s;
    if (dlm_tasks_parse((const char *)data, size, "fuzz.jsonl", &s) != KVS_OK) {
        if (s.n != 0 || s.cases != NULL) fuzz_fail("a failed parse left %lld cases", (long long)s.n);
        return 0;
    }
    if (s.n < 1) fuzz_fail("parse succeeded with no case");
    int64_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    for (int64_t i = 0; i < s.n; i++) {
        const dlm_task_case *c = &s.cases[i];
        size_t tl = strnlen(c->task, sizeof c->task);
        if (tl < 1 || tl > DLM_TASK_NAME_MAX) fuzz_fail("case %lld: task name of %zu bytes", (long long)i, tl);
        if (!c->prompt || !c->answer) fuzz_fail("case %lld: NULL text", (long long)i);
        if (strlen(c->prompt) != c->prompt_len || strlen(c->answer) != c->answer_len)
            fuzz_fail("case %lld: text length differs from the stated one (NUL inside?)", (long long)i);
        if (c->block < 1 || c->block > c->gen || c->gen > DLM_TASK_GEN_MAX || c->gen % c->block != 0)
            fuzz_fail("case %lld: gen %lld block %lld accepted", (long long)i, (long long)c->gen, (long long)c->block);
        if (c->line < 1 || c->line > lines) fuzz_fail("case %lld: line %lld of %lld", (long long)i, (long long)c->line, (long long)lines);
    }
    dlm_tasks_free(&s);
    if (s.n != 0 || s.cases != NULL) fuzz_fail("dlm_tasks_free left the set non-empty");
    return 0;
}
