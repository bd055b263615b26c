/* gen/template.c: Lua templates in a sandbox: load, validate, enumerate, render, kernel facts */
#include "gen/template.h"
#include "gen/hash.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TEMPLATES 32
#define MAX_INCLUDES 32
#define MAX_IMPORTS 16                      /* library files one host has run (import()) */
#define MAX_IMPORT_DEPS 8                   /* imports made by one library file */
#define LUA_MEM_LIMIT (256u << 20)          /* bytes a template may allocate */
#define LUA_STEP 100000                     /* hook period, VM instructions */
#define LUA_STEP_LIMIT 5000                 /* 500 M instructions per call */

struct gen_tmpl {
    gen_host *host;
    char family[64];
    char path[96];
    char doc[256];
    char hash[33];
    char *text;
    int ref;                               /* the returned table in the registry */
    int n_includes;
    char includes[MAX_INCLUDES][96];
    int n_imported;                        /* imports made while the file itself ran */
    char imported[MAX_INCLUDES][96];
    gen_space space;
    gen_kvset shape;                       /* declared shape fields: name -> type */
};

/* A library file run by import(): its value, kept in the registry, and the imports
 * it made itself (a template importing it must list those too). */
struct gen_import {
    char path[96];
    int ref;
    int n_deps;
    char deps[MAX_IMPORT_DEPS][96];
};

struct gen_host {
    lua_State *L;
    gen_source src;
    size_t mem;
    int steps;
    char err[2048];
    int n;
    gen_tmpl *tmpl[MAX_TEMPLATES];
    gen_tmpl *active;                      /* template whose function is running (fragment()) */
    gen_tmpl *loading;                     /* template whose file is running (import() at load) */
    int n_imports;
    struct gen_import imports[MAX_IMPORTS];
    struct gen_import *running;            /* library file whose chunk is running */
};

static int fail(gen_host *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, sizeof h->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- sandbox ---------------------------------------------------------------- */

static void *lua_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    gen_host *h = ud;
    if (!ptr)
        osize = 0;
    if (nsize == 0) {
        free(ptr);
        h->mem -= osize;
        return NULL;
    }
    if (h->mem - osize + nsize > LUA_MEM_LIMIT)
        return NULL;
    void *p = realloc(ptr, nsize);
    if (p)
        h->mem = h->mem - osize + nsize;
    return p;
}

static void step_hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    gen_host *h;
    lua_getallocf(L, (void **)&h);
    if (++h->steps > LUA_STEP_LIMIT)
        luaL_error(L, "template ran too long (over %d million instructions)",
                   LUA_STEP_LIMIT / 10);
}

static gen_host *host_of(lua_State *L)
{
    gen_host *h;
    lua_getallocf(L, (void **)&h);
    return h;
}

