/* The task-file reader of `kvsieve eval --dlm --tasks` (tools/kvsieve/dlm_tasks.c) on buffers:
 * fields, line numbers, comments, blank and CRLF lines, JSON escapes; and every refusal with its
 * "NAME:LINE: reason" message (NUL bytes, "\u0000" in a string, deep nesting, out-of-range
 * integers, block not dividing gen, unknown keys, trailing text, an empty file). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/kvsieve/dlm_tasks.h"
#include "kvsieve/status.h"

static kvs_status parse(const char *buf, size_t len, dlm_task_set *s) { return dlm_tasks_parse(buf, len, "f.jsonl", s); }

static void expect_error(const char *buf, size_t len, const char *msg) {
    dlm_task_set s = {0};
    kvs_status st = parse(buf, len, &s);
    ck_assert_int_eq(st, KVS_ERR_FORMAT);
    ck_assert_ptr_null(s.cases);
    ck_assert_int_eq(s.n, 0);
    ck_assert_msg(strstr(kvs_last_error(), msg) != NULL, "message '%s' lacks '%s'", kvs_last_error(), msg);
}

START_TEST(valid_file) {
    const char *buf = "# comment\n"
                      "\n"
                      "{\"task\": \"copy\", \"prompt\": \"Copy the text.\\nab\\nCopy:\", \"answer\": \" ab\", \"gen\": 64, "
                      "\"block\": 32}\r\n"
                      "   \t\n"
                      "  {\"block\": 8, \"gen\": 8, \"answer\": \"caf\\u00e9\", \"prompt\": \"\", \"task\": \"retr.v2_x-1\"}";
    dlm_task_set s = {0};
    ck_assert_int_eq(parse(buf, strlen(buf), &s), KVS_OK);
    ck_assert_int_eq(s.n, 2);
    ck_assert_str_eq(s.cases[0].task, "copy");
    ck_assert_str_eq(s.cases[0].prompt, "Copy the text.\nab\nCopy:");
    ck_assert_uint_eq(s.cases[0].prompt_len, 23);
    ck_assert_str_eq(s.cases[0].answer, " ab");
    ck_assert_int_eq(s.cases[0].gen, 64);
    ck_assert_int_eq(s.cases[0].block, 32);
    ck_assert_int_eq(s.cases[0].line, 3);
    ck_assert_str_eq(s.cases[1].task, "retr.v2_x-1");
    ck_assert_str_eq(s.cases[1].prompt, "");
    ck_assert_uint_eq(s.cases[1].prompt_len, 0);
    ck_assert_str_eq(s.cases[1].answer, "caf\xc3\xa9");
    ck_assert_uint_eq(s.cases[1].answer_len, 5);
    ck_assert_int_eq(s.cases[1].line, 5);
    dlm_tasks_free(&s);
    ck_assert_ptr_null(s.cases);
    ck_assert_int_eq(s.n, 0);
    dlm_tasks_free(&s);
    dlm_tasks_free(NULL);
}
END_TEST

START_TEST(refusals) {
    const char ok[] = "{\"task\": \"t\", \"prompt\": \"a\", \"answer\": \"b\", \"gen\": 32, \"block\": 32}\n";
    char buf[512];
    /* a NUL byte inside the second line */
    size_t n = strlen(ok);
    memcpy(buf, ok, n);
    memcpy(buf + n, ok, n);
    buf[n + 20] = '\0';
    expect_error(buf, 2 * n, "f.jsonl:2: NUL byte");
    const char *esc0 = "{\"task\": \"t\", \"prompt\": \"a\\u0000b\", \"answer\": \"b\", \"gen\": 32, \"block\": 32}";
    expect_error(esc0, strlen(esc0), "f.jsonl:1: \"prompt\" holds a NUL character");
    const char *deep = "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]";
    expect_error(deep, strlen(deep), "f.jsonl:1: not a JSON object");
    const char *big = "{\"task\": \"t\", \"prompt\": \"a\", \"answer\": \"b\", \"gen\": 99999999999999999999999, \"block\": 1}";
    expect_error(big, strlen(big), "f.jsonl:1: \"gen\"");
    const char *blk = "{\"task\": \"t\", \"prompt\": \"a\", \"answer\": \"b\", \"gen\": 32, \"block\": 64}";
    expect_error(blk, strlen(blk), "f.jsonl:1: \"block\" = 64 outside [1, 32]");
    const char *neg = "{\"task\": \"t\", \"prompt\": \"a\", \"answer\": \"b\", \"gen\": -32, \"block\": 1}";
    expect_error(neg, strlen(neg), "f.jsonl:1: \"gen\" = -32 outside [1, 1048576]");
    const char *div = "{\"task\": \"t\", \"prompt\": \"a\", \"answer\": \"b\", \"gen\": 40, \"block\": 16}";
    expect_error(div, strlen(div), "f.jsonl:1: \"gen\" 40 is not a multiple of \"block\" 16");
    const char *unk = "{\"task\": \"t\", \"prompt\": \"a\", \"answer\": \"b\", \"gen\": 32, \"block\": 32, \"Gen\": 1}";
    expect_error(unk, strlen(unk), "f.jsonl:1: unknown key \"Gen\"");
    const char *miss = "{\"task\": \"t\", \"prompt\": \"a\", \"gen\": 32, \"block\": 32}";
    expect_error(miss, strlen(miss), "f.jsonl:1: missing key \"answer\"");
    const char *typ = "{\"task\": \"t\", \"prompt\": \"a\", \"answer\": null, \"gen\": 32, \"block\": 32}";
    expect_error(typ, strlen(typ), "f.jsonl:1: \"answer\" must be a string");
    const char *task = "{\"task\": \"\", \"prompt\": \"a\", \"answer\": \"b\", \"gen\": 32, \"block\": 32}";
    expect_error(task, strlen(task), "f.jsonl:1: \"task\" must be 1-63 characters");
    snprintf(buf, sizeof buf, "%.*s {\"x\": 1}", (int)(n - 1), ok);
    expect_error(buf, strlen(buf), "f.jsonl:1: text after the JSON object");
    expect_error("{\"task\": \"t\",\n\"prompt\": \"a\"}", 28, "f.jsonl:1: not a JSON object: unexpected end of line");
    expect_error("\"just a string\"", 15, "f.jsonl:1: a case must be a JSON object");
    expect_error("", 0, "f.jsonl: no case");
    expect_error(NULL, 0, "f.jsonl: no case");
    expect_error("# nothing\n\n  \n", 14, "f.jsonl: no case");
    dlm_task_set s = {0};
    ck_assert_int_eq(dlm_tasks_parse(ok, n, "f", NULL), KVS_ERR_INVALID_ARGUMENT);
    ck_assert_int_eq(dlm_tasks_parse(NULL, 3, "f", &s), KVS_ERR_INVALID_ARGUMENT);
}
END_TEST

/* Every prefix of a valid two-case file parses or is refused cleanly (no crash, no leak under ASan). */
START_TEST(prefixes) {
    const char *buf = "{\"task\": \"copy\", \"prompt\": \"x\\ty\", \"answer\": \"\\u00e9\", \"gen\": 64, \"block\": 32}\n"
                      "{\"task\": \"r\", \"prompt\": \"p\", \"answer\": \"a\", \"gen\": 2, \"block\": 1}\n";
    size_t n = strlen(buf);
    int ok = 0;
    for (size_t k = 0; k <= n; k++) {
        dlm_task_set s = {0};
        kvs_status st = parse(buf, k, &s);
        ck_assert(st == KVS_OK || st == KVS_ERR_FORMAT);
        if (st == KVS_OK) {
            ok++;
            ck_assert(s.n == 1 || s.n == 2);
        }
        dlm_tasks_free(&s);
    }
    ck_assert_int_ge(ok, 2);
}
END_TEST

int main(void) {
    Suite *s = suite_create("dlm_tasks");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, valid_file);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, prefixes);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
