/* tests/cpu/test_hostile.c: the hostile-template set (issue 14): every case must end in a refusal naming the cause, none may crash, hang or succeed */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gen/build.h"
#include "gen/sweep.h"
#include "gen/template.h"

#define HANG_S 20.0    /* a case still running after this is a hang (the budget stops Lua in ~2 s) */

/* One case: a template 'h' made of the default parts below with some replaced (or a whole
 * file), run through load, fixed, default, valid, render, kernels and an NVRTC compile; or a
 * sweep file; or a poisoner followed by a clean template whose render must not change. */
typedef struct hcase {
    const char *name;
    const char *top;       /* code before `return {` */
    const char *fixed, *valid, *dflt, *render, *kernels, *includes;
    const char *file;      /* the whole templates/h.lua instead */
    const char *sweep;     /* the whole templates/sweeps/hs.lua: gen_sweep_load must refuse it */
    int poison;            /* 1: h is a poisoner; the victim's render must equal a clean host's */
    const char *needle;    /* the refusal's message must hold this */
} hcase;

static const hcase cases[] = {
    /* no way out of the sandbox */
    {"os.execute", .top = "os.execute('touch /tmp/kf_hostile_pwned')", .needle = "global 'os'"},
    {"io.open", .top = "local f = io.open('/etc/passwd')", .needle = "global 'io'"},
    {"require", .top = "require('os')", .needle = "global 'require'"},
    {"load text", .top = "load('return 1')()", .needle = "global 'load'"},
    {"dofile", .top = "dofile('/etc/passwd')", .needle = "global 'dofile'"},
    {"loadfile", .top = "loadfile('/etc/passwd')", .needle = "global 'loadfile'"},
    {"string.dump", .top = "local b = string.dump(function() end)", .needle = "field 'dump'"},
    {"debug library", .top = "debug.sethook()", .needle = "global 'debug'"},
    {"package.loadlib", .top = "package.loadlib('libc.so.6', 'system')", .needle = "global 'package'"},
    {"collectgarbage", .top = "collectgarbage('stop')", .needle = "global 'collectgarbage'"},
    {"coroutine", .top = "coroutine.wrap(function() end)()", .needle = "global 'coroutine'"},
    {"rawset", .top = "rawset(_G, 'x', 1)", .needle = "global 'rawset'"},
    {"bytecode file", .file = "\x1bLua\x54\x01\x19\x93\r\n\x1a\ngarbage", .needle = "binary"},
    {"import outside templates", .top = "import('../../../../etc/passwd.lua')", .needle = "bad template path"},
    {"import absolute", .top = "import('/etc/passwd.lua')", .needle = "bad template path"},
    {"fragment not listed", .render = "return fragment('/etc/passwd')", .needle = "not listed in includes"},
    {"includes a host file", .includes = "'/etc/passwd'", .needle = "bad template path '/etc/passwd'"},
    /* the budget: loops, and the three ways around the hook */
    {"endless loop", .top = "while true do end", .needle = "budget exceeded"},
    {"loop around pcall", .top = "while true do pcall(function() while true do end end) end", .needle = "budget exceeded"},
    {"loop in xpcall handler", .top = "while true do xpcall(error, function() while true do end end) end",
     .needle = "budget exceeded"},
    {"backtracking pattern", .top = "local x = string.rep('a', 5000):find('.-.-.-.-.-b')", .needle = "string.find"},
    {"backtracking gmatch", .top = "for x in string.rep('a', 9000):gmatch('.-.-b') do end", .needle = "string.gmatch"},
    {"__gc finalizer loop", .top = "setmetatable({}, { __gc = function() while true do end end })", .needle = "__gc"},
    {"string.rep of nothing", .top = "local x = string.rep('', 1 << 62)", .needle = "string.rep"},
    {"string.rep of 1 GiB", .top = "local x = string.rep('x', 1 << 30)", .needle = "string.rep"},
    {"table.move of 2^40", .top = "table.move({}, 1, 1 << 40, 2)", .needle = "table.move"},
    {"__close loop", .top = "do local x <close> = setmetatable({}, { __close = function() while true do end end }) end",
     .needle = "budget exceeded"},
    {"__tostring loop", .top = "tostring(setmetatable({}, { __tostring = function() while true do end end }))",
     .needle = "budget exceeded"},
    {"sort comparator loop", .top = "table.sort({3, 2, 1}, function(a, b) while true do end end)", .needle = "budget exceeded"},
    {"_G __index loop", .top = "setmetatable(_G, { __index = function() while true do end end })\nlocal x = nothing_here",
     .needle = "budget exceeded"},
    {"render loops", .render = "while true do end", .needle = "budget exceeded"},
    {"valid loops around pcall", .valid = "while true do pcall(function() while true do end end) end", .needle = "budget exceeded"},
    {"default backtracks", .dflt = "return { w = #(string.rep('ab', 4000):match('.-.-.-c') or '') }", .needle = "string.match"},
    /* resources */
    {"memory bomb", .top = "local t = {} for i = 1, 1e9 do t[i] = i end", .needle = "not enough memory"},
    {"memory held, then entries", .top = "big = {} for i = 1, 245 do big[i] = string.rep(string.char(65 + i % 26), 1 << 20) end",
     .fixed = "return { x = #string.rep('y', 20 << 20) }", .needle = "not enough memory"},
    {"deep Lua recursion", .top = "local function f() return 1 + f() end f()", .needle = "stack overflow"},
    {"deep C recursion", .top = "local function f(s) return (s:gsub('.', f)) end f('ab')", .needle = "stack overflow"},
    {"huge render", .render = "return string.rep('/* x */\\n', 2 * 1024 * 1024)", .needle = "render() returned"},
    {"render not a string", .render = "return {}", .needle = "render() must return a string"},
    {"render with NUL", .render = "return 'a\\0b'", .needle = "NUL byte"},
    /* errors that are not strings, metamethods on what the host reads */
    {"error({})", .top = "error({})", .needle = "templates/h.lua:1: error object is a table"},
    {"error()", .fixed = "error()", .needle = "error object is a nil"},
    {"returned table errs on read", .file = "return setmetatable({}, { __index = function() error('boom') end })",
     .needle = "boom"},
    {"returned table loops on read", .file = "return setmetatable({}, { __index = function() while true do end end })",
     .needle = "budget exceeded"},
    {"kernels list errs on #", .kernels = "return setmetatable({}, { __len = function() error('lenboom') end })",
     .needle = "lenboom"},
    {"kernels out of range", .kernels = "return { { name = 'kf_h', threads = 1 << 40, smem = 0 } }", .needle = "threads (1..1024)"},
    {"string.format width", .top = "local x = string.format('%99999d', 1)", .needle = "invalid conversion"},
    /* what reaches NVRTC */
    {"include /etc/passwd", .render = "return '#include \"/etc/passwd\"\\n' .. fragment('h/body.cuh')",
     .needle = "includes '/etc/passwd': an absolute path"},
    {"include ..", .render = "return '#include \"../../../../etc/passwd\"\\n' .. fragment('h/body.cuh')", .needle = "'..'"},
    {"include a system header", .render = "return '#include <stdio.h>\\n' .. fragment('h/body.cuh')",
     .needle = "not one of the template's fragments"},
    {"computed include", .render = "return '#define F \"/etc/passwd\"\\n#include F\\n' .. fragment('h/body.cuh')",
     .needle = "computed include"},
    {"spliced include", .render = "return '#inc\\\\\\nlude \"/etc/passwd\"\\n' .. fragment('h/body.cuh')",
     .needle = "absolute path"},
    {"empty render", .render = "return ''", .needle = "lacks kernel 'kf_h'"},
    {"kernel not in the source", .kernels = "return { { name = 'kf_h', threads = 32, smem = 0 }, "
                                            "{ name = 'kf_missing', threads = 32, smem = 0 } }",
     .needle = "lacks kernel 'kf_missing'"},
    {"no kernels", .kernels = "return {}", .needle = "names no kernel"},
    /* sweep files */
    {"sweep loops", .sweep = "while true do pcall(function() while true do end end) end", .needle = "budget exceeded"},
    {"sweep os", .sweep = "os.exit(3)", .needle = "global 'os'"},
    {"sweep table errs on read", .sweep = "return setmetatable({}, { __index = function() error('sweepboom') end })",
     .needle = "sweepboom"},
    {"sweep shapes # loops", .sweep = "return { shapes = setmetatable({}, { __len = function() while true do end end }) }",
     .needle = "budget exceeded"},
    /* poisoning what another template renders */
    {"poison fragment", .poison = 1, .top = "local real = fragment\n"
                                           "fragment = function(p) return '#define KF_POISONED 1\\n' .. real(p) end"},
    {"poison a library table", .poison = 1, .top = "local L = import('lib/x.lua')\nL.body = function() return 'KF_POISONED' end"},
    {"poison the string library", .poison = 1, .top = "getmetatable('').__index.format = function() return 'KF_POISONED' end\n"
                                                     "string.rep = function() return 'KF_POISONED' end"},
    {"poison subst and table.concat", .poison = 1, .top = "subst = function() return 'KF_POISONED' end\n"
                                                         "table.concat = function() return 'KF_POISONED' end"},
};

