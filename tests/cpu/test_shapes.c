/* tests/cpu/test_shapes.c: the shape string parser's refusals and the shared shape check (runtime/shape.h) over every embedded sweep */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gen/kv.h"
#include "gen/sweep.h"
#include "gen/template.h"
#include "runtime/shape.h"

static void expect_parse_error(const char *text, const char *needle)
{
    gen_kvset s;
    char err[256] = "";
    gen_kv_clear(&s);
    if (gen_kv_parse(&s, text, err, sizeof err) != -1 || !strstr(err, needle))
        fail_msg("'%s': got '%s', want an error with '%s'", text, err, needle);
}

/* An integer past 64 bits (UBSan saw 9223372036854775807k multiplied by 1024) and a key given twice
 * (the last one won) are refused, naming the key and the value. */
static void test_shapes__parser_refuses_overflow_and_duplicates(void **state)
{
    expect_parse_error("skv=9223372036854775807k", "value '9223372036854775807k' of 'skv' is out of range");
    expect_parse_error("skv=9007199254740993K", "value '9007199254740993K' of 'skv' is out of range");
    expect_parse_error("b=99999999999999999999", "value '99999999999999999999' of 'b' is out of range");
    expect_parse_error("b=-99999999999999999999", "of 'b' is out of range");
    expect_parse_error("b=1,sq=1,b=2", "'b' is given twice");
    expect_parse_error("b=1; b=1", "'b' is given twice");
    gen_kvset s;
    char err[256];
    gen_kv_clear(&s);
    assert_int_equal(gen_kv_parse(&s, "skv=8191k,b=-9223372036854775808,x=12ab", err, sizeof err), 0);
    assert_int_equal(gen_kv_int(&s, "skv", 0), 8191LL * 1024);
    assert_true(gen_kv_int(&s, "b", 0) == (-9223372036854775807LL - 1));
    assert_string_equal(gen_kv_str(&s, "x"), "12ab");
}

struct sweep_ctx {
    gen_host *h;
    int shapes, sweeps;
};

static int check_sweep(const char *name, void *arg)
{
    struct sweep_ctx *c = arg;
    gen_sweep sw;
    if (gen_sweep_load(c->h, name, &sw))
        fail_msg("sweep '%s': %s", name, gen_host_errmsg(c->h));
    for (int i = 0; i < sw.n; i++) {
        const char *family = gen_kv_str(&sw.shapes[i], "family");
        gen_tmpl *t = gen_tmpl_load(c->h, family);
        if (!t)
            fail_msg("sweep '%s': %s", name, gen_host_errmsg(c->h));
        core_err msg = CORE_ERR_INIT;
        char text[1024];
        if (rt_shape_check(family, &sw.shapes[i], gen_tmpl_shape_fields(t), RT_NAMES_SHAPE, &msg)) {
            gen_kv_format(&sw.shapes[i], text, sizeof text);
            fail_msg("sweep '%s' shape %d (%s): %s", name, i, text, msg.msg);
        }
        c->shapes++;
    }
    gen_sweep_free(&sw);
    c->sweeps++;
    return 0;
}

/* Every shape of every embedded sweep passes the check kforge compile now makes of sweep shapes. */
static void test_shapes__every_sweep_shape_passes_the_shared_check(void **state)
{
    struct sweep_ctx c = {gen_host_new(NULL), 0, 0};
    assert_non_null(c.h);
    assert_int_equal(gen_sweep_names(c.h, check_sweep, &c), 0);
    assert_true(c.sweeps >= 5);
    assert_true(c.shapes >= 20);
    gen_host_free(c.h);
}

/* Each embedded template declares the fields the runtime's rules name (no key refused as unknown). */
static int check_family(const char *family, void *arg)
{
    gen_host *h = arg;
    gen_tmpl *t = gen_tmpl_load(h, family);
    if (!t)
        fail_msg("%s: %s", family, gen_host_errmsg(h));
    const gen_kvset *decl = gen_tmpl_shape_fields(t);
    gen_kvset s;
    gen_kv_clear(&s);
    for (int i = 0; i < decl->n; i++)   /* every declared field with a value of its type */
        if (!strncmp(decl->kv[i].s, "string", 6))
            gen_kv_set_str(&s, decl->kv[i].name, "x");
        else
            gen_kv_set_int(&s, decl->kv[i].name, 1);
    core_err msg = CORE_ERR_INIT;
    rt_shape_check(family, &s, NULL, RT_NAMES_SHAPE, &msg);
    if (strstr(msg.msg, "unknown shape key") || strstr(msg.msg, "lacks"))
        fail_msg("%s: the runtime's rules and the template's shape fields differ: %s", family, msg.msg);
    return 0;
}

static void test_shapes__rules_match_the_templates_fields(void **state)
{
    gen_host *h = gen_host_new(NULL);
    assert_non_null(h);
    assert_int_equal(gen_host_families(h, check_family, h), 0);
    gen_host_free(h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes__parser_refuses_overflow_and_duplicates),
        cmocka_unit_test(test_shapes__every_sweep_shape_passes_the_shared_check),
        cmocka_unit_test(test_shapes__rules_match_the_templates_fields),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
