/* tests/cpu/test_gen.c: the Lua host, sandbox, enumeration, keys, hashes and the NVRTC path */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "db/db.h"
#include "gen/build.h"
#include "gen/embed.h"
#include "gen/include.h"
#include "gen/symbols.h"
#include "gen/sandbox.h"
#include "gen/json.h"
#include "gen/kv.h"
#include "gen/nvrtc.h"
#include "gen/sweep.h"
#include "gen/template.h"

static char g_dir[256];

struct gen_target;
static void prepare_default(gen_host *h, const char *family, const char *shape, const gen_target *tg, gen_job *j);

static void write_file(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, rel);
    char *slash = strrchr(path, '/');
    *slash = 0;
    mkdir(path, 0755);
    *slash = '/';
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* A small, valid template: one kernel adding a constant, two params, one runtime param. */
static const char *good_tmpl =
    "return {\n"
    "  family = 'toy', doc = 'toy family',\n"
    "  includes = { 'toy/body.cuh' },\n"
    "  shape = { n = 'int', dtype = 'string' },\n"
    "  params = { w = {1, 2, 4}, bn = {32, 64}, sp = {1, 2} },\n"
    "  runtime = { sp = true },\n"
    "  fixed = function(s) return { dtype = s.dtype, big = s.n > 100 and 1 or 0 } end,\n"
    "  valid = function(p, f, dev)\n"
    "    if p.w * p.bn > 128 then return false, 'w*bn over 128' end\n"
    "    return true end,\n"
    "  default = function(s, dev) return { w = 2, bn = 32, sp = 1 } end,\n"
    "  render = function(p, f) return subst(fragment('toy/body.cuh'), { W = p.w, BN = p.bn }) end,\n"
    "  kernels = function(p, f, dev) return { { name = 'toy', threads = 32 * p.w, smem = 0 } } end,\n"
    "}\n";

static const char *good_body =
    "extern \"C\" __global__ void toy(float *x) { x[threadIdx.x] += ${W} * ${BN}; }\n";

static int setup(void **state)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/kf_test_gen_XXXXXX");
    assert_non_null(mkdtemp(g_dir));
    write_file("toy.lua", good_tmpl);
    write_file("toy/body.cuh", good_body);
    return 0;
}

static int teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static gen_kvset shape_of(const char *text)
{
    gen_kvset s;
    char err[128];
    gen_kv_clear(&s);
    assert_int_equal(gen_kv_parse(&s, text, err, sizeof err), 0);
    return s;
}

static void test_kv__parse_format_and_key_are_sorted(void **state)
{
    gen_kvset a = shape_of("skv=128k, dtype=bf16, b=1");
    gen_kvset b = shape_of("b=1;dtype=bf16;skv=131072");
    char fa[128], fb[128], ka[128];
    assert_true(gen_kv_format(&a, fa, sizeof fa) > 0);
    assert_true(gen_kv_format(&b, fb, sizeof fb) > 0);
    assert_string_equal(fa, "b=1,dtype=bf16,skv=131072");
    assert_string_equal(fa, fb);
    assert_true(gen_kv_keyform(&a, ka, sizeof ka) > 0);
    assert_string_equal(ka, "b1.dtype-bf16.skv131072");
    gen_kvset c;
    char err[128];
    gen_kv_clear(&c);
    assert_int_equal(gen_kv_parse(&c, "B=1", err, sizeof err), -1);
    assert_non_null(strstr(err, "'B'"));
    assert_int_equal(gen_kv_parse(&c, "dtype=bf-16", err, sizeof err), -1);
    assert_non_null(strstr(err, "bf-16"));
    assert_int_equal(gen_kv_parse(&c, "novalue", err, sizeof err), -1);
}

static void test_template__loads_and_hashes(void **state)
{
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *t = gen_tmpl_load(h, "toy");
    assert_non_null(t);
    assert_string_equal(gen_tmpl_doc(t), "toy family");
    assert_int_equal(strlen(gen_tmpl_hash(t)), 32);
    const gen_space *s = gen_tmpl_space(t);
    assert_int_equal(s->n, 3);
    assert_string_equal(s->p[0].name, "bn");
    assert_string_equal(s->p[1].name, "sp");
    assert_true(s->p[1].runtime);
    gen_host_free(h);
}

static void test_template__variant_key_is_stable_and_sorted(void **state)
{
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *t = gen_tmpl_load(h, "toy");
    gen_kvset fixed, p1 = shape_of("w=2,bn=64,sp=2"), p2 = shape_of("sp=2,bn=64,w=2");
    gen_kvset shape = shape_of("n=200,dtype=fp16");
    assert_int_equal(gen_tmpl_fixed(t, &shape, &fixed), 0);
    char k1[256], k2[256], kb[256];
    assert_int_equal(gen_variant_key(t, &fixed, &p1, 0, k1, sizeof k1), 0);
    assert_int_equal(gen_variant_key(t, &fixed, &p2, 0, k2, sizeof k2), 0);
    assert_string_equal(k1, k2);
    assert_string_equal(k1, "toy.big1.bn64.dtype-fp16.sp2.w2");
    assert_int_equal(gen_variant_key(t, &fixed, &p1, 1, kb, sizeof kb), 0);
    assert_string_equal(kb, "toy.big1.bn64.dtype-fp16.w2");  /* runtime param left out */
    gen_host_free(h);
}

static int count_cb(const gen_kvset *p, int valid, const char *why, void *arg)
{
    int *c = arg;
    c[0]++;
    if (valid)
        c[1]++;
    else
        assert_string_equal(why, "w*bn over 128");
    return 0;
}

static void test_template__enumerates_with_constraints(void **state)
{
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *t = gen_tmpl_load(h, "toy");
    gen_device dev;
    gen_device_for_arch(&dev, "sm_90a");
    gen_kvset fixed, shape = shape_of("n=1,dtype=bf16");
    assert_int_equal(gen_tmpl_fixed(t, &shape, &fixed), 0);
    int c[2] = {0, 0};
    assert_int_equal(gen_tmpl_enumerate(t, &fixed, &dev, count_cb, c), 0);
    assert_int_equal(c[0], 12);   /* 3 w x 2 bn x 2 sp */
    assert_int_equal(c[1], 10);   /* only w=4,bn=64 is over 128: 5 of 6 points x 2 sp */
    gen_host_free(h);
}

static void test_template__shape_fields_are_checked(void **state)
{
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *t = gen_tmpl_load(h, "toy");
    gen_kvset fixed, shape = shape_of("n=1");
    assert_int_equal(gen_tmpl_fixed(t, &shape, &fixed), -1);
    assert_non_null(strstr(gen_host_errmsg(h), "lacks 'dtype'"));
    shape = shape_of("n=bf16,dtype=bf16");
    assert_int_equal(gen_tmpl_fixed(t, &shape, &fixed), -1);
    assert_non_null(strstr(gen_host_errmsg(h), "'n'"));
    gen_host_free(h);
}

static void expect_load_error(const char *text, const char *needle)
{
    write_file("bad.lua", text);
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *t = gen_tmpl_load(h, "bad");
    assert_null(t);
    if (!strstr(gen_host_errmsg(h), needle))
        fail_msg("error '%s' lacks '%s'", gen_host_errmsg(h), needle);
    gen_host_free(h);
}

static void test_sandbox__refuses_os_io_require_load(void **state)
{
    expect_load_error("os.execute('touch /tmp/kf_pwned')\nreturn {}\n",
                      "templates/bad.lua:1: attempt to index a nil value (global 'os')");
    expect_load_error("local f = io.open('/etc/passwd')\nreturn {}\n", "templates/bad.lua:1:");
    expect_load_error("\nrequire('x')\nreturn {}\n", "templates/bad.lua:2:");
    expect_load_error("return load('return 1')()\n", "templates/bad.lua:1:");
    expect_load_error("return string.dump(function() end)\n", "templates/bad.lua:1:");
    assert_int_equal(access("/tmp/kf_pwned", F_OK), -1);
}