static const char *body_cuh = "extern \"C\" __global__ void kf_h(float *x) { x[threadIdx.x] += 1.0f; }\n";
static const char *lib_x = "local L = {}\nfunction L.body() return fragment('h/body.cuh') end\nreturn L\n";
/* the victim of the poisoning cases: uses fragment, the library, subst, string and table functions */
static const char *victim =
    "local L = import('lib/x.lua')\n"
    "return { family = 'v', shape = {}, params = { w = {1} }, includes = { 'h/body.cuh', 'lib/x.lua' },\n"
    "  fixed = function(s) return {} end, valid = function() return true end,\n"
    "  default = function() return { w = 1 } end,\n"
    "  render = function(p, f) return subst('#define W ${w}\\n', p) .. string.format('// %d\\n', p.w)\n"
    "    .. string.rep('/', 3) .. table.concat({'\\n'}) .. L.body() .. fragment('h/body.cuh') end,\n"
    "  kernels = function() return { { name = 'kf_h', threads = 32, smem = 0 } } end }\n";

static void write_file(const char *dir, const char *rel, const char *text, size_t len)
{
    char path[600], cmd[700];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    if (system(cmd) != 0)
        exit(90);
    FILE *f = fopen(path, "wb");
    if (!f)
        exit(91);
    fwrite(text, 1, len, f);
    fclose(f);
}

