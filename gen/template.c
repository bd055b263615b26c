/* gen/template.c: Lua templates in a sandbox: load, validate, enumerate, render, kernel facts */
#include "gen/template.h"
#include "gen/hash.h"
#include "gen/sandbox.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEMPLATES 32
#define MAX_INCLUDES 32
#define MAX_IMPORTS 16                      /* library files one state has run (import()) */
#define MAX_IMPORT_DEPS 8                   /* imports made by one library file */
#define RENDER_MAX (8u << 20)               /* bytes a render may return */

/* A library file run by import(): its value, kept in the registry, and the imports
 * it made itself (a template importing it must list those too). */
struct gen_import {
    char path[96];
    int ref;
    int n_deps;
    char deps[MAX_IMPORT_DEPS][96];
};

/* One template's own sandboxed state (or a sweep file's) and the library files it has
 * imported: nothing one template does to its globals or to a library table can reach
 * what another renders. */
typedef struct gen_env {
    gen_sandbox *sb;
    gen_host *host;
    gen_tmpl *tmpl;                        /* NULL: a sweep file (imports anything) */
    char path[300];                        /* the file that runs in it */
    int loading;                           /* the template's file itself is running */
    int n_imports;
    struct gen_import imports[MAX_IMPORTS];
    struct gen_import *running;            /* library file whose chunk is running */
} gen_env;

struct gen_tmpl {
    gen_host *host;
    gen_env *env;
    char family[64];
    char path[96];
    char doc[256];
    char hash[33];
    char *text;
    int ref;                               /* the returned table in its state's registry */
    int n_includes;
    char includes[MAX_INCLUDES][96];
    char *include_text[MAX_INCLUDES];      /* the fragments (not .lua files), NVRTC's headers */
    int n_imported;                        /* imports made while the file itself ran */
    char imported[MAX_INCLUDES][96];
    gen_space space;
    gen_kvset shape;                       /* declared shape fields: name -> type */
};

struct gen_host {
    gen_source src;
    char err[2048];
    int n;
    gen_tmpl *tmpl[MAX_TEMPLATES];
};