static void test_sandbox__refuses_bytecode(void **state)
{
    write_file("bad.lua", "\x1bLua\x54\x00garbage");
    gen_host *h = gen_host_new(g_dir);
    assert_null(gen_tmpl_load(h, "bad"));
    assert_non_null(strstr(gen_host_errmsg(h), "binary"));
    gen_host_free(h);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void test_sandbox__stops_endless_loops(void **state)
{
    expect_load_error("while true do end\n", "templates/bad.lua:1: budget exceeded");
}

/* Issue 14, item 3: pcall swallowed the limit error, so a loop around a pcall ran for ever. */
static void test_sandbox__budget_survives_pcall(void **state)
{
    double t0 = now_s();
    expect_load_error("while true do pcall(function() while true do end end) end\nreturn {}\n",
                      "budget exceeded");
    expect_load_error("while true do xpcall(function() while true do end end, function(e) return e end) end\n",
                      "budget exceeded");
    /* the message handler of xpcall cannot loop either */
    expect_load_error("while true do xpcall(error, function() while true do end end) end\n", "budget exceeded");
    /* nor can a pcall inside an imported library keep going */
    write_file("lib/spin.lua", "while true do pcall(function() while true do end end) end\nreturn {}\n");
    expect_load_error("local S = import('lib/spin.lua')\nreturn {}\n", "budget exceeded");
    assert_true(now_s() - t0 < 30);
}

/* Issue 14, item 3: C-level pattern matching is not seen by the hook; its worst case is bounded. */
static void test_sandbox__bounds_pattern_matching(void **state)
{
    double t0 = now_s();
    expect_load_error("return string.rep('a', 5000):find('.-.-.-.-.-b')\n",
                      "templates/bad.lua:1: string.find: pattern '.-.-.-.-.-b' over a 5000-byte subject");
    expect_load_error("local s = string.rep('a', 5000)\nfor x in s:gmatch('.-.-.-b') do end\n", "string.gmatch");
    expect_load_error("local s = string.rep('a', 30000)\nreturn s:gsub('a*a*b', 'x')\n", "string.gsub");
    expect_load_error("return string.rep('a', 1e7):match(string.rep('a?', 40) .. 'b')\n", "string.match");
    expect_load_error("return string.rep('', 1 << 62)\n", "string.rep");
    expect_load_error("return table.move({}, 1, 1 << 40, 2)\n", "table.move");
    assert_true(now_s() - t0 < 10);
    /* what templates do stays allowed: short subjects, word classes, anchored matches */
    assert_true(gen_pattern_cost("latent512.rope64", 16, "([a-z]+)(%d+)", 13, 1, 0) < 1e4);
    char big[30000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    for (size_t i = 0; i + 1 < sizeof big; i += 40)
        big[i] = ' ';
    assert_true(gen_pattern_cost(big, strlen(big), "%${(%w+)}", 9, 1, 0) < GEN_PATTERN_STEPS);
    assert_true(gen_pattern_cost(big, strlen(big), "^alias_([a-z]+)$", 16, 1, 0) < 1e6);
}

/* Issue 14, item 3: a __gc finalizer runs with hooks off (Lua 5.4): setmetatable refuses __gc. */
static void test_sandbox__refuses_gc_finalizers(void **state)
{
    double t0 = now_s();
    expect_load_error("setmetatable({}, { __gc = function() while true do end end })\nreturn {}\n",
                      "templates/bad.lua:1: setmetatable: a __gc metamethod (finalizer) is not allowed");
    /* a __gc added after setmetatable does not mark the table for finalization (lgc.c): still nothing runs */
    write_file("bad.lua", "local mt = {}\nlocal t = setmetatable({}, mt)\nmt.__gc = function() while true do end end\n"
                          "t = nil\nreturn 42\n");
    gen_host *h = gen_host_new(g_dir);
    assert_null(gen_tmpl_load(h, "bad"));
    assert_non_null(strstr(gen_host_errmsg(h), "must return a table"));
    gen_host_free(h);
    assert_true(now_s() - t0 < 10);
}

/* Issue 14, item 8: error({}) printed "error: (null)". */
static void test_template__non_string_errors_are_named(void **state)
{
    expect_load_error("\nerror({})\n", "templates/bad.lua:2: error object is a table");
    expect_load_error("error()\n", "templates/bad.lua:1: error object is a nil");
    expect_load_error("error(setmetatable({}, { __tostring = function() while true do end end }))\n",
                      "error object is a table");
}

/* Issue 14, item 8: hkv=0 reported only "templates/lib/attn.lua:13: attempt to divide by zero". */
static void test_template__library_errors_name_the_template_and_shape(void **state)
{
    gen_host *h = gen_host_new(NULL);
    gen_tmpl *t = gen_tmpl_load(h, "attn_decode");
    assert_non_null(t);
    gen_kvset shape = shape_of("dtype=bf16,b=1,sq=1,skv=128,hq=8,hkv=0,d=128,causal=0"), fixed;
    assert_int_equal(gen_tmpl_fixed(t, &shape, &fixed), -1);
    const char *m = gen_host_errmsg(h);
    if (!strstr(m, "templates/attn_decode.lua: fixed(shape ") || !strstr(m, "hkv=0") ||
        !strstr(m, "templates/lib/attn.lua:"))
        fail_msg("'%s'", m);
    gen_host_free(h);
}

static void test_template__errors_name_file_and_line(void **state)
{
    expect_load_error("return {\n  family = 'bad',\n  x = 1 +\n}\n", "templates/bad.lua:4:");
    expect_load_error("return 42\n", "templates/bad.lua: must return a table");
    expect_load_error("return { family = 'other' }\n", "'family' must be \"bad\"");
    /* a runtime error inside render reports the template's line */
    write_file("bad.lua",
               "return { family = 'bad', shape = {}, params = { w = {1} },\n"
               "  fixed = function(s) return {} end, valid = function() return true end,\n"
               "  default = function() return { w = 1 } end,\n"
               "  render = function(p, f)\n"
               "    error('boom')\n"
               "  end,\n"
               "  kernels = function() return {} end }\n");
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *bt = gen_tmpl_load(h, "bad");
    assert_non_null(bt);
    gen_kvset fixed, params = shape_of("w=1"), shape;
    gen_kv_clear(&shape);
    assert_int_equal(gen_tmpl_fixed(bt, &shape, &fixed), 0);
    char *src = NULL;
    assert_int_equal(gen_tmpl_render(bt, &fixed, &params, &src), -1);
    assert_non_null(strstr(gen_host_errmsg(h), "templates/bad.lua:5: boom"));
    gen_host_free(h);
}

static void test_template__fragment_must_be_listed(void **state)
{
    write_file("bad.lua",
               "return { family = 'bad', shape = {}, params = { w = {1} },\n"
               "  fixed = function(s) return {} end, valid = function() return true end,\n"
               "  default = function() return { w = 1 } end,\n"
               "  render = function(p, f) return fragment('toy/body.cuh') end,\n"
               "  kernels = function() return {} end }\n");
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *t = gen_tmpl_load(h, "bad");
    assert_non_null(t);
    gen_kvset fixed, params = shape_of("w=1"), shape;
    gen_kv_clear(&shape);
    assert_int_equal(gen_tmpl_fixed(t, &shape, &fixed), 0);
    char *src = NULL;
    assert_int_equal(gen_tmpl_render(t, &fixed, &params, &src), -1);
    assert_non_null(strstr(gen_host_errmsg(h), "not listed in includes"));
    gen_host_free(h);
}

/* The hash of `family` changes when `file` is rewritten as `changed`, and comes back
 * when it is rewritten as `original`. */
static void expect_hash_follows(const char *family, const char *file, const char *changed,
                                const char *original)
{
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *t = gen_tmpl_load(h, family);
    if (!t)
        fail_msg("%s: %s", family, gen_host_errmsg(h));
    char before[33];
    snprintf(before, sizeof before, "%s", gen_tmpl_hash(t));
    gen_host_free(h);
    write_file(file, changed);
    h = gen_host_new(g_dir);
    assert_string_not_equal(before, gen_tmpl_hash(gen_tmpl_load(h, family)));
    gen_host_free(h);
    write_file(file, original);
    h = gen_host_new(g_dir);
    assert_string_equal(before, gen_tmpl_hash(gen_tmpl_load(h, family)));
    gen_host_free(h);
}

static void test_template__hash_changes_with_a_fragment(void **state)
{
    expect_hash_follows("toy", "toy/body.cuh",
                        "extern \"C\" __global__ void toy(float *x) { x[threadIdx.x] -= ${W} * ${BN}; }\n",
                        good_body);
}

/* ---- import(): library files shared by templates and sweeps ------------------ */

/* A template of family `name` that imports lib/twice.lua at load and calls its twice()
 * in render; `includes` is its includes list (Lua), `late` imports inside render instead. */
static void write_importer(const char *name, const char *includes, int late)
{
    char text[1024], file[96];
    snprintf(text, sizeof text,
             "%s\n"
             "return { family = '%s', includes = %s, shape = {}, params = { w = {1, 2} },\n"
             "  fixed = function(s) return {} end, valid = function() return true end,\n"
             "  default = function() return { w = 1 } end,\n"
             "  render = function(p, f)\n"
             "    local L = %s\n"
             "    return 'w ' .. L.twice(p.w) .. ' runs ' .. L.runs end,\n"
             "  kernels = function() return {} end }\n",
             late ? "" : "local A = import('lib/twice.lua')", name, includes,
             late ? "import('lib/twice.lua')" : "A");
    snprintf(file, sizeof file, "%s.lua", name);
    write_file(file, text);
}

static const char *twice_lib =
    "import_runs = (import_runs or 0) + 1\n"
    "local M = { runs = import_runs }\n"
    "function M.twice(x)\n"
    "  if x > 100 then error('too big') end\n"
    "  return 2 * x\n"
    "end\n"
    "return M\n";

static char *render_w(gen_host *h, const char *family, const char *w)
{
    gen_tmpl *t = gen_tmpl_load(h, family);
    if (!t)
        fail_msg("%s: %s", family, gen_host_errmsg(h));
    gen_kvset fixed, params = shape_of(w), shape;
    gen_kv_clear(&shape);
    assert_int_equal(gen_tmpl_fixed(t, &shape, &fixed), 0);
    char *src = NULL;
    if (gen_tmpl_render(t, &fixed, &params, &src))
        return NULL;
    return src;
}

static void test_import__runs_once_per_host_and_is_shared(void **state)
{
    write_file("lib/twice.lua", twice_lib);
    write_importer("imp_a", "{ 'lib/twice.lua' }", 0);
    write_importer("imp_b", "{ 'lib/twice.lua' }", 1);
    write_file("sweeps/imp.lua",
               "local L = import('lib/twice.lua')\n"
               "return { shapes = { { family = 'imp_a', n = L.twice(21), runs = L.runs } } }\n");
    gen_host *h = gen_host_new(g_dir);
    char *a = render_w(h, "imp_a", "w=2"), *b = render_w(h, "imp_b", "w=1");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(strstr(a, "w 4 runs 1"));
    assert_non_null(strstr(b, "w 2 runs 1"));  /* imported inside render: the same table */
    gen_sweep sw;
    assert_int_equal(gen_sweep_load(h, "imp", &sw), 0);  /* sweeps import without includes */
    assert_int_equal(gen_kv_int(&sw.shapes[0], "n", 0), 42);
    assert_int_equal(gen_kv_int(&sw.shapes[0], "runs", 0), 1);
    gen_sweep_free(&sw);
    free(a);
    free(b);
    gen_host_free(h);
}

static void test_import__must_be_listed_in_includes(void **state)
{
    write_file("lib/twice.lua", twice_lib);
    write_file("lib/outer.lua", "local T = import('lib/twice.lua')\nreturn { twice = T.twice, runs = 0 }\n");
    /* at load */
    write_importer("bad", "{}", 0);
    gen_host *h = gen_host_new(g_dir);
    assert_null(gen_tmpl_load(h, "bad"));
    assert_string_equal(gen_host_errmsg(h),
                        "templates/bad.lua: import 'lib/twice.lua' is not listed in the includes of "
                        "templates/bad.lua");
    gen_host_free(h);
    /* inside render: the template's line */
    write_importer("imp_late", "{ 'toy/body.cuh' }", 1);
    h = gen_host_new(g_dir);
    assert_null(render_w(h, "imp_late", "w=1"));
    assert_non_null(strstr(gen_host_errmsg(h), "templates/imp_late.lua:6: import 'lib/twice.lua' is not "
                                               "listed in the includes of templates/imp_late.lua"));
    gen_host_free(h);
    /* what an imported file imports must be listed too, whether it runs now or was cached */
    write_file("imp_outer.lua",
               "local A = import('lib/outer.lua')\n"
               "return { family = 'imp_outer', includes = { 'lib/outer.lua' }, shape = {}, params = { w = {1} },\n"
               "  fixed = function(s) return {} end, valid = function() return true end,\n"
               "  default = function() return { w = 1 } end, render = function() return '' end,\n"
               "  kernels = function() return {} end }\n");
    h = gen_host_new(g_dir);
    for (int i = 0; i < 2; i++) {
        assert_null(gen_tmpl_load(h, "imp_outer"));
        assert_non_null(strstr(gen_host_errmsg(h), "import 'lib/twice.lua' is not listed in the includes "
                                                   "of templates/imp_outer.lua"));
    }
    gen_host_free(h);
}

static void test_import__errors_name_the_imported_file_and_line(void **state)
{
    write_file("lib/twice.lua", twice_lib);
    write_file("lib/broken.lua", "local M = {}\nM.x = 1 +\nreturn M\n");
    write_file("lib/num.lua", "return 42\n");
    write_file("lib/self.lua", "return import('lib/self.lua')\n");
    expect_load_error("local A = import('lib/broken.lua')\nreturn {}\n", "templates/lib/broken.lua:3:");
    expect_load_error("local A = import('lib/num.lua')\nreturn {}\n",
                      "templates/lib/num.lua: must return a table, returned number");
    expect_load_error("local A = import('lib/none.lua')\nreturn {}\n", "lib/none.lua");
    expect_load_error("local A = import('lib/self.lua')\nreturn {}\n", "imports itself");
    expect_load_error("local A = import('../etc/x.lua')\nreturn {}\n", "../etc/x.lua");
    /* a runtime error in a library function called from render */
    write_importer("imp_a", "{ 'lib/twice.lua' }", 0);
    gen_host *h = gen_host_new(g_dir);
    assert_null(render_w(h, "imp_a", "w=101"));
    if (!strstr(gen_host_errmsg(h), "templates/lib/twice.lua:4: too big"))
        fail_msg("error '%s' does not name templates/lib/twice.lua:4", gen_host_errmsg(h));
    gen_host_free(h);
}

static void test_import__hash_changes_with_an_imported_file(void **state)
{
    write_file("lib/twice.lua", twice_lib);
    write_importer("imp_a", "{ 'lib/twice.lua' }", 0);
    expect_hash_follows("imp_a", "lib/twice.lua",
                        "local M = { runs = 1 }\nfunction M.twice(x) return x + x end\nreturn M\n", twice_lib);
}

static void test_render__is_pure_and_has_a_banner(void **state)
{
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *t = gen_tmpl_load(h, "toy");
    gen_kvset fixed, params = shape_of("w=4,bn=32,sp=2"), shape = shape_of("n=1,dtype=bf16");
    assert_int_equal(gen_tmpl_fixed(t, &shape, &fixed), 0);
    char *a = NULL, *b = NULL;
    assert_int_equal(gen_tmpl_render(t, &fixed, &params, &a), 0);
    assert_int_equal(gen_tmpl_render(t, &fixed, &params, &b), 0);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "generated by kforge, do not edit"));
    assert_non_null(strstr(a, "toy.big0.bn32.dtype-bf16.w4"));
    assert_non_null(strstr(a, "+= 4 * 32;"));
    free(a);
    free(b);
    gen_host_free(h);
}

