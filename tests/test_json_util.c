/* test_json_util.c: the one JSON rule of bt (src/json_util.h): a text is read as Python's
 * json module reads it, or refused. Each refused case is one where cJSON alone gives a
 * different value than Python (\u0000 cuts a string, a duplicate key yields the first
 * value, trailing text is ignored, raw control characters and non-UTF-8 bytes are taken);
 * accepted cases check that the escapes Python reads alike (\u0041, \", \\, \u00e9, a
 * surrogate pair) still pass. Also bt_escape_text, used to echo untrusted text. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_util.h"
#include "test_util.h"

/* Parses text; checks the status and, on refusal, that the message holds each of the
 * (NULL-terminated) fragments. */
static void expect(const char *name, const char *text, bt_status want, const char *frag1,
                   const char *frag2) {
    cJSON *j = NULL;
    bt_error_clear();
    bt_status s = bt_json_parse(text, strlen(text), "src.json", &j);
    const char *msg = bt_error_message();
    int ok = s == want && (s == BT_OK) == (j != NULL);
    if (frag1) ok = ok && strstr(msg, frag1) != NULL;
    if (frag2) ok = ok && strstr(msg, frag2) != NULL;
    if (s != BT_OK) ok = ok && strncmp(msg, "src.json: ", 10) == 0;
    tu_check(ok, "%s: status %s (want %s), message \"%s\"", name, bt_status_name(s),
             bt_status_name(want), msg);
    cJSON_Delete(j);
}

int main(void) {
    /* Accepted: what Python reads the same way. */
    expect("plain object", "{\"a\": 1, \"b\": [1, 2, {\"c\": \"d\"}]}\n", BT_OK, NULL, NULL);
    expect("escapes", "{\"a\": \"\\u0041\\\"\\\\\\u00e9\\ud83d\\ude00\\n\"}", BT_OK, NULL, NULL);
    expect("backslash then u0000 text", "{\"a\": \"\\\\u0000\"}", BT_OK, NULL, NULL);
    expect("same key in sibling objects", "[{\"a\": 1}, {\"a\": 2}]", BT_OK, NULL, NULL);
    expect("utf-8 value", "{\"k\": \"caf\xc3\xa9\"}", BT_OK, NULL, NULL);

    /* \u0000: Python keeps the NUL, a C string would end there. */
    expect("u0000 in a value", "{\"caption\": \"cap\\u0000tion\"}", BT_ERR_FORMAT, "$.caption",
           "\\u0000");
    expect("u0000 in a nested array", "{\"a\": {\"b\": [\"x\", \"y\\u0000\"]}}", BT_ERR_FORMAT,
           "$.a.b[1]", "\\u0000");
    expect("u0000 in a key", "{\"input_ids\\u0000x\": 1}", BT_ERR_FORMAT, "a key in $",
           "\\u0000");

    /* Duplicate keys: Python keeps the last value, cJSON finds the first. */
    expect("duplicate top-level key", "{\"hidden_size\": 64, \"hidden_size\": 128}",
           BT_ERR_FORMAT, "\"hidden_size\" appears twice in $", NULL);
    expect("duplicate nested key", "{\"v\": {\"a\": 1, \"b\": 2, \"a\": 3}}", BT_ERR_FORMAT,
           "\"a\" appears twice in $.v", NULL);
    expect("duplicate spelled with an escape", "{\"a\": 1, \"\\u0061\": 2}", BT_ERR_FORMAT,
           "\"a\" appears twice", NULL);
    /* A big object takes the sorted path (> 16 keys). */
    char big[4096];
    size_t n = (size_t)snprintf(big, sizeof big, "{\"vocab\": {");
    for (int i = 0; i < 40; i++)
        n += (size_t)snprintf(big + n, sizeof big - n, "\"t%d\": %d, ", i, i);
    snprintf(big + n, sizeof big - n, "\"t17\": 99}}");
    expect("duplicate in a 41-key object", big, BT_ERR_FORMAT, "\"t17\" appears twice in $.vocab",
           NULL);
    expect("duplicate in an object inside an array", "{\"m\": [1, {\"x\": 1, \"x\": 1}]}",
           BT_ERR_FORMAT, "appears twice in $.m[1]", NULL);

    /* Text Python refuses. */
    expect("trailing text", "{\"a\": 1} {\"b\": 2}", BT_ERR_FORMAT, "after the JSON value", NULL);
    expect("raw newline in a string", "{\"a\": \"x\ny\"}", BT_ERR_FORMAT, "$.a",
           "raw control character");
    expect("invalid UTF-8", "{\"a\": \"\xff\"}", BT_ERR_FORMAT, "$.a holds bytes that are not UTF-8",
           "byte 7: 0xff");
    expect("syntax error", "{\"a\": }", BT_ERR_FORMAT, "not valid JSON at byte", NULL);
    expect("empty", "", BT_ERR_FORMAT, "empty", NULL);
    /* Numbers outside JSON's grammar, which cJSON's strtod reads (issue 26): Python's
     * json.loads raises on each. */
    expect("leading zero", "{\"a\": 01}", BT_ERR_FORMAT, "$.a ('01'", "leading zero");
    expect("leading zero 08", "{\"a\": [1, 08]}", BT_ERR_FORMAT, "$.a[1] ('08'", "leading zero");
    expect("negative leading zero", "{\"a\": -01.5}", BT_ERR_FORMAT, "leading zero", NULL);
    expect("no digit after the point", "{\"lr\": 1.}", BT_ERR_FORMAT, "$.lr ('1.'",
           "decimal point");
    expect("no digit after the point, exponent", "[1.e5]", BT_ERR_FORMAT, "decimal point", NULL);
    /* ... and what Python reads */
    expect("JSON numbers", "[0, -0, 0.5, -0.5, 10, 1e5, 1E+05, 2.5e-3, -0e0, 100.25]", BT_OK,
           NULL, NULL);
    expect("digits in strings and keys", "{\"01\": \"1.\", \"x\": \"08\"}", BT_OK, NULL, NULL);

    /* bt_json_check on a tree parsed elsewhere. */
    const char *t = "{\"k\": 1, \"k\": 2}";
    cJSON *j = cJSON_Parse(t);
    tu_check(j && bt_json_check(j, t, strlen(t), "x") == BT_ERR_FORMAT,
             "bt_json_check refuses a duplicate key");
    cJSON_Delete(j);

    /* Escaping for messages. */
    char out[64];
    bt_escape_text(out, sizeof out, "a\xff\x1b[31m\"\\\xc3\xa9", 11);
    tu_check(strcmp(out, "a\\xff\\x1b[31m\\\"\\\\\xc3\xa9") == 0, "escape: '%s'", out);
    char small[12];
    bt_escape_text(small, sizeof small, "0123456789abcdef", 16);
    tu_check(strcmp(small, "01234567...") == 0, "escape cut: '%s'", small);
    unsigned char sur[] = {0xed, 0xa0, 0x80};
    tu_check(bt_utf8_valid_prefix(sur, 3) == 0, "surrogate bytes are not UTF-8");
    return tu_finish();
}