/* fragment(path): text of a file the running template lists in `includes`. */
static int l_fragment(lua_State *L)
{
    gen_host *h = host_of(L);
    const char *path = luaL_checkstring(L, 1);
    gen_tmpl *t = h->active;
    int listed = 0;
    for (int i = 0; t && i < t->n_includes; i++)
        listed |= strcmp(t->includes[i], path) == 0;
    if (!listed)
        return luaL_error(L, "fragment '%s' is not listed in includes", path);
    char *data = NULL, err[512];
    size_t len = 0;
    if (gen_source_read(&h->src, path, &data, &len, err, sizeof err))
        return luaL_error(L, "%s", err);
    lua_pushlstring(L, data, len);
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
static void note_import(gen_host *h, const struct gen_import *im, int depth)
{
    gen_tmpl *t = h->loading;
    if (!t || depth > MAX_IMPORTS)
        return;
    int seen = 0;
    for (int i = 0; i < t->n_imported; i++)
        seen |= strcmp(t->imported[i], im->path) == 0;
    if (!seen && t->n_imported < MAX_INCLUDES)
        snprintf(t->imported[t->n_imported++], sizeof t->imported[0], "%s", im->path);
    for (int d = 0; d < im->n_deps; d++)
        for (int j = 0; j < h->n_imports; j++)
            if (strcmp(h->imports[j].path, im->deps[d]) == 0)
                note_import(h, &h->imports[j], depth + 1);
}

/* import(path): runs templates/<path> once per host in the same sandbox and returns
 * its value (a table). A template must list path in `includes`, so that the
 * template hash covers it. Sweep files may import anything under templates/. */
static int l_import(lua_State *L)
{
    gen_host *h = host_of(L);
    const char *path = luaL_checkstring(L, 1);
    if (strlen(path) >= sizeof h->imports[0].path || strlen(path) < 5 ||
        strcmp(path + strlen(path) - 4, ".lua") != 0)
        return luaL_error(L, "import '%s': the path of a .lua file under templates/ is needed", path);
    gen_tmpl *t = h->active;
    if (t && !listed_in(t, path))
        return luaL_error(L, "import '%s' is not listed in the includes of %s", path, t->path);
    if (h->running) {                       /* a library importing another one */
        struct gen_import *r = h->running;
        int seen = 0;
        for (int i = 0; i < r->n_deps; i++)
            seen |= strcmp(r->deps[i], path) == 0;
        if (!seen && r->n_deps >= MAX_IMPORT_DEPS)
            return luaL_error(L, "import '%s': %s imports more than %d files", path, r->path,
                              MAX_IMPORT_DEPS);
        if (!seen)
            snprintf(r->deps[r->n_deps++], sizeof r->deps[0], "%s", path);
    }
    for (int i = 0; i < h->n_imports; i++) {
        struct gen_import *im = &h->imports[i];
        if (strcmp(im->path, path) != 0)
            continue;
        if (im->ref == LUA_NOREF)
            return luaL_error(L, "import '%s': imports itself (through %s)", path,
                              h->running ? h->running->path : path);
        note_import(h, im, 0);
        lua_rawgeti(L, LUA_REGISTRYINDEX, im->ref);
        return 1;
    }
    if (h->n_imports >= MAX_IMPORTS)
        return luaL_error(L, "import '%s': more than %d imported files", path, MAX_IMPORTS);
    char *text = NULL, err[512], chunk[128];
    size_t len = 0;
    if (gen_source_read(&h->src, path, &text, &len, err, sizeof err))
        return luaL_error(L, "import: %s", err);
    snprintf(chunk, sizeof chunk, "@templates/%s", path);
    int rc = luaL_loadbufferx(L, text, len, chunk, "t");
    free(text);
    if (rc != LUA_OK)
        return lua_error(L);                /* "templates/lib/x.lua:LINE: message" */
    struct gen_import *im = &h->imports[h->n_imports++];
    memset(im, 0, sizeof *im);
    snprintf(im->path, sizeof im->path, "%s", path);
    im->ref = LUA_NOREF;                    /* running: a cycle finds it so */
    struct gen_import *outer = h->running;
    h->running = im;
    rc = lua_pcall(L, 0, 1, 0);
    h->running = outer;
    if (rc == LUA_OK && !lua_istable(L, -1)) {
        lua_pushfstring(L, "templates/%s: must return a table, returned %s", path,
                        luaL_typename(L, -1));  /* the value: the top until pushed */
        rc = LUA_ERRRUN;
    }
    if (rc != LUA_OK) {
        /* not cached: the next import reports it again. Files it imported itself
         * were appended after it and stay; files still running come before it. */
        int idx = (int)(im - h->imports);
        memmove(im, im + 1, (size_t)(h->n_imports - idx - 1) * sizeof *im);
        h->n_imports--;
        return lua_error(L);
    }
    lua_pushvalue(L, -1);
    im->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    note_import(h, im, 0);
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
            const char *name = lua_tostring(L, -1);
            lua_gettable(L, 2);  /* replaces the key */
            if (lua_isnil(L, -1)) {
                lua_pushlstring(L, s + i + 2, (size_t)(end - (s + i + 2)));
                return luaL_error(L, "subst: no value for ${%s}", lua_tostring(L, -1));
            }
            (void)name;
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

static lua_State *sandbox_new(gen_host *h)
{
    lua_State *L = lua_newstate(lua_alloc, h);
    if (!L)
        return NULL;
    static const luaL_Reg libs[] = {
        {LUA_GNAME, luaopen_base},     {LUA_STRLIBNAME, luaopen_string},
        {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
        {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL}};
    for (const luaL_Reg *l = libs; l->func; l++) {
        luaL_requiref(L, l->name, l->func, 1);
        lua_pop(L, 1);
    }
    static const char *const removed[] = {"dofile", "loadfile", "load", "require", "collectgarbage",
                                          "print", "rawequal", "rawget", "rawset", "rawlen", NULL};
    for (const char *const *r = removed; *r; r++) {
        lua_pushnil(L);
        lua_setglobal(L, *r);
    }
    /* string.dump would give bytecode back; templates have no use for it. */
    lua_getglobal(L, "string");
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    lua_pop(L, 1);
    lua_register(L, "fragment", l_fragment);
    lua_register(L, "import", l_import);
    lua_register(L, "cdiv", l_cdiv);
    lua_register(L, "subst", l_subst);
    lua_sethook(L, step_hook, LUA_MASKCOUNT, LUA_STEP);
    return L;
}

gen_host *gen_host_new(const char *dir)
{
    gen_host *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    gen_source_init(&h->src, dir);
    h->L = sandbox_new(h);
    if (!h->L) {
        free(h);
        return NULL;
    }
    return h;
}

void gen_host_free(gen_host *h)
{
    if (!h)
        return;
    lua_close(h->L);
    for (int i = 0; i < h->n; i++) {
        free(h->tmpl[i]->text);
        free(h->tmpl[i]);
    }
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
static int table_to_kvset(gen_host *h, gen_tmpl *t, const char *what, gen_kvset *set)
{
    lua_State *L = h->L;
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

/* Pushes the template function `name` and calls it with nargs already pushed
 * after it. On return the results are on the stack. */
static int call_fn(gen_tmpl *t, const char *name, int nargs, int nres)
{
    gen_host *h = t->host;
    lua_State *L = h->L;
    lua_rawgeti(L, LUA_REGISTRYINDEX, t->ref);
    lua_getfield(L, -1, name);
    lua_remove(L, -2);
    lua_insert(L, -(nargs + 1));
    h->steps = 0;
    h->active = t;
    int rc = lua_pcall(L, nargs, nres, 0);
    h->active = NULL;
    if (rc != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        fail(h, "%s", msg ? msg : "(error object is not a string)");
        if (!msg || !strstr(msg, ".lua:"))
            fail(h, "%s: %s(): %s", t->path, name, msg ? msg : "(error object is not a string)");
        lua_pop(L, 1);
        return -1;
    }
    return 0;
}

/* ---- loading and validation ------------------------------------------------ */

static int read_includes(gen_host *h, gen_tmpl *t)
{
    lua_State *L = h->L;
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

static int read_space(gen_host *h, gen_tmpl *t)
{
    lua_State *L = h->L;
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

static int read_shape(gen_host *h, gen_tmpl *t)
{
    lua_State *L = h->L;
    gen_kv_clear(&t->shape);
    lua_getfield(L, -1, "shape");
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return fail(h, "%s: 'shape' must be a table of field = \"int\"|\"string\"", t->path);
    }
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        const char *name = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        const char *type = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
        if (!name || (strcmp(type, "int") && strcmp(type, "string")) ||
            gen_kv_set_str(&t->shape, name, type)) {
            lua_pop(L, 3);
            return fail(h, "%s: shape.%s must be \"int\" or \"string\"", t->path, name ? name : "?");
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
    return 0;
}

static int validate(gen_host *h, gen_tmpl *t)
{
    lua_State *L = h->L;
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
    if (read_includes(h, t) || read_space(h, t) || read_shape(h, t))
        return -1;
    for (int i = 0; i < t->n_imported; i++)
        if (!listed_in(t, t->imported[i]))
            return fail(h, "%s: import '%s' is not listed in the includes of %s", t->path,
                        t->imported[i], t->path);
    return 0;
}

static int compute_hash(gen_host *h, gen_tmpl *t)
{
    gen_hash128 st;
    gen_hash128_init(&st);
    gen_hash128_update(&st, t->path, strlen(t->path) + 1);
    gen_hash128_update(&st, t->text, strlen(t->text));
    for (int i = 0; i < t->n_includes; i++) {
        char *data = NULL, err[512];
        size_t len = 0;
        if (gen_source_read(&h->src, t->includes[i], &data, &len, err, sizeof err))
            return fail(h, "%s: includes: %s", t->path, err);
        gen_hash128_update(&st, t->includes[i], strlen(t->includes[i]) + 1);
        gen_hash128_update(&st, data, len);
        free(data);
    }
    gen_hash128_hex(&st, t->hash);
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
    t->host = h;
    snprintf(t->family, sizeof t->family, "%s", family);
    snprintf(t->path, sizeof t->path, "templates/%s.lua", family);
    char err[512], chunk[128];
    size_t len = 0;
    if (gen_source_read(&h->src, t->path + strlen("templates/"), &t->text, &len, err, sizeof err)) {
        fail(h, "no template for family '%s': %s", family, err);
        free(t);
        return NULL;
    }
    lua_State *L = h->L;
    snprintf(chunk, sizeof chunk, "@%s", t->path);
    h->steps = 0;
    /* mode "t": text only, never precompiled bytecode */
    int rc = luaL_loadbufferx(L, t->text, len, chunk, "t");
    h->loading = t;
    if (rc == LUA_OK)
        rc = lua_pcall(L, 0, 1, 0);
    h->loading = NULL;
    if (rc != LUA_OK) {
        fail(h, "%s", lua_tostring(L, -1));
        lua_pop(L, 1);
        goto bad;
    }
    if (!lua_istable(L, -1)) {
        fail(h, "%s: must return a table, returned %s", t->path, luaL_typename(L, -1));
        lua_pop(L, 1);
        goto bad;
    }
    if (validate(h, t)) {
        lua_pop(L, 1);
        goto bad;
    }
    t->ref = luaL_ref(L, LUA_REGISTRYINDEX);
    if (compute_hash(h, t))
        goto bad;
    h->tmpl[h->n++] = t;
    return t;
bad:
    free(t->text);
    free(t);
    return NULL;
}

const char *gen_tmpl_family(const gen_tmpl *t) { return t->family; }
const char *gen_tmpl_doc(const gen_tmpl *t) { return t->doc; }
const char *gen_tmpl_hash(const gen_tmpl *t) { return t->hash; }
const char *gen_tmpl_text(const gen_tmpl *t) { return t->text; }
const gen_space *gen_tmpl_space(const gen_tmpl *t) { return &t->space; }
const gen_kvset *gen_tmpl_shape_fields(const gen_tmpl *t) { return &t->shape; }

/* ---- calls ------------------------------------------------------------------- */

int gen_tmpl_fixed(gen_tmpl *t, const gen_kvset *shape, gen_kvset *fixed)
{
    gen_host *h = t->host;
    for (int i = 0; i < t->shape.n; i++) {
        const gen_kv *want = &t->shape.kv[i];
        const gen_kv *got = gen_kv_find(shape, want->name);
        if (!got)
            return fail(h, "shape for '%s' lacks '%s'", t->family, want->name);
        if (got->is_str != (strcmp(want->s, "string") == 0))
            return fail(h, "shape field '%s' of '%s' must be %s", want->name, t->family,
                        got->is_str ? "an integer" : "a string");
    }
    push_kvset(h->L, shape);
    if (call_fn(t, "fixed", 1, 1))
        return -1;
    int rc = table_to_kvset(h, t, "fixed()", fixed);
    lua_pop(h->L, 1);
    return rc;
}

int gen_tmpl_valid(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params,
                   const gen_device *dev, char *why, size_t whyn)
{
    lua_State *L = t->host->L;
    push_kvset(L, params);
    push_kvset(L, fixed);
    push_device(L, dev);
    if (call_fn(t, "valid", 3, 2))
        return -1;
    int ok = lua_toboolean(L, -2);
    if (why)
        snprintf(why, whyn, "%s", ok ? "" : (lua_isstring(L, -1) ? lua_tostring(L, -1) : "not valid"));
    lua_pop(L, 2);
    return ok;
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
    push_kvset(t->host->L, shape);
    push_device(t->host->L, dev);
    if (call_fn(t, "default", 2, 1))
        return -1;
    int rc = table_to_kvset(t->host, t, "default()", params);
    lua_pop(t->host->L, 1);
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

int gen_tmpl_render(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params, char **src)
{
    gen_host *h = t->host;
    gen_kvset p;
    compile_params(t, params, &p);
    char key[512];
    if (gen_variant_key(t, fixed, params, 1, key, sizeof key))
        return fail(h, "variant key of '%s' is too long", t->family);
    push_kvset(h->L, &p);
    push_kvset(h->L, fixed);
    if (call_fn(t, "render", 2, 1))
        return -1;
    size_t len;
    const char *body = lua_tolstring(h->L, -1, &len);
    if (!body || lua_type(h->L, -1) != LUA_TSTRING) {
        lua_pop(h->L, 1);
        return fail(h, "%s: render() must return a string", t->path);
    }
    const char *fmt = "// generated by kforge, do not edit\n"
                      "// template: %s (hash %s)\n"
                      "// binary key: %s\n";
    size_t cap = len + strlen(fmt) + strlen(t->path) + sizeof t->hash + strlen(key) + 1;
    *src = malloc(cap);
    if (!*src) {
        lua_pop(h->L, 1);
        return fail(h, "out of memory");
    }
    int w = snprintf(*src, cap, fmt, t->path, t->hash, key);
    memcpy(*src + w, body, len + 1);
    lua_pop(h->L, 1);
    return 0;
}

int gen_tmpl_kernels(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params,
                     const gen_device *dev, gen_kernel *out, int max, int *n)
{
    gen_host *h = t->host;
    lua_State *L = h->L;
    push_kvset(L, params);
    push_kvset(L, fixed);
    push_device(L, dev);
    if (call_fn(t, "kernels", 3, 1))
        return -1;
    *n = 0;
    if (!lua_istable(L, -1)) {
        lua_pop(L, 1);
        return fail(h, "%s: kernels() must return a list", t->path);
    }
    lua_Integer len = luaL_len(L, -1);
    for (lua_Integer i = 1; i <= len; i++) {
        if (*n >= max) {
            lua_pop(L, 1);
            return fail(h, "%s: kernels() returned more than %d kernels", t->path, max);
        }
        gen_kvset k;
        lua_geti(L, -1, i);
        int rc = table_to_kvset(h, t, "kernels()[i]", &k);
        lua_pop(L, 1);
        const char *name = gen_kv_str(&k, "name");
        long long threads = gen_kv_int(&k, "threads", 0), smem = gen_kv_int(&k, "smem", 0);
        if (rc || !name || threads < 1 || threads > 1024 || smem < 0 || smem > (1 << 20)) {
            lua_pop(L, 1);
            return fail(h, "%s: kernels()[%d] needs name, threads (1..1024), smem >= 0", t->path,
                        (int)i);
        }
        gen_kernel *g = &out[(*n)++];
        snprintf(g->name, sizeof g->name, "%s", name);
        g->threads = (int)threads;
        g->smem = (int)smem;
    }
    lua_pop(L, 1);
    return 0;
}

/* ---- devices ------------------------------------------------------------------ */

int gen_device_for_arch(gen_device *d, const char *arch)
{
    memset(d, 0, sizeof *d);
    snprintf(d->arch, sizeof d->arch, "%s", arch);
    if (strcmp(arch, "sm_90a") == 0 || strcmp(arch, "sm_90") == 0) {
        d->cc = 90;               /* NVIDIA H200 SXM */
        d->sms = 132;
        d->smem_optin = 232448;
        d->smem_sm = 233472;
        d->regs_sm = 65536;
        d->l2 = 62914560;
        return 0;
    }
    if (strcmp(arch, "sm_80") == 0) {
        d->cc = 80;               /* NVIDIA A100 */
        d->sms = 108;
        d->smem_optin = 166912;
        d->smem_sm = 167936;
        d->regs_sm = 65536;
        d->l2 = 41943040;
        return 0;
    }
    return -1;
}

/* ---- sweep files and other plain chunks ------------------------------------ */

struct lua_State *gen_host_lua(gen_host *h) { return h->L; }

int gen_host_fail(gen_host *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->err, sizeof h->err, fmt, ap);
    va_end(ap);
    return -1;
}

int gen_host_run_file(gen_host *h, const char *path)
{
    char *text = NULL, err[512], chunk[300];
    size_t len = 0;
    if (gen_source_read(&h->src, path, &text, &len, err, sizeof err))
        return fail(h, "%s", err);
    snprintf(chunk, sizeof chunk, "@templates/%s", path);
    h->steps = 0;
    int rc = luaL_loadbufferx(h->L, text, len, chunk, "t");
    free(text);
    if (rc == LUA_OK)
        rc = lua_pcall(h->L, 0, 1, 0);
    if (rc != LUA_OK) {
        fail(h, "%s", lua_tostring(h->L, -1));
        lua_pop(h->L, 1);
        return -1;
    }
    return 0;
}