/* A job of template t for shape: its fixed values set, no params yet. */
static gen_job job_of(gen_tmpl *t, const gen_kvset *shape)
{
    gen_job j = {0};
    j.tmpl = t;
    assert_int_equal(gen_tmpl_fixed(t, shape, &j.fixed), 0);
    return j;
}

static void test_nvrtc__compiles_and_reports_resources(void **state)
{
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *t = gen_tmpl_load(h, "toy");
    gen_target tg;
    assert_int_equal(gen_target_init(&tg, "sm_90a", 0, NULL), 0);
    gen_kvset shape = shape_of("n=1,dtype=bf16");
    gen_job j = job_of(t, &shape);
    j.params = shape_of("w=2,bn=32,sp=1");
    assert_int_equal(gen_build_prepare(&j, &tg), 0);
    char err[256];
    assert_int_equal(gen_build_run(&j, 1, 1, NULL, &tg, NULL, NULL, err, sizeof err), 0);
    assert_false(j.failed);
    assert_true(j.bin.size > 100);
    assert_memory_equal(j.bin.image, "\x7f" "ELF", 4);
    assert_true(j.bin.regs > 0);
    assert_int_equal(j.bin.spill_bytes, 0);
    gen_job_free(&j);
    gen_host_free(h);
}

static void test_nvrtc__errors_carry_the_log_and_variant(void **state)
{
    gen_binary_out out;
    char err[1024];
    int rc = gen_nvrtc_compile("extern \"C\" __global__ void k() { undeclared_thing = 1; }", "toy.w1",
                               "sm_80", 0, &out, err, sizeof err);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "toy.w1"));
    assert_non_null(strstr(err, "undeclared_thing"));
    assert_non_null(strstr(out.log, "undeclared_thing"));
    gen_binary_out_free(&out);
    rc = gen_nvrtc_compile("", "x", "sm_12", 0, &out, err, sizeof err);
    assert_int_equal(rc, -1);
    assert_non_null(strstr(err, "unknown arch 'sm_12'"));
}

static void expect_include(const char *src, int ok, const char *needle)
{
    const char *names[] = {"toy/body.cuh", "common/types.cuh"};
    char err[512] = "";
    int rc = gen_includes_check(src, names, 2, err, sizeof err);
    if (rc != (ok ? 0 : -1))
        fail_msg("includes of '%s': rc %d, '%s'", src, rc, err);
    if (needle && !strstr(err, needle))
        fail_msg("includes of '%s': '%s' lacks '%s'", src, err, needle);
}