static void write_text(const char *dir, const char *rel, const char *text) { write_file(dir, rel, text, strlen(text)); }

static void write_template(const char *dir, const hcase *c)
{
    if (c->file) {
        write_text(dir, "h.lua", c->file);
        return;
    }
    char *t = malloc(1 << 16);
    snprintf(t, 1 << 16,
             "%s\nreturn { family = 'h', shape = {}, params = { w = {1} },\n"
             "  includes = { 'h/body.cuh', 'lib/x.lua'%s%s },\n"
             "  fixed = function(s) %s end,\n  valid = function(p, f, dev) %s end,\n"
             "  default = function(s, dev) %s end,\n  render = function(p, f) %s end,\n"
             "  kernels = function(p, f, dev) %s end }\n",
             c->top ? c->top : "", c->includes ? ", " : "", c->includes ? c->includes : "",
             c->fixed ? c->fixed : "return {}", c->valid ? c->valid : "return true",
             c->dflt ? c->dflt : "return { w = 1 }", c->render ? c->render : "return fragment('h/body.cuh')",
             c->kernels ? c->kernels : "return { { name = 'kf_h', threads = 32, smem = 0 } }");
    write_text(dir, "h.lua", t);
    free(t);
}

/* Renders the victim in host h; malloc'd source or NULL. */
static char *render_victim(gen_host *h)
{
    gen_tmpl *v = gen_tmpl_load(h, "v");
    gen_kvset fixed, params, shape;
    gen_kv_clear(&shape);
    char *src = NULL;
    if (!v || gen_tmpl_fixed(v, &shape, &fixed) || gen_tmpl_default(v, &shape, NULL, &params) ||
        gen_tmpl_render(v, &fixed, &params, &src))
        return NULL;
    return src;
}