static int fail(gen_host *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, sizeof h->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- sandboxes ---------------------------------------------------------------- */

static gen_env *env_of(lua_State *L) { return gen_sandbox_user(L); }

static int l_fragment(lua_State *L);
static int l_import(lua_State *L);
static int l_cdiv(lua_State *L);
static int l_subst(lua_State *L);

static gen_env *env_new(gen_host *h, gen_tmpl *t, const char *path)
{
    gen_env *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->host = h;
    e->tmpl = t;
    snprintf(e->path, sizeof e->path, "%s", path);
    e->sb = gen_sandbox_new(e);
    if (!e->sb) {
        free(e);
        return NULL;
    }
    lua_State *L = gen_sandbox_lua(e->sb);
    lua_register(L, "fragment", l_fragment);
    lua_register(L, "import", l_import);
    lua_register(L, "cdiv", l_cdiv);
    lua_register(L, "subst", l_subst);
    return e;
}

static void env_free(gen_env *e)
{
    if (!e)
        return;
    gen_sandbox_free(e->sb);
    free(e);
}

/* One entry into Lua (gen/sandbox.c): body in protected mode under a fresh budget. what
 * ("render()") prefixes a message that does not already name a file and line. */
static int env_run(gen_env *e, const char *what, int (*body)(lua_State *L, void *arg), void *arg)
{
    char err[sizeof e->host->err];
    int rc = gen_sandbox_run(e->sb, body, arg, err, sizeof err);
    if (rc && err[0]) {
        /* an error located in the file itself reads "file:line: message"; any other (a library
         * file's line, or none) is prefixed with the file and the entry that ran into it */
        size_t pl = strlen(e->path);
        if (what && !(strncmp(err, e->path, pl) == 0 && err[pl] == ':'))
            fail(e->host, "%s: %s: %s", e->path, what, err);
        else
            fail(e->host, "%s", err);
    }
    return rc;
}

/* fragment(path): text of a file the running template lists in `includes`. */
static int l_fragment(lua_State *L)
{
    gen_env *e = env_of(L);
    const char *path = luaL_checkstring(L, 1);
    gen_tmpl *t = e->loading ? NULL : e->tmpl;
    int listed = 0;
    for (int i = 0; t && i < t->n_includes; i++)
        listed |= strcmp(t->includes[i], path) == 0;
    if (!listed)
        return luaL_error(L, "fragment '%s' is not listed in includes", path);
    char *data = NULL, err[512];
    size_t len = 0;
    if (gen_source_read(&e->host->src, path, &data, &len, err, sizeof err))
        return luaL_error(L, "%s", err);
    lua_pushlstring(L, data, len);  /* a memory error here leaks data: only a state at its limit gets there */
    free(data);
    return 1;
}

static int listed_in(const gen_tmpl *t, const char *path)
{
    for (int i = 0; i < t->n_includes; i++)
        if (strcmp(t->includes[i], path) == 0)
            return 1;
    return 0;
}

/* Notes that im (and what it imports) was imported while a template's file ran:
 * checked against its includes once the file has returned them. */
static void note_import(gen_env *e, const struct gen_import *im, int depth)
{
    gen_tmpl *t = e->loading ? e->tmpl : NULL;
    if (!t || depth > MAX_IMPORTS)
        return;
    int seen = 0;
    for (int i = 0; i < t->n_imported; i++)
        seen |= strcmp(t->imported[i], im->path) == 0;
    if (!seen && t->n_imported < MAX_INCLUDES)
        snprintf(t->imported[t->n_imported++], sizeof t->imported[0], "%s", im->path);
    for (int d = 0; d < im->n_deps; d++)
        for (int j = 0; j < e->n_imports; j++)
            if (strcmp(e->imports[j].path, im->deps[d]) == 0)
                note_import(e, &e->imports[j], depth + 1);
}

/* import(path): runs templates/<path> once per state in the same sandbox and returns
 * its value (a table). A template must list path in `includes`, so that the
 * template hash covers it. Sweep files may import anything under templates/. */
static int l_import(lua_State *L)
{
    gen_env *e = env_of(L);
    const char *path = luaL_checkstring(L, 1);
    if (strlen(path) >= sizeof e->imports[0].path || strlen(path) < 5 ||
        strcmp(path + strlen(path) - 4, ".lua") != 0)
        return luaL_error(L, "import '%s': the path of a .lua file under templates/ is needed", path);
    gen_tmpl *t = e->loading ? NULL : e->tmpl;
    if (t && !listed_in(t, path))
        return luaL_error(L, "import '%s' is not listed in the includes of %s", path, t->path);
    if (e->running) {                       /* a library importing another one */
        struct gen_import *r = e->running;
        int seen = 0;
        for (int i = 0; i < r->n_deps; i++)
            seen |= strcmp(r->deps[i], path) == 0;
        if (!seen && r->n_deps >= MAX_IMPORT_DEPS)
            return luaL_error(L, "import '%s': %s imports more than %d files", path, r->path,
                              MAX_IMPORT_DEPS);
        if (!seen)
            snprintf(r->deps[r->n_deps++], sizeof r->deps[0], "%s", path);
    }
    for (int i = 0; i < e->n_imports; i++) {
        struct gen_import *im = &e->imports[i];
        if (strcmp(im->path, path) != 0)
            continue;
        if (im->ref == LUA_NOREF)
            return luaL_error(L, "import '%s': imports itself (through %s)", path,
                              e->running ? e->running->path : path);
        note_import(e, im, 0);
        lua_rawgeti(L, LUA_REGISTRYINDEX, im->ref);
        return 1;
    }
    if (e->n_imports >= MAX_IMPORTS)
        return luaL_error(L, "import '%s': more than %d imported files", path, MAX_IMPORTS);
    char *text = NULL, err[512], chunk[128];
    size_t len = 0;
    if (gen_source_read(&e->host->src, path, &text, &len, err, sizeof err))
        return luaL_error(L, "import: %s", err);
    snprintf(chunk, sizeof chunk, "@templates/%s", path);
    int rc = luaL_loadbufferx(L, text, len, chunk, "t");
    free(text);
    if (rc != LUA_OK)
        return lua_error(L);                /* "templates/lib/x.lua:LINE: message" */
    struct gen_import *im = &e->imports[e->n_imports++];
    memset(im, 0, sizeof *im);
    snprintf(im->path, sizeof im->path, "%s", path);
    im->ref = LUA_NOREF;                    /* running: a cycle finds it so */
    struct gen_import *outer = e->running;
    e->running = im;
    rc = lua_pcall(L, 0, 1, 0);
    e->running = outer;
    gen_sandbox_recheck(L);                 /* a spent budget is not the library's error */
    if (rc == LUA_OK && !lua_istable(L, -1)) {
        lua_pushfstring(L, "templates/%s: must return a table, returned %s", path,
                        luaL_typename(L, -1));  /* the value: the top until pushed */
        rc = LUA_ERRRUN;
    }
    if (rc != LUA_OK) {
        /* not cached: the next import reports it again. Files it imported itself
         * were appended after it and stay; files still running come before it. */
        int idx = (int)(im - e->imports);
        memmove(im, im + 1, (size_t)(e->n_imports - idx - 1) * sizeof *im);
        e->n_imports--;
        return lua_error(L);
    }
    lua_pushvalue(L, -1);
    im->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    note_import(e, im, 0);
    return 1;
}

static int l_cdiv(lua_State *L)
{
    lua_Integer a = luaL_checkinteger(L, 1), b = luaL_checkinteger(L, 2);
    if (b <= 0)
        return luaL_error(L, "cdiv: divisor must be positive, got %d", (int)b);
    lua_pushinteger(L, (a + b - 1) / b);
    return 1;
}

/* subst(text, table): replaces ${name} with tostring(table[name]); unknown names are errors. */
static int l_subst(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    for (size_t i = 0; i < len;) {
        if (s[i] == '$' && i + 1 < len && s[i + 1] == '{') {
            const char *end = memchr(s + i + 2, '}', len - i - 2);
            if (!end)
                return luaL_error(L, "subst: unterminated ${ at offset %d", (int)i);
            lua_pushlstring(L, s + i + 2, (size_t)(end - (s + i + 2)));
            lua_gettable(L, 2);  /* replaces the key */
            if (lua_isnil(L, -1)) {
                lua_pushlstring(L, s + i + 2, (size_t)(end - (s + i + 2)));
                return luaL_error(L, "subst: no value for ${%s}", lua_tostring(L, -1));
            }
            luaL_tolstring(L, -1, NULL);
            lua_remove(L, -2);
            luaL_addvalue(&b);
            i = (size_t)(end - s) + 1;
        } else {
            luaL_addchar(&b, s[i]);
            i++;
        }
    }
    luaL_pushresult(&b);
    return 1;
}

gen_host *gen_host_new(const char *dir)
{
    gen_host *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    gen_source_init(&h->src, dir);
    return h;
}

static void tmpl_free(gen_tmpl *t)
{
    env_free(t->env);
    for (int i = 0; i < t->n_includes; i++)
        free(t->include_text[i]);
    free(t->text);
    free(t);
}

void gen_host_free(gen_host *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n; i++)
        tmpl_free(h->tmpl[i]);
    free(h);
}