/* Issue 14, item 4: a render's #include "/etc/shadow" made NVRTC print the file's first line. */
static void test_nvrtc__includes_only_listed_fragments(void **state)
{
    expect_include("#include \"toy/body.cuh\"\n  #  include <common/types.cuh>\n", 1, NULL);
    expect_include("int x;\n#include \"/etc/shadow\"\n", 0, "line 2 includes '/etc/shadow': an absolute path");
    expect_include("#include \"../../etc/passwd\"\n", 0, "a path with '..'");
    expect_include("#include <cuda_bf16.h>\n", 0, "'cuda_bf16.h': not one of the template's fragments");
    expect_include("#define F \"/etc/shadow\"\n#include F\n", 0, "a computed include");
    expect_include("%:include \"/etc/shadow\"\n", 0, "absolute");                 /* digraph */
    expect_include("#inc\\\nlude \"/etc/shadow\"\n", 0, "absolute");              /* line splice */
    expect_include("#inc\\  \nlude \"/etc/shadow\"\n", 0, "absolute");            /* splice after spaces */
    expect_include("# /* c */ include_next \"/etc/shadow\"\n", 0, "absolute");
    expect_include("int a; /*\n*/ #include \"/etc/shadow\"\n", 0, "absolute");
    expect_include("#if __has_include(\"/etc/shadow\")\n#endif\n", 0, "absolute");
    expect_include("int a = 1'0;\n#include \"/etc/shadow\"\n", 0, "absolute");    /* digit separator */
    expect_include("auto c = u8'/*';\n#include \"/etc/shadow\"\n// */\n", 0, "absolute");
    expect_include("const char *s = \"/*\";\n#include \"/etc/shadow\"\n", 0, "absolute");
    expect_include("#pragma GCC dependency \"/etc/shadow\"\n", 0, "a pragma naming a file");
    /* not directives: comments and literals */
    expect_include("// #include \"/etc/shadow\"\n/* #include \"/etc/shadow\" */\n", 1, NULL);
    expect_include("const char *s = \"#include </etc/shadow>\";\n", 1, NULL);
    expect_include("const char *r = R\"x(\n#include \"/etc/shadow\"\n)x\";\n", 1, NULL);
    /* through a template: refused before NVRTC runs, the message names the include, not the file's text */
    write_file("inc.lua",
               "return { family = 'inc', shape = {}, params = { w = {1, 2} }, includes = { 'toy/body.cuh' },\n"
               "  fixed = function(s) return {} end, valid = function() return true end,\n"
               "  default = function() return { w = 1 } end,\n"
               "  render = function(p, f) if p.w == 1 then return '#include \"/etc/passwd\"\\n' end\n"
               "    return '#define W 2\\n#define BN 4\\n#include \"toy/body.cuh\"\\n' end,\n"
               "  kernels = function() return { { name = 'toy', threads = 32, smem = 0 } } end }\n");
    write_file("toy/body.cuh", "extern \"C\" __global__ void toy(float *x) { x[threadIdx.x] += W * BN; }\n");
    gen_host *h = gen_host_new(g_dir);
    gen_target tg;
    gen_target_init(&tg, "sm_80", 0, NULL);
    gen_job j;
    prepare_default(h, "inc", "", &tg, &j);
    char err[256];
    assert_int_equal(gen_build_run(&j, 1, 1, NULL, &tg, NULL, NULL, err, sizeof err), 1);
    assert_true(j.failed);
    if (!strstr(j.err, "includes '/etc/passwd': an absolute path") || strstr(j.err, "root:"))
        fail_msg("%s", j.err);
    gen_job_free(&j);
    /* a listed fragment is NVRTC's header: it compiles */
    memset(&j, 0, sizeof j);
    j.tmpl = gen_tmpl_load(h, "inc");
    j.params = shape_of("w=2");
    assert_int_equal(gen_build_prepare(&j, &tg), 0);
    assert_int_equal(gen_build_run(&j, 1, 1, NULL, &tg, NULL, NULL, err, sizeof err), 0);
    if (j.failed)
        fail_msg("%s", j.err);
    gen_job_free(&j);
    gen_host_free(h);
    write_file("toy/body.cuh", good_body);
}

/* Issue 14, item 5: a render of '' or kernels() naming a function the source lacks was stored. */
static void test_build__binary_must_hold_every_kernel(void **state)
{
    write_file("nok.lua",
               "return { family = 'nok', shape = {}, params = { w = {1, 2, 3} },\n"
               "  fixed = function(s) return {} end, valid = function() return true end,\n"
               "  default = function() return { w = 1 } end,\n"
               "  render = function(p, f) if p.w == 1 then return '' end\n"
               "    return 'extern \"C\" __global__ void kf_one(float *x) { x[0] = 1; }\\n' end,\n"
               "  kernels = function(p) local k = { { name = 'kf_one', threads = 32, smem = 0 } }\n"
               "    if p.w == 2 then k[2] = { name = 'kf_missing', threads = 32, smem = 0 } end\n"
               "    return k end }\n");
    char dbpath[400], err[256];
    snprintf(dbpath, sizeof dbpath, "%s/nok.db", g_dir);
    db_store *db = NULL;
    assert_int_equal(db_open(&db, dbpath, DB_CREATE), DB_OK);
    gen_host *h = gen_host_new(g_dir);
    for (int ptx = 0; ptx < 2; ptx++) {
        gen_target tg;
        gen_target_init(&tg, "sm_80", ptx, NULL);
        const char *want[3] = {"lacks kernel 'kf_one'", "lacks kernel 'kf_missing'", NULL};
        for (int w = 1; w <= 3; w++) {
            gen_job j = {0};
            j.tmpl = gen_tmpl_load(h, "nok");
            j.params = shape_of(w == 1 ? "w=1" : w == 2 ? "w=2" : "w=3");
            assert_int_equal(gen_build_prepare(&j, &tg), 0);
            assert_int_equal(gen_build_run(&j, 1, 1, db, &tg, NULL, NULL, err, sizeof err), want[w - 1] ? 1 : 0);
            if (want[w - 1] && (!j.failed || !strstr(j.err, want[w - 1]) || !strstr(j.err, "templates/nok.lua")))
                fail_msg("w=%d ptx=%d: '%s'", w, ptx, j.err);
            if (!want[w - 1] && j.failed)
                fail_msg("w=3 ptx=%d: %s", ptx, j.err);
            if (!want[w - 1])
                assert_int_equal(gen_binary_has_kernel(j.bin.image, j.bin.size, ptx, "kf_one"), 1);
            gen_job_free(&j);
        }
    }
    db_info in;
    assert_int_equal(db_get_info(db, &in), DB_OK);
    assert_int_equal(in.binaries, 2);           /* only w=3, cubin and PTX */
    /* a cached binary (a crafted database) without the kernel is not served either */
    gen_target tg;
    gen_target_init(&tg, "sm_90a", 0, NULL);
    gen_job j = {0};
    j.tmpl = gen_tmpl_load(h, "nok");
    j.params = shape_of("w=3");
    assert_int_equal(gen_build_prepare(&j, &tg), 0);
    db_binary b = {0};
    b.cache_key = j.cache_key;
    b.variant_key = j.binary_key;
    b.family = "nok";
    b.template_hash = (char *)gen_tmpl_hash(j.tmpl);
    b.arch = tg.arch;
    b.nvrtc = tg.nvrtc;
    b.options = tg.options;
    b.params = "w=3";
    b.kernels = "kf_one/32/0";
    b.image = "\x7f" "ELF not really";
    b.image_size = 16;
    int inserted = 0;
    assert_int_equal(db_binary_put(db, &b, &inserted), DB_OK);
    assert_int_equal(gen_build_run(&j, 1, 1, db, &tg, NULL, NULL, err, sizeof err), 1);
    if (!j.failed || j.cache_hit || !strstr(j.err, "cached binary") || !strstr(j.err, "kf_one"))
        fail_msg("'%s'", j.err);
    gen_job_free(&j);
    db_close(db);
    gen_host_free(h);
    assert_int_equal(gen_binary_has_kernel("not an elf at all, not at all", 29, 0, "kf_one"), -1);
    assert_int_equal(gen_binary_has_kernel("// .entry kf_one(\n", 18, 1, "kf_one"), 0);
    assert_int_equal(gen_binary_has_kernel(".visible .entry kf_one(\n", 24, 1, "kf_one"), 1);
}

static void test_nvrtc__ptxas_log_parse(void **state)
{
    gen_binary_out o;
    memset(&o, 0, sizeof o);
    gen_parse_ptxas_log("ptxas info    : Function properties for k\n"
                        "ptxas         .     24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
                        "ptxas info    : Used 168 registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]\n"
                        "ptxas info    : Used 40 registers, used 1 barriers, 0 bytes smem\n",
                        &o);
    assert_int_equal(o.regs, 168);
    assert_int_equal(o.smem_static, 16384);
    assert_int_equal(o.spill_bytes, 20);
    assert_int_equal(o.stack_bytes, 24);
    assert_int_equal(o.wgmma_serial, 0);
    gen_parse_ptxas_log("ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async instructions are serialized "
                        "due to program dependence on compiler-inserted WG.AR in divergent path in the function 'k'\n",
                        &o);
    assert_int_equal(o.wgmma_serial, 1);
}

