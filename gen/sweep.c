/* gen/sweep.c: sweep files: named sets of shapes (templates/sweeps/<name>.lua) */
#include "gen/sweep.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sweep_read {
    gen_host *h;
    const char *path;
    gen_sweep *out;
};

/* The sweep file's table (on the top), in protected mode: a metamethod that errs or loops is
 * the file's error under its budget. */
static int read_sweep(lua_State *L, void *arg)
{
    struct sweep_read *r = arg;
    gen_host *h = r->h;
    gen_sweep *out = r->out;
    const char *path = r->path;
    if (!lua_istable(L, -1))
        return gen_host_fail(h, "templates/%s: must return a table", path);
    lua_getfield(L, -1, "doc");
    snprintf(out->doc, sizeof out->doc, "%s", lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "");
    lua_pop(L, 1);
    lua_getfield(L, -1, "shapes");
    if (!lua_istable(L, -1))
        return gen_host_fail(h, "templates/%s: 'shapes' must be a list of shape tables", path);
    lua_Integer n = luaL_len(L, -1);
    if (n > GEN_SWEEP_MAX)
        return gen_host_fail(h, "templates/%s: more than %d shapes", path, GEN_SWEEP_MAX);
    out->shapes = calloc((size_t)(n > 0 ? n : 1), sizeof(gen_kvset));
    if (!out->shapes)
        return gen_host_fail(h, "out of memory");
    for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, -1, i);
        gen_kvset *s = &out->shapes[out->n];
        gen_kv_clear(s);
        int bad = !lua_istable(L, -1);
        if (!bad) {
            lua_pushnil(L);
            while (!bad && lua_next(L, -2)) {
                const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
                int isint = 0;
                lua_Integer v = lua_tointegerx(L, -1, &isint);
                if (!k)
                    bad = 1;
                else if (lua_type(L, -1) == LUA_TNUMBER && isint)
                    bad = gen_kv_set_int(s, k, v) != 0;
                else if (lua_type(L, -1) == LUA_TBOOLEAN)
                    bad = gen_kv_set_int(s, k, lua_toboolean(L, -1)) != 0;
                else if (lua_type(L, -1) == LUA_TSTRING)
                    bad = gen_kv_set_str(s, k, lua_tostring(L, -1)) != 0;
                else
                    bad = 1;
                lua_pop(L, 1);
            }
            if (bad)
                lua_pop(L, 1);  /* the key left by an interrupted lua_next */
        }
        lua_pop(L, 1);
        if (bad || !gen_kv_str(s, "family"))
            return gen_host_fail(h, "templates/%s: shapes[%d] must be a table of name = integer|string "
                                    "with a 'family'", path, (int)i);
        out->n++;
    }
    return 0;
}

int gen_sweep_load(gen_host *h, const char *name, gen_sweep *out)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    char path[128];
    snprintf(path, sizeof path, "sweeps/%s.lua", name);
    gen_kvset probe;
    gen_kv_clear(&probe);
    if (gen_kv_set_str(&probe, "n", name) || strlen(name) > 60)
        return gen_host_fail(h, "bad sweep name '%s'", name);
    struct sweep_read r = {h, path, out};
    if (gen_host_run_file(h, path, read_sweep, &r)) {
        gen_sweep_free(out);
        return -1;
    }
    return 0;
}

void gen_sweep_free(gen_sweep *s)
{
    free(s->shapes);
    s->shapes = NULL;
    s->n = 0;
}

struct names_ctx {
    int (*fn)(const char *, void *);
    void *arg;
};

static int name_cb(const char *path, void *arg)
{
    struct names_ctx *c = arg;
    char name[128];
    const char *base = strrchr(path, '/');
    snprintf(name, sizeof name, "%s", base ? base + 1 : path);
    name[strlen(name) - 4] = 0;
    return c->fn(name, c->arg);
}

int gen_sweep_names(gen_host *h, int (*fn)(const char *name, void *arg), void *arg)
{
    struct names_ctx c = {fn, arg};
    return gen_source_each(gen_host_source(h), "sweeps", ".lua", name_cb, &c);
}

int gen_shape_key(const gen_kvset *shape, char *buf, size_t n)
{
    gen_kvset s = *shape;
    gen_kv_remove(&s, "family");
    return gen_kv_keyform(&s, buf, n) < 0 ? -1 : 0;
}