const char *gen_host_errmsg(const gen_host *h) { return h->err; }
const gen_source *gen_host_source(const gen_host *h) { return &h->src; }

struct fam_ctx {
    int (*fn)(const char *, void *);
    void *arg;
};

static int fam_cb(const char *path, void *arg)
{
    struct fam_ctx *c = arg;
    char name[128];
    snprintf(name, sizeof name, "%s", path);
    name[strlen(name) - 4] = 0;  /* ".lua" */
    return c->fn(name, c->arg);
}

int gen_host_families(gen_host *h, int (*fn)(const char *family, void *arg), void *arg)
{
    struct fam_ctx c = {fn, arg};
    return gen_source_each(&h->src, "", ".lua", fam_cb, &c);
}

/* ---- values between C and Lua --------------------------------------------- */

static void push_kvset(lua_State *L, const gen_kvset *set)
{
    lua_createtable(L, 0, set->n);
    for (int i = 0; set && i < set->n; i++) {
        if (set->kv[i].is_str)
            lua_pushstring(L, set->kv[i].s);
        else
            lua_pushinteger(L, set->kv[i].i);
        lua_setfield(L, -2, set->kv[i].name);
    }
}

static void push_device(lua_State *L, const gen_device *d)
{
    lua_createtable(L, 0, 7);
    lua_pushstring(L, d->arch);
    lua_setfield(L, -2, "arch");
    lua_pushinteger(L, d->cc);
    lua_setfield(L, -2, "cc");
    lua_pushinteger(L, d->sms);
    lua_setfield(L, -2, "sms");
    lua_pushinteger(L, d->smem_optin);
    lua_setfield(L, -2, "smem_optin");
    lua_pushinteger(L, d->smem_sm);
    lua_setfield(L, -2, "smem_sm");
    lua_pushinteger(L, d->regs_sm);
    lua_setfield(L, -2, "regs_sm");
    lua_pushinteger(L, d->l2);
    lua_setfield(L, -2, "l2");
}

/* Sets kv from the value on the top of the stack; -1 when it is neither integer nor string. */
static int set_from_lua(lua_State *L, gen_kvset *set, const char *name)
{
    int isnum;
    if (lua_type(L, -1) == LUA_TBOOLEAN)
        return gen_kv_set_int(set, name, lua_toboolean(L, -1));
    if (lua_type(L, -1) == LUA_TNUMBER) {
        lua_Integer v = lua_tointegerx(L, -1, &isnum);
        return isnum ? gen_kv_set_int(set, name, v) : -1;
    }
    if (lua_type(L, -1) == LUA_TSTRING)
        return gen_kv_set_str(set, name, lua_tostring(L, -1));
    return -1;
}