/* In the child: 0 refused (message in msg), 1 accepted. */
static int run_case(const char *dir, const hcase *c, char *msg, size_t n)
{
    gen_host *h = gen_host_new(dir);
    gen_target tg;
    gen_target_init(&tg, "sm_80", 0, NULL);
    if (c->sweep) {
        gen_sweep sw;
        int rc = gen_sweep_load(h, "hs", &sw);
        snprintf(msg, n, "%s", rc ? gen_host_errmsg(h) : "sweep loaded");
        if (!rc)
            gen_sweep_free(&sw);
        return rc ? 0 : 1;
    }
    gen_tmpl *t = gen_tmpl_load(h, "h");
    if (!t) {
        snprintf(msg, n, "%s", gen_host_errmsg(h));
        return 0;
    }
    if (c->poison) {
        /* refused means: the poisoner's own render ran, and the victim renders as on a clean host */
        gen_host *clean = gen_host_new(dir);
        char *a = render_victim(h), *b = render_victim(clean);
        int same = a && b && !strcmp(a, b) && !strstr(a, "KF_POISONED");
        snprintf(msg, n, "%s", same ? "victim unaffected" : a ? "victim's render changed" : gen_host_errmsg(h));
        free(a);
        free(b);
        gen_host_free(clean);
        return same ? 0 : 1;
    }
    gen_job j = {0};
    gen_kvset shape;
    gen_kv_clear(&shape);
    j.tmpl = t;
    if (gen_tmpl_fixed(t, &shape, &j.fixed) || gen_tmpl_default(t, &shape, &tg.dev, &j.params) ||
        gen_tmpl_valid(t, &j.fixed, &j.params, &tg.dev, NULL, 0) != 1 || gen_build_prepare(&j, &tg)) {
        snprintf(msg, n, "%s", gen_host_errmsg(h));
        return 0;
    }
    char dberr[256];
    int failed = gen_build_run(&j, 1, 1, NULL, &tg, NULL, NULL, dberr, sizeof dberr);
    snprintf(msg, n, "%s", failed ? j.err : "compiled");
    gen_job_free(&j);
    return failed ? 0 : 1;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void test_hostile__every_case_is_refused(void **state)
{
    int n = (int)(sizeof cases / sizeof cases[0]);
    int refused = 0, crashes = 0, hangs = 0, accepted = 0, wrong = 0;
    for (int i = 0; i < n; i++) {
        const hcase *c = &cases[i];
        char dir[64];
        snprintf(dir, sizeof dir, "/tmp/kf_hostile_XXXXXX");
        assert_non_null(mkdtemp(dir));
        write_text(dir, "h/body.cuh", body_cuh);
        write_text(dir, "lib/x.lua", lib_x);
        write_text(dir, "v.lua", victim);
        if (c->sweep)
            write_text(dir, "sweeps/hs.lua", c->sweep);
        else
            write_template(dir, c);
        int fd[2];
        assert_int_equal(pipe(fd), 0);
        double t0 = now_s();
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fd[0]);
            char msg[2048];
            int rc = run_case(dir, c, msg, sizeof msg);
            if (write(fd[1], msg, strlen(msg) + 1) < 0)
                _exit(92);
            _exit(rc);
        }
        close(fd[1]);
        int status = 0, done = 0;
        while (!(done = waitpid(pid, &status, WNOHANG) == pid) && now_s() - t0 < HANG_S)
            usleep(20000);
        if (!done) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
        char msg[2048] = "";
        ssize_t got = read(fd[0], msg, sizeof msg - 1);
        msg[got > 0 ? got : 0] = 0;
        close(fd[0]);
        double dt = now_s() - t0;
        const char *verdict;
        if (!done) {
            hangs++;
            verdict = "HANG";
        } else if (WIFSIGNALED(status)) {
            crashes++;
            verdict = "CRASH";
        } else if (WEXITSTATUS(status) == 1) {
            accepted++;
            verdict = "ACCEPTED";
        } else if (WEXITSTATUS(status) != 0 || (c->needle && !strstr(msg, c->needle))) {
            wrong++;
            verdict = "WRONG MESSAGE";
        } else {
            refused++;
            verdict = "refused";
        }
        printf("  %-30s %-13s %5.1f s  %.160s\n", c->name, verdict, dt, msg);
        if (strcmp(verdict, "refused") && c->needle)
            printf("  %-30s (wanted: %s)\n", "", c->needle);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        assert_int_equal(system(cmd), 0);
    }
    printf("hostile templates: %d tried, %d refused, %d crashes, %d hangs, %d accepted, %d wrong messages\n", n,
           refused, crashes, hangs, accepted, wrong);
    assert_int_equal(access("/tmp/kf_hostile_pwned", F_OK), -1);
    assert_int_equal(refused, n);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile__every_case_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