static void test_build__second_compile_is_a_cache_hit(void **state)
{
    char dbpath[300];
    snprintf(dbpath, sizeof dbpath, "%s/cache.db", g_dir);
    db_store *db = NULL;
    assert_int_equal(db_open(&db, dbpath, DB_CREATE), DB_OK);
    gen_host *h = gen_host_new(g_dir);
    gen_tmpl *t = gen_tmpl_load(h, "toy");
    gen_target tg;
    gen_target_init(&tg, "sm_80", 0, NULL);
    for (int round = 0; round < 2; round++) {
        gen_job j[2] = {{0}};
        for (int k = 0; k < 2; k++) {
            j[k].tmpl = t;
            gen_kvset shape = shape_of("n=1,dtype=bf16");
            gen_tmpl_fixed(t, &shape, &j[k].fixed);
            j[k].params = shape_of(k ? "w=2,bn=64,sp=1" : "w=1,bn=32,sp=2");
            assert_int_equal(gen_build_prepare(&j[k], &tg), 0);
        }
        char err[256];
        assert_int_equal(gen_build_run(j, 2, 2, db, &tg, NULL, NULL, err, sizeof err), 0);
        for (int k = 0; k < 2; k++) {
            assert_int_equal(j[k].cache_hit, round == 1);
            assert_memory_equal(j[k].bin.image, "\x7f" "ELF", 4);
            gen_job_free(&j[k]);
        }
    }
    db_info in;
    assert_int_equal(db_get_info(db, &in), DB_OK);
    assert_int_equal(in.binaries, 2);
    db_close(db);
    gen_host_free(h);
}

static void test_build__cache_key_covers_hash_source_arch_and_nvrtc(void **state)
{
    gen_target a, b;
    gen_target_init(&a, "sm_90a", 0, NULL);
    gen_target_init(&b, "sm_80", 0, NULL);
    char k1[600], k2[600], k3[600], k4[600], k5[600];
    const char *src = "extern \"C\" __global__ void toy() {}\n";
    gen_cache_key("toy.w1", "00112233445566778899aabbccddeeff", src, &a, k1, sizeof k1);
    gen_cache_key("toy.w1", "00112233445566778899aabbccddeeff", src, &b, k2, sizeof k2);
    gen_cache_key("toy.w1", "10112233445566778899aabbccddeeff", src, &a, k3, sizeof k3);
    /* one more line in the source NVRTC compiles: another key (issue 14, item 1) */
    gen_cache_key("toy.w1", "00112233445566778899aabbccddeeff", "#define X 1\nextern \"C\" __global__ void toy() {}\n",
                  &a, k5, sizeof k5);
    snprintf(a.nvrtc, sizeof a.nvrtc, "12.9");
    gen_cache_key("toy.w1", "00112233445566778899aabbccddeeff", src, &a, k4, sizeof k4);
    assert_string_not_equal(k1, k2);
    assert_string_not_equal(k1, k3);
    assert_string_not_equal(k1, k4);
    assert_string_not_equal(k1, k5);
    assert_true(strncmp(k1, "toy.w1.sm_90a.", 14) == 0);
}

/* A copy of the embedded templates in dir, with text prepended to templates/<poisoned>. */
static void copy_embedded(const char *dir, const char *poisoned, const char *text)
{
    for (const gen_embedded_file *f = gen_embedded_files; f->path; f++) {
        char path[600], cmd[700];
        snprintf(path, sizeof path, "%s/%s", dir, f->path);
        snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
        assert_int_equal(system(cmd), 0);
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        if (!strcmp(f->path, poisoned))
            fputs(text, fp);
        fwrite(f->data, 1, f->size, fp);
        fclose(fp);
    }
}

/* A template that wraps the global fragment, a library table and the string metatable. */
static const char *poison =
    "local real = fragment\n"
    "fragment = function(p) return '#define KF_POISONED 1\\n' .. real(p) end\n"
    "local PA = import('lib/attn.lua')\n"
    "PA.fragments = function(paths) return '#define KF_POISONED 2\\n' end\n"
    "PA.check_fixed = function() return true end\n"
    "subst = function() return '#define KF_POISONED 3\\n' end\n"
    "getmetatable('').__index.format = function() return 'KF_POISONED' end\n"
    "string.rep = function() return 'KF_POISONED' end\n"
    "table.concat = function() return '#define KF_POISONED 4\\n' end\n";

static void prepare_default(gen_host *h, const char *family, const char *shape, const gen_target *tg, gen_job *j)
{
    memset(j, 0, sizeof *j);
    j->tmpl = gen_tmpl_load(h, family);
    if (!j->tmpl)
        fail_msg("%s: %s", family, gen_host_errmsg(h));
    gen_kvset s = shape_of(shape);
    assert_int_equal(gen_tmpl_fixed(j->tmpl, &s, &j->fixed), 0);
    assert_int_equal(gen_tmpl_default(j->tmpl, &s, &tg->dev, &j->params), 0);
    if (gen_build_prepare(j, tg))
        fail_msg("%s: %s", family, gen_host_errmsg(h));
}

/* Issue 14, item 1: a template in --templates DIR that poisons fragment, lib/attn.lua's table or the
 * string library changed what other families rendered, and their binaries were stored under the
 * clean cache key. Each template now has its own state, and the key covers the rendered source:
 * compiled into p.db from DIR (poisoner loaded first), the embedded templates' compile is a cache
 * hit only for a binary of byte-identical source. */
static void test_isolation__poisoning_template_cannot_reach_another_family(void **state)
{
    char dir[300], dbpath[400];
    snprintf(dir, sizeof dir, "%s/poisoned", g_dir);
    copy_embedded(dir, "attn_decode.lua", poison);
    snprintf(dbpath, sizeof dbpath, "%s/p.db", g_dir);
    gen_target tg;
    assert_int_equal(gen_target_init(&tg, "sm_90a", 0, NULL), 0);
    const char *gqa = "dtype=bf16,b=1,sq=4096,skv=4096,hq=32,hkv=8,d=128,causal=1";
    const char *dec = "dtype=bf16,b=1,sq=1,skv=131072,hq=32,hkv=8,d=128,causal=0";

    gen_host *bad = gen_host_new(dir), *clean = gen_host_new(NULL);
    gen_job poisoner, victims[3], ref[3];
    prepare_default(bad, "attn_decode", dec, &tg, &poisoner);
    assert_non_null(strstr(poisoner.src, "KF_POISONED"));   /* the poison works where it was planted */
    const char *fam[3] = {"attn_prefill", "attn_naive", "kda_naive"};
    const char *shp[3] = {gqa, gqa, "n=1,t=64,h=4,hv=4,dk=128,dv=128"};
    for (int i = 0; i < 3; i++) {
        gen_tmpl *t = gen_tmpl_load(clean, fam[i]);
        assert_non_null(t);
        prepare_default(bad, fam[i], shp[i], &tg, &victims[i]);
        prepare_default(clean, fam[i], shp[i], &tg, &ref[i]);
        assert_null(strstr(victims[i].src, "KF_POISONED"));
        assert_string_equal(victims[i].src, ref[i].src);
        assert_string_equal(victims[i].cache_key, ref[i].cache_key);
    }
    /* compiled from DIR into p.db, then looked up by the embedded templates: a hit for clean bytes */
    db_store *db = NULL;
    assert_int_equal(db_open(&db, dbpath, DB_CREATE), DB_OK);
    char err[512];
    assert_int_equal(gen_build_run(&victims[1], 1, 1, db, &tg, NULL, NULL, err, sizeof err), 0);
    assert_false(victims[1].failed);
    assert_int_equal(gen_build_run(&ref[1], 1, 1, db, &tg, NULL, NULL, err, sizeof err), 0);
    assert_true(ref[1].cache_hit);
    assert_int_equal(ref[1].bin.size, victims[1].bin.size);
    assert_memory_equal(ref[1].bin.image, victims[1].bin.image, ref[1].bin.size);
    db_close(db);
    gen_job_free(&poisoner);
    for (int i = 0; i < 3; i++) {
        gen_job_free(&victims[i]);
        gen_job_free(&ref[i]);
    }
    gen_host_free(bad);
    gen_host_free(clean);
}

/* Issue 14, item 1: a template whose render changes from call to call (state kept in its own globals)
 * gets one key per rendered source, so its second render is never served the first one's binary. */
static void test_build__key_follows_the_rendered_source(void **state)
{
    write_file("drift.lua",
               "n = 0\n"
               "return { family = 'drift', shape = {}, params = { w = {1} },\n"
               "  fixed = function(s) return {} end, valid = function() return true end,\n"
               "  default = function() return { w = 1 } end,\n"
               "  render = function(p, f) n = n + 1\n"
               "    return '#define KF_N ' .. n .. '\\nextern \"C\" __global__ void drift(int *x) { x[0] = KF_N; }\\n' end,\n"
               "  kernels = function() return { { name = 'drift', threads = 32, smem = 0 } } end }\n");
    gen_host *h = gen_host_new(g_dir);
    gen_target tg;
    gen_target_init(&tg, "sm_80", 0, NULL);
    char dbpath[400], err[512];
    snprintf(dbpath, sizeof dbpath, "%s/drift.db", g_dir);
    db_store *db = NULL;
    assert_int_equal(db_open(&db, dbpath, DB_CREATE), DB_OK);
    gen_job j[2];
    for (int k = 0; k < 2; k++) {
        prepare_default(h, "drift", "", &tg, &j[k]);
        assert_int_equal(gen_build_run(&j[k], 1, 1, db, &tg, NULL, NULL, err, sizeof err), 0);
    }
    assert_string_equal(j[0].binary_key, j[1].binary_key);
    assert_string_not_equal(j[0].cache_key, j[1].cache_key);
    assert_false(j[1].cache_hit);
    for (int k = 0; k < 2; k++)
        gen_job_free(&j[k]);
    db_close(db);
    gen_host_free(h);
}