/* Reads the table on the top of the stack into set. */
static int table_to_kvset(lua_State *L, gen_host *h, gen_tmpl *t, const char *what, gen_kvset *set)
{
    gen_kv_clear(set);
    if (!lua_istable(L, -1))
        return fail(h, "%s: %s must return a table, got %s", t->path, what, luaL_typename(L, -1));
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            lua_pop(L, 2);
            return fail(h, "%s: %s returned a table with a non-string key", t->path, what);
        }
        const char *name = lua_tostring(L, -2);
        if (set_from_lua(L, set, name)) {
            lua_pop(L, 2);
            return fail(h, "%s: %s returned a bad value for '%s' (integers and [A-Za-z0-9_] strings)",
                        t->path, what, name);
        }
        lua_pop(L, 1);
    }
    return 0;
}

/* One call of a template function inside an entry: its arguments, then read() turns its
 * results (on the top of the stack) into C values, still in protected mode. */
struct call {
    gen_tmpl *t;
    const char *fn;
    const gen_kvset *sets[2];
    int n_sets;
    const gen_device *dev;
    int nres;
    int (*read)(struct call *c, lua_State *L);
    void *out;
    char *why;
    size_t whyn;
    int max, *n;
};

static int call_body(lua_State *L, void *arg)
{
    struct call *c = arg;
    lua_rawgeti(L, LUA_REGISTRYINDEX, c->t->ref);
    lua_pushstring(L, c->fn);
    lua_rawget(L, -2);
    lua_remove(L, -2);
    for (int i = 0; i < c->n_sets; i++)
        push_kvset(L, c->sets[i]);
    if (c->dev)
        push_device(L, c->dev);
    lua_call(L, c->n_sets + (c->dev != NULL), c->nres);
    return c->read ? c->read(c, L) : 0;
}

static int call_fn(struct call *c)
{
    char what[600], args[512] = "";
    /* fixed() and default() of a shape name it: the value that went wrong is in it */
    if (c->n_sets == 1 && gen_kv_format(c->sets[0], args, sizeof args) < 0)
        args[0] = 0;
    snprintf(what, sizeof what, "%s(%s%s)", c->fn, args[0] ? "shape " : "", args);
    return env_run(c->t->env, what, call_body, c);
}

/* ---- loading and validation ------------------------------------------------ */