static int load_cb(const char *family, void *arg)
{
    gen_host *h = arg;
    if (!gen_tmpl_load(h, family))
        fail_msg("%s: %s", family, gen_host_errmsg(h));
    return 0;
}

static int count_families(const char *family, void *arg)
{
    (*(int *)arg)++;
    return 0;
}

static void test_embedded__every_family_loads(void **state)
{
    gen_host *h = gen_host_new(NULL);
    int n = 0;
    gen_host_families(h, count_families, &n);
    assert_true(n >= 1);
    gen_host_families(h, load_cb, h);
    gen_sweep sw;
    assert_int_equal(gen_sweep_load(h, "default", &sw), 0);
    assert_true(sw.n > 0);
    for (int i = 0; i < sw.n; i++) {
        gen_tmpl *t = gen_tmpl_load(h, gen_kv_str(&sw.shapes[i], "family"));
        gen_kvset fixed;
        if (!t || gen_tmpl_fixed(t, &sw.shapes[i], &fixed))
            fail_msg("default sweep shape %d: %s", i, gen_host_errmsg(h));
    }
    gen_sweep_free(&sw);
    gen_host_free(h);
}

/* Every shape of every embedded sweep has a default variant that its template calls valid, on the
 * Hopper target and on an sm_80 (smaller shared memory): a default must never be a variant that
 * cannot run. */
struct default_ctx {
    gen_host *h;
    int shapes;
};

static int check_sweep_defaults(const char *name, void *arg)
{
    struct default_ctx *c = arg;
    const char *archs[] = {"sm_90a", "sm_80"};
    gen_sweep sw;
    if (gen_sweep_load(c->h, name, &sw))
        fail_msg("sweep %s: %s", name, gen_host_errmsg(c->h));
    for (int a = 0; a < 2; a++) {
        gen_target tg;
        assert_int_equal(gen_target_init(&tg, archs[a], 0, NULL), 0);
        for (int i = 0; i < sw.n; i++) {
            gen_tmpl *t = gen_tmpl_load(c->h, gen_kv_str(&sw.shapes[i], "family"));
            gen_kvset fixed, params;
            char key[512], why[512] = "";
            gen_kv_keyform(&sw.shapes[i], key, sizeof key);
            if (!t || gen_tmpl_fixed(t, &sw.shapes[i], &fixed) || gen_tmpl_default(t, &sw.shapes[i], &tg.dev, &params))
                fail_msg("sweep %s, %s, %s: %s", name, key, archs[a], gen_host_errmsg(c->h));
            if (gen_tmpl_valid(t, &fixed, &params, &tg.dev, why, sizeof why) != 1)
                fail_msg("sweep %s, %s, %s: the default is not valid: %s", name, key, archs[a], why);
            c->shapes++;
        }
    }
    gen_sweep_free(&sw);
    return 0;
}

static void test_embedded__every_sweep_default_is_valid(void **state)
{
    struct default_ctx c = {gen_host_new(NULL), 0};
    assert_int_equal(gen_sweep_names(c.h, check_sweep_defaults, &c), 0);
    assert_true(c.shapes > 100);
    gen_host_free(c.h);
}

/* kda_prefill's sm_90a default takes segments where the state blocks leave SMs idle (templates/kda_prefill.lua wg_seg):
 * the shapes measured in session 17 (bench/RESULTS.md), with the chunk, segments and impl each got, and a many-sequence
 * call that must stay at seg 1 (its grid's z is nseq * seg). Plans of n > 1 sequences take the s whose worse cost
 * relative to the best of either case (n sequences of t; one of n t) is least, among those within 1.25x the best for n
 * equal sequences: [1024, 0, 31]'s plan (n 3, t 352) seg 8 (4 for 3 x 352 alone), 8 x 1K H2 seg 16 (the one-sequence
 * case's pull), 4 x 1K H8 and 64 x 1K H2 seg 1 (the bound: 1.34x and 2.5x for equal sequences at seg 4), and 64 x 256
 * H8 seg 1, where the 256 MiB cap on the segments' workspace leaves s 1 and 2 (seg 4, 384 MiB, without it) */
static void test_embedded__kda_default_segments(void **state)
{
    (void)state;
    gen_host *h = gen_host_new(NULL);
    gen_tmpl *t = gen_tmpl_load(h, "kda_prefill");
    assert_non_null(t);
    gen_target tg;
    assert_int_equal(gen_target_init(&tg, "sm_90a", 0, NULL), 0);
    static const struct { const char *shape; int chunk, seg; } c[] = {
        {"n=1,t=1024,h=2,hv=2,dk=128,dv=128", 16, 8},    {"n=1,t=32768,h=8,hv=8,dk=128,dv=128", 32, 8},
        {"n=1,t=8192,h=16,hv=16,dk=128,dv=128", 32, 4},  {"n=2,t=4096,h=4,hv=4,dk=128,dv=128", 32, 8},
        {"n=1,t=8192,h=64,hv=64,dk=128,dv=128", 16, 1},  {"n=8,t=2048,h=16,hv=16,dk=128,dv=128", 16, 1},
        {"n=4096,t=64,h=2,hv=2,dk=64,dv=64", 16, 1},
        {"n=3,t=352,h=2,hv=2,dk=128,dv=128", 16, 8},     {"n=4,t=1024,h=8,hv=8,dk=128,dv=128", 16, 1},
        {"n=64,t=1024,h=2,hv=2,dk=128,dv=128", 16, 1},
        {"n=8,t=1024,h=2,hv=2,dk=128,dv=128", 16, 16},   {"n=64,t=256,h=8,hv=8,dk=128,dv=128", 16, 1},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; ++i) {
        gen_kvset shape = shape_of(c[i].shape), p;
        assert_int_equal(gen_tmpl_default(t, &shape, &tg.dev, &p), 0);
        if (gen_kv_int(&p, "chunk", 0) != c[i].chunk || gen_kv_int(&p, "seg", 0) != c[i].seg ||
            strcmp(gen_kv_str(&p, "impl") ? gen_kv_str(&p, "impl") : "", "wgmma"))
            fail_msg("%s: chunk %lld seg %lld impl %s, expected chunk %d seg %d wgmma", c[i].shape,
                     gen_kv_int(&p, "chunk", 0), gen_kv_int(&p, "seg", 0), gen_kv_str(&p, "impl"), c[i].chunk, c[i].seg);
    }
    gen_host_free(h);
}

/* a point the template calls invalid is refused before it is rendered: kda_prefill's long-call default
 * (seg > 1) with fused 1 merged over it (a GPU test once built it, and the kernel read segment slots the
 * one-kernel launch never wrote) */
static void test_embedded__build_refuses_an_invalid_merged_variant(void **state)
{
    gen_host *h = gen_host_new(NULL);
    gen_tmpl *t = gen_tmpl_load(h, "kda_prefill");
    assert_non_null(t);
    gen_target tg;
    assert_int_equal(gen_target_init(&tg, "sm_90a", 0, NULL), 0);
    gen_kvset shape = shape_of("n=1,t=16384,h=1,hv=4,dk=128,dv=128");
    gen_job j = job_of(t, &shape);
    assert_int_equal(gen_tmpl_default(t, &shape, &tg.dev, &j.params), 0);
    const long long seg = gen_kv_int(&j.params, "seg", 0);
    assert_true(seg > 1);
    assert_int_equal(gen_build_prepare(&j, &tg), 0);            /* the default itself builds */
    gen_job_free(&j);
    gen_kv_set_int(&j.params, "fused", 1);
    assert_int_equal(gen_build_prepare(&j, &tg), -1);
    assert_non_null(strstr(gen_host_errmsg(h), "not a valid variant"));
    char want[64];
    snprintf(want, sizeof want, "seg %lld only on the split", seg);
    assert_non_null(strstr(gen_host_errmsg(h), want));
    assert_non_null(strstr(gen_host_errmsg(h), "fused1"));
    gen_job_free(&j);
    gen_host_free(h);
}

/* kda_prefill impl wgmma (the sm_90a state pass): valid only on sm_90a, on the split path with the state transposed,
 * vs 64 or 128 and w 8, each refusal naming its reason; vs 128 only with it; its render replaces the mma state pass
 * (kf_pf_state_body) and the segment combine with its own (kf_pw_fetch_mc) and keeps the preparation (cut from
 * kda/prefill.cuh by the template); seg 2, 8, 16 only with it; impl mma renders no wgmma. */
/* NULL when params are a valid variant of t at shape on arch, else the template's refusal (in why) */
static const char *tmpl_refusal(gen_tmpl *t, const char *shape, const char *params, const char *arch, char *why,
                                size_t n)
{
    gen_device dev;
    gen_device_for_arch(&dev, arch);
    gen_kvset sh = shape_of(shape), fixed, p = shape_of(params);
    assert_int_equal(gen_tmpl_fixed(t, &sh, &fixed), 0);
    why[0] = 0;
    return gen_tmpl_valid(t, &fixed, &p, &dev, why, n) == 1 ? NULL : why;
}