static int read_includes(lua_State *L, gen_host *h, gen_tmpl *t)
{
    lua_getfield(L, -1, "includes");
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        return 0;
    }
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return fail(h, "%s: 'includes' must be a list of paths", t->path);
    }
    lua_Integer n = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, -1, i);
        if (!lua_isstring(L, -1) || t->n_includes >= MAX_INCLUDES) {
            lua_pop(L, 2);
            return fail(h, "%s: includes[%d] must be a path string (at most %d)", t->path, (int)i,
                        MAX_INCLUDES);
        }
        snprintf(t->includes[t->n_includes++], sizeof t->includes[0], "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}

static int read_space(lua_State *L, gen_host *h, gen_tmpl *t)
{
    gen_kvset names;
    gen_kv_clear(&names);
    lua_getfield(L, -1, "params");
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return fail(h, "%s: 'params' must be a table of value lists", t->path);
    }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (!name || gen_kv_set_int(&names, name, 0) || !lua_istable(L, -1)) {
            lua_pop(L, 3);
            return fail(h, "%s: params.%s must be a list of values, named [a-z_]+", t->path,
                        name ? name : "?");
        }
        lua_pop(L, 1);
    }
    t->space.n = 0;
    for (int k = 0; k < names.n; k++) {
        if (k >= GEN_PARAMS_MAX) {
            lua_pop(L, 1);
            return fail(h, "%s: more than %d params", t->path, GEN_PARAMS_MAX);
        }
        gen_param *p = &t->space.p[t->space.n++];
        memset(p, 0, sizeof *p);
        snprintf(p->name, sizeof p->name, "%s", names.kv[k].name);
        lua_getfield(L, -1, p->name);
        lua_Integer n = luaL_len(L, -1);
        if (n < 1 || n > GEN_PARAM_VALUES) {
            lua_pop(L, 2);
            return fail(h, "%s: params.%s must list 1 to %d values", t->path, p->name,
                        GEN_PARAM_VALUES);
        }
        for (lua_Integer i = 1; i <= n; i++) {
            gen_kvset one;
            gen_kv_clear(&one);
            lua_geti(L, -1, i);
            if (set_from_lua(L, &one, p->name)) {
                lua_pop(L, 3);
                return fail(h, "%s: params.%s[%d] is not an integer or a [A-Za-z0-9_] string",
                            t->path, p->name, (int)i);
            }
            p->values[p->n++] = one.kv[0];
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    lua_getfield(L, -1, "runtime");
    if (lua_istable(L, -1)) {
        for (int k = 0; k < t->space.n; k++) {
            lua_getfield(L, -1, t->space.p[k].name);
            t->space.p[k].runtime = lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    return 0;
}

static int read_shape(lua_State *L, gen_host *h, gen_tmpl *t)
{
    gen_kv_clear(&t->shape);
    lua_getfield(L, -1, "shape");
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return fail(h, "%s: 'shape' must be a table of field = \"int\"|\"string\" (\"int?\"|\"string?\": optional)", t->path);
    }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        const char *type = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
        /* optional types are kept as "int_opt" / "string_opt" (a kvset's values are [A-Za-z0-9_]) */
        const char *kept = !strcmp(type, "int?") ? "int_opt" : !strcmp(type, "string?") ? "string_opt" : type;
        if (!name || (strcmp(type, "int") && strcmp(type, "string") && strcmp(type, "int?") && strcmp(type, "string?")) ||
            gen_kv_set_str(&t->shape, name, kept)) {
            lua_pop(L, 3);
            return fail(h, "%s: shape.%s must be \"int\", \"string\", \"int?\" or \"string?\"", t->path, name ? name : "?");
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}

static int validate(lua_State *L, gen_host *h, gen_tmpl *t)
{
    lua_getfield(L, -1, "family");
    if (!lua_isstring(L, -1) || strcmp(lua_tostring(L, -1), t->family) != 0) {
        lua_pop(L, 1);
        return fail(h, "%s: 'family' must be \"%s\" (the file name)", t->path, t->family);
    }
    lua_pop(L, 1);
    lua_getfield(L, -1, "doc");
    snprintf(t->doc, sizeof t->doc, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
    lua_pop(L, 1);
    static const char *const fns[] = {"fixed", "valid", "default", "render", "kernels", NULL};
    for (const char *const *f = fns; *f; f++) {
        lua_getfield(L, -1, *f);
        int ok = lua_isfunction(L, -1);
        lua_pop(L, 1);
        if (!ok)
            return fail(h, "%s: '%s' must be a function", t->path, *f);
    }
    if (read_includes(L, h, t) || read_space(L, h, t) || read_shape(L, h, t))
        return -1;
    for (int i = 0; i < t->n_imported; i++)
        if (!listed_in(t, t->imported[i]))
            return fail(h, "%s: import '%s' is not listed in the includes of %s", t->path,
                        t->imported[i], t->path);
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The template hash over the file and each include (path and content); the fragments'
 * texts are kept, NVRTC's only headers. */
static int compute_hash(gen_host *h, gen_tmpl *t)
{
    gen_hash128 st;
    gen_hash128_init(&st);
    gen_hash128_update(&st, t->path, strlen(t->path) + 1);
    gen_hash128_update(&st, t->text, strlen(t->text));
    for (int i = 0; i < t->n_includes; i++) {
        char *data = NULL, err[512];
        size_t len = 0;
        if (gen_source_read(&h->src, t->includes[i], &data, &len, err, sizeof err)) {
            gen_hash128_hex(&st, t->hash);
            return fail(h, "%s: includes: %s", t->path, err);
        }
        gen_hash128_update(&st, t->includes[i], strlen(t->includes[i]) + 1);
        gen_hash128_update(&st, data, len);
        if (ends_with(t->includes[i], ".lua"))
            free(data);
        else
            t->include_text[i] = data;
    }
    gen_hash128_hex(&st, t->hash);
    return 0;
}

static int load_body(lua_State *L, void *arg)
{
    gen_tmpl *t = arg;
    gen_host *h = t->host;
    char chunk[128];
    snprintf(chunk, sizeof chunk, "@%s", t->path);
    /* mode "t": text only, never precompiled bytecode */
    if (luaL_loadbufferx(L, t->text, strlen(t->text), chunk, "t") != LUA_OK)
        return lua_error(L);
    t->env->loading = 1;
    lua_call(L, 0, 1);
    t->env->loading = 0;
    if (!lua_istable(L, -1))
        return fail(h, "%s: must return a table, returned %s", t->path, luaL_typename(L, -1));
    if (validate(L, h, t))
        return -1;
    t->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    return 0;
}

gen_tmpl *gen_tmpl_load(gen_host *h, const char *family)
{
    for (int i = 0; i < h->n; i++)
        if (strcmp(h->tmpl[i]->family, family) == 0)
            return h->tmpl[i];
    if (h->n >= MAX_TEMPLATES) {
        fail(h, "too many templates loaded (%d)", MAX_TEMPLATES);
        return NULL;
    }
    gen_kvset probe;
    gen_kv_clear(&probe);
    if (gen_kv_set_int(&probe, family, 0)) {
        fail(h, "bad family name '%s' (lower-case letters and '_')", family);
        return NULL;
    }
    gen_tmpl *t = calloc(1, sizeof *t);
    if (!t) {
        fail(h, "out of memory");
        return NULL;
    }
    t->host = h;
    snprintf(t->family, sizeof t->family, "%s", family);
    snprintf(t->path, sizeof t->path, "templates/%s.lua", family);
    char err[512];
    size_t len = 0;
    if (gen_source_read(&h->src, t->path + strlen("templates/"), &t->text, &len, err, sizeof err)) {
        fail(h, "no template for family '%s': %s", family, err);
        free(t);
        return NULL;
    }
    if (strlen(t->text) != len) {
        fail(h, "%s: the file holds a NUL byte", t->path);
        goto bad;
    }
    /* its own state: what it does to globals or library tables stays in it */
    t->env = env_new(h, t, t->path);
    if (!t->env) {
        fail(h, "%s: out of memory for its Lua state", t->path);
        goto bad;
    }
    if (env_run(t->env, "loading", load_body, t) || compute_hash(h, t))
        goto bad;
    h->tmpl[h->n++] = t;
    return t;
bad:
    tmpl_free(t);
    return NULL;
}

const char *gen_tmpl_family(const gen_tmpl *t) { return t->family; }
gen_host *gen_tmpl_host(const gen_tmpl *t) { return t->host; }
const char *gen_tmpl_doc(const gen_tmpl *t) { return t->doc; }
const char *gen_tmpl_hash(const gen_tmpl *t) { return t->hash; }
const char *gen_tmpl_text(const gen_tmpl *t) { return t->text; }
const gen_space *gen_tmpl_space(const gen_tmpl *t) { return &t->space; }
const gen_kvset *gen_tmpl_shape_fields(const gen_tmpl *t) { return &t->shape; }

int gen_tmpl_headers(const gen_tmpl *t, const char **names, const char **texts, int max)
{
    int n = 0;
    for (int i = 0; i < t->n_includes && n < max; i++)
        if (t->include_text[i]) {
            names[n] = t->includes[i];
            texts[n++] = t->include_text[i];
        }
    return n;
}

/* ---- calls ------------------------------------------------------------------- */

static int read_kvset(struct call *c, lua_State *L)
{
    char what[64];
    snprintf(what, sizeof what, "%s()", c->fn);
    return table_to_kvset(L, c->t->host, c->t, what, c->out);
}

int gen_tmpl_fixed(gen_tmpl *t, const gen_kvset *shape, gen_kvset *fixed)
{
    gen_host *h = t->host;
    for (int i = 0; i < t->shape.n; i++) {
        const gen_kv *want = &t->shape.kv[i];
        const gen_kv *got = gen_kv_find(shape, want->name);
        if (!got && gen_shape_optional(want->s))
            continue;   /* an optional field (a model feature): absent means off */
        if (!got)
            return fail(h, "shape for '%s' lacks '%s'", t->family, want->name);
        if (got->is_str != (strncmp(want->s, "string", 6) == 0))
            return fail(h, "shape field '%s' of '%s' must be %s", want->name, t->family,
                        got->is_str ? "an integer" : "a string");
    }
    struct call c = {.t = t, .fn = "fixed", .sets = {shape}, .n_sets = 1, .nres = 1,
                     .read = read_kvset, .out = fixed};
    gen_kv_clear(fixed);
    return call_fn(&c);
}

static int read_valid(struct call *c, lua_State *L)
{
    int ok = lua_toboolean(L, -2);
    if (c->why)
        snprintf(c->why, c->whyn, "%s", ok ? "" : (lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                                                 : "not valid"));
    *c->n = ok;
    return 0;
}

int gen_tmpl_valid(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params,
                   const gen_device *dev, char *why, size_t whyn)
{
    int ok = 0;
    struct call c = {.t = t, .fn = "valid", .sets = {params, fixed}, .n_sets = 2, .dev = dev, .nres = 2,
                     .read = read_valid, .why = why, .whyn = whyn, .n = &ok};
    return call_fn(&c) ? -1 : ok;
}

int gen_tmpl_check_params(gen_tmpl *t, const gen_kvset *params)
{
    for (int i = 0; i < t->space.n; i++) {
        const gen_param *p = &t->space.p[i];
        const gen_kv *v = gen_kv_find(params, p->name);
        if (!v)
            return fail(t->host, "variant of '%s' lacks param '%s'", t->family, p->name);
        int listed = 0;
        for (int j = 0; j < p->n && !listed; j++)
            listed = p->values[j].is_str == v->is_str &&
                     (v->is_str ? strcmp(p->values[j].s, v->s) == 0 : p->values[j].i == v->i);
        if (!listed) {
            if (v->is_str)
                return fail(t->host, "param %s=%s is not in the space of '%s'", p->name, v->s, t->family);
            return fail(t->host, "param %s=%lld is not in the space of '%s'", p->name, v->i, t->family);
        }
    }
    for (int i = 0; i < params->n; i++) {
        int known = 0;
        for (int j = 0; j < t->space.n; j++)
            known |= strcmp(t->space.p[j].name, params->kv[i].name) == 0;
        if (!known)
            return fail(t->host, "'%s' has no param '%s'", t->family, params->kv[i].name);
    }
    return 0;
}

int gen_tmpl_default(gen_tmpl *t, const gen_kvset *shape, const gen_device *dev, gen_kvset *params)
{
    struct call c = {.t = t, .fn = "default", .sets = {shape}, .n_sets = 1, .dev = dev, .nres = 1,
                     .read = read_kvset, .out = params};
    gen_kv_clear(params);
    int rc = call_fn(&c);
    if (rc == 0 && gen_tmpl_check_params(t, params)) {
        char why[sizeof t->host->err];   /* the message is rewritten into the buffer it is read from */
        snprintf(why, sizeof why, "%s", gen_host_errmsg(t->host));
        return fail(t->host, "%s: default(): %s", t->path, why);
    }
    return rc;
}

int gen_tmpl_enumerate(gen_tmpl *t, const gen_kvset *fixed, const gen_device *dev,
                       int (*fn)(const gen_kvset *params, int valid, const char *why, void *arg),
                       void *arg)
{
    int idx[GEN_PARAMS_MAX] = {0};
    const gen_space *s = &t->space;
    for (;;) {
        gen_kvset p;
        gen_kv_clear(&p);
        for (int k = 0; k < s->n; k++) {
            const gen_kv *v = &s->p[k].values[idx[k]];
            if (v->is_str)
                gen_kv_set_str(&p, s->p[k].name, v->s);
            else
                gen_kv_set_int(&p, s->p[k].name, v->i);
        }
        char why[256];
        int ok = gen_tmpl_valid(t, fixed, &p, dev, why, sizeof why);
        if (ok < 0)
            return -1;
        if (fn(&p, ok, why, arg))
            return 0;
        int k = s->n - 1;
        while (k >= 0 && ++idx[k] == s->p[k].n)
            idx[k--] = 0;
        if (k < 0)
            return 0;
    }
}

/* params without the runtime ones: what render may see */
static void compile_params(const gen_tmpl *t, const gen_kvset *params, gen_kvset *out)
{
    *out = *params;
    for (int i = 0; i < t->space.n; i++)
        if (t->space.p[i].runtime)
            gen_kv_remove(out, t->space.p[i].name);
}

int gen_variant_key(const gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params,
                    int binary, char *buf, size_t n)
{
    gen_kvset all = *fixed, p;
    if (binary)
        compile_params(t, params, &p);
    else
        p = *params;
    if (gen_kv_merge(&all, &p))
        return -1;
    int w = snprintf(buf, n, "%s.", t->family);
    if (w < 0 || (size_t)w >= n)
        return -1;
    return gen_kv_keyform(&all, buf + w, n - (size_t)w) < 0 ? -1 : 0;
}

struct render_out {
    char *body;
    size_t len;
};

static int read_render(struct call *c, lua_State *L)
{
    struct render_out *r = c->out;
    if (lua_type(L, -1) != LUA_TSTRING)
        return fail(c->t->host, "%s: render() must return a string, returned %s", c->t->path,
                    luaL_typename(L, -1));
    const char *body = lua_tolstring(L, -1, &r->len);
    if (r->len > RENDER_MAX)
        return fail(c->t->host, "%s: render() returned %zu bytes (at most %u)", c->t->path, r->len,
                    RENDER_MAX);
    if (strlen(body) != r->len)
        return fail(c->t->host, "%s: render() returned a source holding a NUL byte", c->t->path);
    r->body = malloc(r->len + 1);
    if (!r->body)
        return fail(c->t->host, "out of memory");
    memcpy(r->body, body, r->len + 1);
    return 0;
}

int gen_tmpl_render(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params, char **src)
{
    gen_host *h = t->host;
    gen_kvset p;
    compile_params(t, params, &p);
    char key[512];
    *src = NULL;
    if (gen_variant_key(t, fixed, params, 1, key, sizeof key))
        return fail(h, "variant key of '%s' is too long", t->family);
    struct render_out r = {0};
    struct call c = {.t = t, .fn = "render", .sets = {&p, fixed}, .n_sets = 2, .nres = 1,
                     .read = read_render, .out = &r};
    if (call_fn(&c)) {
        free(r.body);
        return -1;
    }
    const char *fmt = "// generated by kforge, do not edit\n"
                      "// template: %s (hash %s)\n"
                      "// binary key: %s\n";
    size_t cap = r.len + strlen(fmt) + strlen(t->path) + sizeof t->hash + strlen(key) + 1;
    *src = malloc(cap);
    if (!*src) {
        free(r.body);
        return fail(h, "out of memory");
    }
    int w = snprintf(*src, cap, fmt, t->path, t->hash, key);
    memcpy(*src + w, r.body, r.len + 1);
    free(r.body);
    return 0;
}

static int read_kernels(struct call *c, lua_State *L)
{
    gen_host *h = c->t->host;
    gen_kernel *out = c->out;
    *c->n = 0;
    if (!lua_istable(L, -1))
        return fail(h, "%s: kernels() must return a list", c->t->path);
    lua_Integer len = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= len; i++) {
        if (*c->n >= c->max)
            return fail(h, "%s: kernels() returned more than %d kernels", c->t->path, c->max);
        gen_kvset k;
        lua_geti(L, -1, i);
        int rc = table_to_kvset(L, h, c->t, "kernels()[i]", &k);
        lua_pop(L, 1);
        const char *name = gen_kv_str(&k, "name");
        long long threads = gen_kv_int(&k, "threads", 0), smem = gen_kv_int(&k, "smem", 0);
        long long pdl = gen_kv_int(&k, "pdl", 0);
        if (rc || !name || threads < 1 || threads > 1024 || smem < 0 || smem > (1 << 20) || (pdl != 0 && pdl != 1))
            return fail(h, "%s: kernels()[%d] needs name, threads (1..1024), smem >= 0 (and pdl 0 or 1)",
                        c->t->path, (int)i);
        gen_kernel *g = &out[(*c->n)++];
        snprintf(g->name, sizeof g->name, "%s", name);
        g->threads = (int)threads;
        g->smem = (int)smem;
        g->pdl = (int)pdl && c->dev && c->dev->cc >= 90;   /* dependent launch exists from sm_90 on: elsewhere plain */
    }
    return 0;
}

int gen_tmpl_kernels(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params,
                     const gen_device *dev, gen_kernel *out, int max, int *n)
{
    struct call c = {.t = t, .fn = "kernels", .sets = {params, fixed}, .n_sets = 2, .dev = dev, .nres = 1,
                     .read = read_kernels, .out = out, .max = max, .n = n};
    *n = 0;
    return call_fn(&c);
}

/* ---- devices ------------------------------------------------------------------ */

/* ---- sweep files and other plain chunks ------------------------------------ */

int gen_host_fail(gen_host *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, sizeof h->err, fmt, ap);
    va_end(ap);
    return -1;
}

struct chunk_run {
    const char *text;
    size_t len;
    const char *chunk;
    int (*read)(lua_State *L, void *arg);
    void *arg;
};

static int chunk_body(lua_State *L, void *arg)
{
    struct chunk_run *c = arg;
    if (luaL_loadbufferx(L, c->text, c->len, c->chunk, "t") != LUA_OK)
        return lua_error(L);
    lua_call(L, 0, 1);
    return c->read(L, c->arg);
}

int gen_host_run_file(gen_host *h, const char *path, int (*read)(lua_State *L, void *arg), void *arg)
{
    char *text = NULL, err[512], chunk[300];
    size_t len = 0;
    if (gen_source_read(&h->src, path, &text, &len, err, sizeof err))
        return fail(h, "%s", err);
    snprintf(chunk, sizeof chunk, "@templates/%s", path);
    /* a fresh state of its own, closed when read() has taken what it needs */
    gen_env *e = env_new(h, NULL, chunk + 1);
    if (!e) {
        free(text);
        return fail(h, "%s: out of memory for its Lua state", chunk + 1);
    }
    struct chunk_run c = {text, len, chunk, read, arg};
    int rc = env_run(e, "running", chunk_body, &c);
    env_free(e);
    free(text);
    return rc;
}