static void test_embedded__kda_wgmma_scope_and_render(void **state)
{
    gen_host *h = gen_host_new(NULL);
    gen_tmpl *t = gen_tmpl_load(h, "kda_prefill");
    assert_non_null(t);
    const char *d128 = "n=1,t=8192,h=16,hv=16,dk=128,dv=128", *d64 = "n=1,t=8192,h=16,hv=16,dk=64,dv=64";
    char why[256];
    const char *ok[] = {"chunk=16,vs=64,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma",
                        "chunk=64,vs=128,w=8,tr=1,fused=0,mma=1,seg=4,impl=wgmma",
                        "chunk=32,vs=64,w=8,tr=1,fused=0,mma=1,seg=16,impl=wgmma"};
    for (int i = 0; i < 3; ++i)
        if (tmpl_refusal(t, d128, ok[i], "sm_90a", why, sizeof why))
            fail_msg("%s refused on sm_90a: %s", ok[i], why);
    if (tmpl_refusal(t, d64, "chunk=64,vs=64,w=8,tr=1,fused=0,mma=1,seg=4,impl=wgmma", "sm_90a", why, sizeof why))
        fail_msg("dk 64 chunk 64 vs 64 seg 4 refused on sm_90a: %s", why);
    static const struct { int d64; const char *params, *arch, *why; } no[] = {
        {0, "chunk=16,vs=64,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma", "sm_80", "needs the sm_90a target"},
        {0, "chunk=16,vs=64,w=8,tr=0,fused=0,mma=1,seg=1,impl=wgmma", "sm_90a", "takes tr 1, fused 0"},
        {0, "chunk=16,vs=64,w=8,tr=1,fused=1,mma=1,seg=1,impl=wgmma", "sm_90a", "takes tr 1, fused 0"},
        {0, "chunk=16,vs=32,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma", "sm_90a", "vs 64 or 128"},
        {0, "chunk=16,vs=64,w=4,tr=1,fused=0,mma=1,seg=1,impl=wgmma", "sm_90a", "takes w 8"},
        {0, "chunk=16,vs=128,w=8,tr=1,fused=0,mma=1,seg=1,impl=mma", "sm_90a", "only with impl wgmma"},
        {1, "chunk=16,vs=128,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma", "sm_90a", "vs 128 > dv 64"},
        {0, "chunk=16,vs=32,w=4,tr=1,fused=0,mma=1,seg=8,impl=mma", "sm_90a", "seg 8 only with impl wgmma"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; ++i) {
        const char *w = tmpl_refusal(t, no[i].d64 ? d64 : d128, no[i].params, no[i].arch, why, sizeof why);
        if (!w || !strstr(w, no[i].why))
            fail_msg("%s on %s: '%s', expected a refusal naming '%s'", no[i].params, no[i].arch, w ? w : "valid",
                     no[i].why);
    }
    gen_target tg;
    assert_int_equal(gen_target_init(&tg, "sm_90a", 0, NULL), 0);
    static const struct { const char *params; int wgmma; } r[] = {
        {"chunk=16,vs=128,w=8,tr=1,fused=0,mma=1,seg=4,impl=wgmma", 1},
        {"chunk=16,vs=64,w=8,tr=1,fused=0,mma=1,seg=8,impl=wgmma", 1},
        {"chunk=32,vs=64,w=8,tr=1,fused=0,mma=1,seg=1,impl=wgmma", 1},
        {"chunk=16,vs=32,w=4,tr=1,fused=0,mma=1,seg=4,impl=mma", 0},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; ++i) {
        gen_job j = {0};
        j.tmpl = t;
        gen_kvset sh = shape_of(d128);
        assert_int_equal(gen_tmpl_fixed(t, &sh, &j.fixed), 0);
        j.params = shape_of(r[i].params);
        assert_int_equal(gen_build_prepare(&j, &tg), 0);
        assert_int_equal(strstr(j.src, "kf_pw_state_body<0>") != NULL, r[i].wgmma);
        assert_int_equal(strstr(j.src, "kf_pf_state_body<0>") != NULL, !r[i].wgmma);
        assert_non_null(strstr(j.src, "kf_kda_prep(const kf_kda_params p)"));
        assert_non_null(strstr(j.src, "kf_kda_segcomb(const kf_kda_params p)"));   /* (compiled where seg > 1) */
        assert_int_equal(strstr(j.src, "kf_pw_img_store(") != NULL, r[i].wgmma);      /* the combine on wgmma */
        assert_int_equal(strstr(j.src, "wgmma.mma_async") != NULL, r[i].wgmma);
        gen_job_free(&j);
    }
    gen_host_free(h);
}

/* attn_prefill's sm_90a tiles and schedules: bm 192 (three consumers) only on wgmma_tma at head dim 64, sched persist
 * only on wgmma_tma; each refusal names what is wrong; the D 64 default is bm 192 with sched grid; persist renders
 * the persistent kernel */
static void test_embedded__prefill_tile_and_sched_scope(void **state)
{
    (void)state;
    gen_host *h = gen_host_new(NULL);
    gen_tmpl *t = gen_tmpl_load(h, "attn_prefill");
    assert_non_null(t);
    const char *d64 = "dtype=bf16,b=1,sq=4096,skv=4096,hq=32,hkv=8,d=64,causal=1";
    const char *d128 = "dtype=bf16,b=1,sq=4096,skv=4096,hq=32,hkv=8,d=128,causal=1";
    char why[256];
    static const struct { int d64; const char *params; } ok[] = {
        {1, "impl=wgmma_tma,bm=192,w=12,bn=128,stages=3,sched=grid"},
        {1, "impl=wgmma_tma,bm=192,w=12,bn=128,stages=2,sched=persist"},
        {0, "impl=wgmma_tma,bm=128,w=8,bn=128,stages=3,sched=persist"},
        {0, "impl=wgmma_pp,bm=128,w=8,bn=128,stages=3,sched=grid"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; ++i)
        if (tmpl_refusal(t, ok[i].d64 ? d64 : d128, ok[i].params, "sm_90a", why, sizeof why))
            fail_msg("%s refused: %s", ok[i].params, why);
    static const struct { int d64; const char *params, *arch, *why; } no[] = {
        {0, "impl=wgmma_tma,bm=192,w=12,bn=128,stages=2,sched=grid", "sm_90a",
         "bm 192 is impl wgmma_tma's tile at head dim 64"},
        {1, "impl=wgmma_pp,bm=192,w=12,bn=128,stages=2,sched=grid", "sm_90a", "got impl wgmma_pp, head dim 64, w 12"},
        {1, "impl=wgmma_tma,bm=192,w=8,bn=128,stages=2,sched=grid", "sm_90a", "w 8"},
        {1, "impl=wgmma_tma,bm=128,w=12,bn=128,stages=2,sched=grid", "sm_90a", "bm 192 and w 12"},
        {0, "impl=wgmma_pp,bm=128,w=8,bn=128,stages=2,sched=persist", "sm_90a", "name sched=grid with it"},
        {0, "impl=mma,bm=128,w=8,bn=128,stages=2,sched=persist", "sm_90a", "impl mma takes sched grid"},
        {1, "impl=mma,bm=192,w=12,bn=64,stages=2,sched=grid", "sm_90a", "impl mma takes bm 64 or 128"},
        {1, "impl=wgmma_tma,bm=192,w=12,bn=128,stages=2,sched=grid", "sm_80", "needs the sm_90a target"},
    };
    for (size_t i = 0; i < sizeof no / sizeof no[0]; ++i) {
        const char *w = tmpl_refusal(t, no[i].d64 ? d64 : d128, no[i].params, no[i].arch, why, sizeof why);
        if (!w || !strstr(w, no[i].why))
            fail_msg("%s on %s: '%s', expected a refusal naming '%s'", no[i].params, no[i].arch, w ? w : "valid",
                     no[i].why);
    }
    gen_device dev;
    assert_int_equal(gen_device_for_arch(&dev, "sm_90a"), 0);
    gen_kvset sh = shape_of(d64), params;
    assert_int_equal(gen_tmpl_default(t, &sh, &dev, &params), 0);
    assert_int_equal(gen_kv_int(&params, "bm", 0), 192);
    assert_string_equal(gen_kv_str(&params, "sched"), "grid");
    gen_target tg;
    assert_int_equal(gen_target_init(&tg, "sm_90a", 0, NULL), 0);
    for (int persist = 0; persist < 2; ++persist) {
        gen_job j = {0};
        j.tmpl = t;
        assert_int_equal(gen_tmpl_fixed(t, &sh, &j.fixed), 0);
        j.params = shape_of(persist ? "impl=wgmma_tma,bm=192,w=12,bn=128,stages=3,sched=persist"
                                    : "impl=wgmma_tma,bm=192,w=12,bn=128,stages=3,sched=grid");
        assert_int_equal(gen_build_prepare(&j, &tg), 0);
        assert_non_null(strstr(j.src, persist ? "#define KF_SM90_PERSIST 1" : "#define KF_SM90_PERSIST 0"));
        assert_non_null(strstr(j.src, "#define KF_SM90_BM 192"));
        gen_job_free(&j);
    }
    gen_host_free(h);
}

/* attn_combine (no sweep has it): its default is valid for every dv it accepts (dv 72 once gave rows 7) */
static void test_embedded__combine_default_is_valid_for_every_dv(void **state)
{
    gen_host *h = gen_host_new(NULL);
    gen_tmpl *t = gen_tmpl_load(h, "attn_combine");
    assert_non_null(t);
    gen_device dev;
    assert_int_equal(gen_device_for_arch(&dev, "sm_80"), 0);
    for (int dv = 8; dv <= 1024; dv += 8) {
        gen_kvset s, fixed, params;
        char why[256] = "";
        gen_kv_clear(&s);
        gen_kv_set_str(&s, "dtype", "bf16");
        gen_kv_set_int(&s, "b", 2);
        gen_kv_set_int(&s, "sq", 1);
        gen_kv_set_int(&s, "hq", 8);
        gen_kv_set_int(&s, "dv", dv);
        assert_int_equal(gen_tmpl_fixed(t, &s, &fixed), 0);
        assert_int_equal(gen_tmpl_default(t, &s, &dev, &params), 0);
        if (gen_tmpl_check_params(t, &params) || gen_tmpl_valid(t, &fixed, &params, &dev, why, sizeof why) != 1)
            fail_msg("attn_combine dv %d: the default is not valid: %s%s", dv, why, gen_host_errmsg(h));
    }
    gen_host_free(h);
}

static void test_kernels__list_is_parsed_back(void **state)
{
    gen_kernel k[2] = {{"kf_main", 256, 49152}, {"kf_combine", 128, 0}}, back[4];
    char text[256];
    gen_kernels_format(k, 2, text, sizeof text);
    assert_string_equal(text, "kf_main/256/49152,kf_combine/128/0");
    assert_int_equal(gen_kernels_parse(text, back, 4), 2);
    assert_string_equal(back[1].name, "kf_combine");
    assert_int_equal(back[0].smem, 49152);
    assert_int_equal(gen_kernels_parse("nonsense", back, 4), -1);
    assert_int_equal(back[0].pdl + back[1].pdl, 0);
    /* a kernel launched behind its predecessor (programmatic dependent launch) carries "/pdl"; nothing else may follow */
    k[1].pdl = 1;
    gen_kernels_format(k, 2, text, sizeof text);
    assert_string_equal(text, "kf_main/256/49152,kf_combine/128/0/pdl");
    assert_int_equal(gen_kernels_parse(text, back, 4), 2);
    assert_int_equal(back[0].pdl, 0);
    assert_int_equal(back[1].pdl, 1);
    assert_int_equal(back[1].smem, 0);
    assert_int_equal(gen_kernels_parse("kf_main/256/0/pd", back, 4), -1);
    assert_int_equal(gen_kernels_parse("kf_main/256/0/pdl/x", back, 4), -1);
}

/* The templates mark their kernels for dependent launch on sm_90+ only (the wait is compiled in there alone) */
static void test_kernels__pdl_marked_on_sm90_only(void **state)
{
    gen_host *h = gen_host_new(NULL);
    gen_tmpl *t = gen_tmpl_load(h, "attn_decode");
    assert_non_null(t);
    gen_kvset s = shape_of("dtype=bf16,b=1,sq=1,hq=32,hkv=8,d=128,skv=131072,causal=0"), fixed, params;
    const char *arch[2] = {"sm_90a", "sm_80"};
    for (int a = 0; a < 2; a++) {
        gen_device dev;
        assert_int_equal(gen_device_for_arch(&dev, arch[a]), 0);
        assert_int_equal(gen_tmpl_fixed(t, &s, &fixed), 0);
        assert_int_equal(gen_tmpl_default(t, &s, &dev, &params), 0);
        gen_kernel k[4];
        int n = 0;
        assert_int_equal(gen_tmpl_kernels(t, &fixed, &params, &dev, k, 4, &n), 0);
        assert_int_equal(n, 2);   /* B1 128K splits: the decode and the combine */
        for (int i = 0; i < n; i++)
            assert_int_equal(k[i].pdl, a == 0);
    }
    gen_host_free(h);
}

static void test_json__escapes_quotes_backslashes_and_controls(void **state)
{
    char b[64];
    assert_string_equal(gen_json_str(b, sizeof b, "sm_90a"), "\"sm_90a\"");
    assert_string_equal(gen_json_str(b, sizeof b, "a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
    assert_string_equal(gen_json_str(b, sizeof b, "\b\f\n\r\t"), "\"\\b\\f\\n\\r\\t\"");
    assert_string_equal(gen_json_str(b, sizeof b, "\x01\x1f\x7f"), "\"\\u0001\\u001f\x7f\"");
    assert_string_equal(gen_json_str(b, sizeof b, "H200 \xc3\xa9"), "\"H200 \xc3\xa9\"");
    assert_string_equal(gen_json_str(b, sizeof b, ""), "\"\"");
    assert_string_equal(gen_json_str(b, sizeof b, NULL), "null");
}

static void test_json__truncates_whole_escapes_and_keeps_the_quote(void **state)
{
    char b[8];
    assert_string_equal(gen_json_str(b, sizeof b, "abcdefghij"), "\"abcde\"");
    assert_string_equal(gen_json_str(b, sizeof b, "abcd\n"), "\"abcd\"");      /* not "abcd\ */
    assert_string_equal(gen_json_str(b, sizeof b, "ab\x01"), "\"ab\"");        /* not half of \u0001 */
    assert_string_equal(gen_json_str(b, sizeof b, "abcd\xc3\xa9"), "\"abcd\""); /* not half of a UTF-8 sequence */
    assert_string_equal(gen_json_str(b, 5, "abc"), "\"ab\"");
}

int main(void)
{
    unsetenv("KFORGE_TEMPLATE_DIR");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv__parse_format_and_key_are_sorted),
        cmocka_unit_test(test_template__loads_and_hashes),
        cmocka_unit_test(test_template__variant_key_is_stable_and_sorted),
        cmocka_unit_test(test_template__enumerates_with_constraints),
        cmocka_unit_test(test_template__shape_fields_are_checked),
        cmocka_unit_test(test_sandbox__refuses_os_io_require_load),
        cmocka_unit_test(test_sandbox__refuses_bytecode),
        cmocka_unit_test(test_sandbox__stops_endless_loops),
        cmocka_unit_test(test_sandbox__budget_survives_pcall),
        cmocka_unit_test(test_sandbox__bounds_pattern_matching),
        cmocka_unit_test(test_sandbox__refuses_gc_finalizers),
        cmocka_unit_test(test_template__non_string_errors_are_named),
        cmocka_unit_test(test_template__library_errors_name_the_template_and_shape),
        cmocka_unit_test(test_template__errors_name_file_and_line),
        cmocka_unit_test(test_template__fragment_must_be_listed),
        cmocka_unit_test(test_template__hash_changes_with_a_fragment),
        cmocka_unit_test(test_import__runs_once_per_host_and_is_shared),
        cmocka_unit_test(test_import__must_be_listed_in_includes),
        cmocka_unit_test(test_import__errors_name_the_imported_file_and_line),
        cmocka_unit_test(test_import__hash_changes_with_an_imported_file),
        cmocka_unit_test(test_render__is_pure_and_has_a_banner),
        cmocka_unit_test(test_nvrtc__compiles_and_reports_resources),
        cmocka_unit_test(test_nvrtc__errors_carry_the_log_and_variant),
        cmocka_unit_test(test_nvrtc__ptxas_log_parse),
        cmocka_unit_test(test_nvrtc__includes_only_listed_fragments),
        cmocka_unit_test(test_build__binary_must_hold_every_kernel),
        cmocka_unit_test(test_build__second_compile_is_a_cache_hit),
        cmocka_unit_test(test_build__cache_key_covers_hash_source_arch_and_nvrtc),
        cmocka_unit_test(test_embedded__every_family_loads),
        cmocka_unit_test(test_isolation__poisoning_template_cannot_reach_another_family),
        cmocka_unit_test(test_build__key_follows_the_rendered_source),
        cmocka_unit_test(test_embedded__every_sweep_default_is_valid),
        cmocka_unit_test(test_embedded__combine_default_is_valid_for_every_dv),
        cmocka_unit_test(test_embedded__kda_default_segments),
        cmocka_unit_test(test_embedded__build_refuses_an_invalid_merged_variant),
        cmocka_unit_test(test_embedded__kda_wgmma_scope_and_render),
        cmocka_unit_test(test_embedded__prefill_tile_and_sched_scope),
        cmocka_unit_test(test_kernels__list_is_parsed_back),
        cmocka_unit_test(test_kernels__pdl_marked_on_sm90_only),
        cmocka_unit_test(test_json__escapes_quotes_backslashes_and_controls),
        cmocka_unit_test(test_json__truncates_whole_escapes_and_keeps_the_quote),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
