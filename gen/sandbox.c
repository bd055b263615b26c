/* gen/sandbox.c: one sandboxed Lua state and the budget (memory, instructions, wall clock) Lua code cannot escape */
#include "gen/sandbox.h"

#include <ctype.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SANDBOX_STEP 100000                     /* hook period, VM instructions */
#define SANDBOX_REP_MAX (1L << 26)              /* string.rep copies */
#define SANDBOX_MOVE_MAX (1L << 24)             /* table.move elements */

struct gen_sandbox {
    lua_State *L;
    void *user;
    size_t mem;
    long instructions, ms;      /* budget of one entry */
    long periods;               /* hook periods since the entry began */
    double deadline;            /* wall clock, ms */
    int tripped;                /* sticky: the entry's budget is spent; every hook and pcall re-raises */
    char trip[300];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static gen_sandbox *sb_of(lua_State *L)
{
    void *ud;
    lua_getallocf(L, &ud);
    return ud;
}

void *gen_sandbox_user(lua_State *L) { return sb_of(L)->user; }
lua_State *gen_sandbox_lua(gen_sandbox *s) { return s->L; }

static void *sb_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    gen_sandbox *s = ud;
    if (!ptr)
        osize = 0;
    if (nsize == 0) {
        free(ptr);
        s->mem -= osize;
        return NULL;
    }
    if (s->mem - osize + nsize > GEN_SANDBOX_MEM)
        return NULL;
    void *p = realloc(ptr, nsize);
    if (p)
        s->mem = s->mem - osize + nsize;
    return p;
}

/* ---- the budget ------------------------------------------------------------- */

/* "file:line:" of the innermost Lua function at or above level, or "" */
static void where(lua_State *L, int level, char *buf, size_t n)
{
    lua_Debug ar;
    buf[0] = 0;
    for (; lua_getstack(L, level, &ar); level++) {
        if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0) {
            snprintf(buf, n, "%s:%d:", ar.short_src, ar.currentline);
            return;
        }
    }
}

static void hook(lua_State *L, lua_Debug *ar)
{
    (void)ar;
    gen_sandbox *s = sb_of(L);
    if (!s->tripped) {
        s->periods++;
        char at[200], why[80];
        if (s->periods > s->instructions / SANDBOX_STEP)
            snprintf(why, sizeof why, "over %ld million instructions", s->instructions / 1000000);
        else if (now_ms() > s->deadline)
            snprintf(why, sizeof why, "ran over %ld ms", s->ms);
        else
            return;
        where(L, 0, at, sizeof at);
        snprintf(s->trip, sizeof s->trip, "%s%sbudget exceeded: %s", at, at[0] ? " " : "", why);
        s->tripped = 1;
        lua_sethook(L, hook, LUA_MASKCOUNT, 1);  /* from now on no Lua instruction runs */
    }
    lua_pushstring(L, s->trip);
    lua_error(L);
}

/* Raises the budget error again when it was spent (after any protected call). */
static void recheck(lua_State *L)
{
    gen_sandbox *s = sb_of(L);
    if (s->tripped) {
        lua_pushstring(L, s->trip);
        lua_error(L);
    }
}

static int l_pcall(lua_State *L)
{
    luaL_checkany(L, 1);
    int st = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    recheck(L);
    lua_pushboolean(L, st == LUA_OK);
    lua_insert(L, 1);
    return lua_gettop(L);
}

/* xpcall's message handler, around the template's (upvalue 1). An error raised from the hook
 * reaches the handler with hooks still off (ldo.c), so once the budget is spent the
 * template's handler is not called at all. */
static int l_xmsgh(lua_State *L)
{
    gen_sandbox *s = sb_of(L);
    if (s->tripped) {
        lua_pushstring(L, s->trip);
        return 1;
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 1);
    return 1;
}

static int l_xpcall(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, l_xmsgh, 1);   /* f, msgh, args..., xmsgh */
    lua_replace(L, 2);                 /* f, xmsgh, args... */
    lua_pushvalue(L, 1);
    lua_copy(L, 2, 1);                 /* xmsgh, xmsgh, args..., f */
    lua_replace(L, 2);                 /* xmsgh, f, args... */
    int st = lua_pcall(L, n - 2, LUA_MULTRET, 1);
    recheck(L);
    lua_pushboolean(L, st == LUA_OK);
    lua_replace(L, 1);
    return lua_gettop(L);
}

/* A finalizer runs inside the collector, where Lua 5.4 turns hooks off: none may be installed. */
static int l_setmetatable(lua_State *L)
{
    if (lua_type(L, 2) == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        int gc = lua_rawget(L, 2) != LUA_TNIL;
        lua_pop(L, 1);
        if (gc)
            return luaL_error(L, "setmetatable: a __gc metamethod (finalizer) is not allowed in a template");
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* ---- C functions the hook cannot see ----------------------------------------- */

static int match_class(int c, int cl)
{
    int res;
    switch (tolower(cl)) {
    case 'a': res = isalpha(c); break;
    case 'c': res = iscntrl(c); break;
    case 'd': res = isdigit(c); break;
    case 'g': res = isgraph(c); break;
    case 'l': res = islower(c); break;
    case 'p': res = ispunct(c); break;
    case 's': res = isspace(c); break;
    case 'u': res = isupper(c); break;
    case 'w': res = isalnum(c); break;
    case 'x': res = isxdigit(c); break;
    default: return cl == c;
    }
    if (isupper(cl))
        res = !res;
    return res;
}

/* p at '[', ec at its ']' (as lstrlib.c) */
static int match_bracket(int c, const char *p, const char *ec)
{
    int sig = 1;
    if (p[1] == '^') {
        sig = 0;
        p++;
    }
    while (++p < ec) {
        if (*p == '%') {
            p++;
            if (p < ec && match_class(c, (unsigned char)*p))
                return sig;
        } else if (p + 2 < ec && p[1] == '-') {
            p += 2;
            if ((unsigned char)p[-2] <= c && c <= (unsigned char)*p)
                return sig;
        } else if ((unsigned char)*p == c) {
            return sig;
        }
    }
    return !sig;
}

/* End of the single-character class at p, or NULL when malformed. */
static const char *class_end(const char *p, const char *pe)
{
    char c = *p++;
    if (c == '%')
        return p < pe ? p + 1 : NULL;
    if (c == '[') {
        if (p < pe && *p == '^')
            p++;
        do {
            if (p >= pe)
                return NULL;
            if (*p++ == '%' && p < pe)
                p++;
        } while (p < pe && *p != ']');
        return p < pe ? p + 1 : NULL;
    }
    return p;
}

static int single(int c, const char *p, const char *ep)
{
    switch (*p) {
    case '.': return 1;
    case '%': return match_class(c, (unsigned char)p[1]);
    case '[': return match_bracket(c, p, ep - 1);
    default: return (unsigned char)*p == c;
    }
}

static double max_run(const char *s, size_t n, const char *p, const char *ep)
{
    size_t best = 0, run = 0;
    for (size_t i = 0; i < n; i++) {
        run = single((unsigned char)s[i], p, ep) ? run + 1 : 0;
        if (run > best)
            best = run;
    }
    return (double)best;
}

/* The matcher of lstrlib.c backtracks: at one start it tries every length of every
 * repeated item, so its steps are at most starts x prod(longest run of the item's
 * class in the subject + 1) x 2 per '?' x items, %b and back-references counting as
 * a repeat over the whole subject. */
double gen_pattern_cost(const char *s, size_t n, const char *p, size_t m, int anchor_ok, int plain)
{
    if (plain)
        return ((double)n + 1) * ((double)m + 1);
    const char *pe = p + m;
    double starts = (double)n + 1, f = 1, items = 1;
    if (anchor_ok && p < pe && *p == '^') {
        starts = 1;
        p++;
    }
    while (p < pe) {
        items++;
        if (starts * f * items > GEN_PATTERN_STEPS)
            break;
        if (*p == '(' || *p == ')' || (*p == '$' && p + 1 == pe)) {
            p++;
            continue;
        }
        if (*p == '%' && p + 1 < pe && p[1] == 'b') {
            f *= (double)n + 1;
            p += p + 4 <= pe ? 4 : (size_t)(pe - p);
            continue;
        }
        if (*p == '%' && p + 1 < pe && p[1] == 'f') {
            p += 2;
            const char *e = p < pe && *p == '[' ? class_end(p, pe) : NULL;
            if (!e)
                return 0;   /* malformed: lstrlib reports it */
            p = e;
            continue;
        }
        if (*p == '%' && p + 1 < pe && isdigit((unsigned char)p[1])) {
            f *= (double)n + 1;
            p += 2;
            continue;
        }
        const char *ep = class_end(p, pe);
        if (!ep)
            return 0;
        char q = ep < pe ? *ep : 0;
        if (q == '*' || q == '+' || q == '-') {
            f *= max_run(s, n, p, ep) + 1;
            ep++;
        } else if (q == '?') {
            f *= 2;
            ep++;
        }
        p = ep;
    }
    return starts * f * items;
}

enum { PAT_FIND, PAT_MATCH, PAT_GMATCH, PAT_GSUB };
static const char *const pat_names[] = {"find", "match", "gmatch", "gsub"};

static int has_specials(const char *p, size_t m)
{
    for (size_t i = 0; i < m; i++)
        if (strchr("^$*+?.([%-", p[i]) && p[i])
            return 1;
    return 0;
}

/* string.find/match/gmatch/gsub: the original (upvalue 1) after the cost bound */
static int l_pattern(lua_State *L)
{
    int kind = (int)lua_tointeger(L, lua_upvalueindex(2));
    size_t n, m;
    const char *s = luaL_checklstring(L, 1, &n);
    const char *p = luaL_checklstring(L, 2, &m);
    int plain = kind == PAT_FIND && (lua_toboolean(L, 4) || !has_specials(p, m));
    double cost = gen_pattern_cost(s, n, p, m, kind != PAT_GMATCH, plain);
    if (cost > GEN_PATTERN_STEPS) {
        char msg[200];
        snprintf(msg, sizeof msg, "string.%s: pattern '%.40s%s' over a %zu-byte subject could take %.1e steps "
                 "(at most %.0e)", pat_names[kind], p, m > 40 ? "..." : "", n, cost, GEN_PATTERN_STEPS);
        return luaL_error(L, "%s", msg);
    }
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int l_rep(lua_State *L)
{
    size_t l, lsep = 0;
    luaL_checklstring(L, 1, &l);
    lua_Integer n = luaL_checkinteger(L, 2);
    luaL_optlstring(L, 3, "", &lsep);
    if (n > 0 && (n > SANDBOX_REP_MAX || (double)n * (double)(l + lsep) > GEN_SANDBOX_MEM))
        return luaL_error(L, "string.rep: %I copies of a %I-byte string are too many", n, (lua_Integer)l);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

static int l_move(lua_State *L)
{
    lua_Integer f = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
    if (e >= f && (lua_Unsigned)e - (lua_Unsigned)f >= (lua_Unsigned)SANDBOX_MOVE_MAX)
        return luaL_error(L, "table.move: %I..%I are too many elements", f, e);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return lua_gettop(L);
}

/* Replaces lib[name] (table on the top) by fn with the original as upvalue 1 (and kind as 2). */
static void wrap(lua_State *L, const char *name, lua_CFunction fn, int kind)
{
    lua_getfield(L, -1, name);
    int n = 1;
    if (kind >= 0) {
        lua_pushinteger(L, kind);
        n = 2;
    }
    lua_pushcclosure(L, fn, n);
    lua_setfield(L, -2, name);
}

/* ---- the state ----------------------------------------------------------------- */

gen_sandbox *gen_sandbox_new(void *user)
{
    gen_sandbox *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->user = user;
    s->instructions = GEN_SANDBOX_INSTRUCTIONS;
    s->ms = GEN_SANDBOX_MS;
    lua_State *L = s->L = lua_newstate(sb_alloc, s);
    if (!L) {
        free(s);
        return NULL;
    }
    /* setting up allocates: an out-of-memory error here is not caught, so stay far below the limit */
    static const luaL_Reg libs[] = {
        {LUA_GNAME, luaopen_base},     {LUA_STRLIBNAME, luaopen_string},
        {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
        {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL}};
    for (const luaL_Reg *l = libs; l->func; l++) {
        luaL_requiref(L, l->name, l->func, 1);
        lua_pop(L, 1);
    }
    static const char *const removed[] = {"dofile", "loadfile", "load", "require", "collectgarbage",
                                          "print", "warn", "rawequal", "rawget", "rawset", "rawlen", NULL};
    for (const char *const *r = removed; *r; r++) {
        lua_pushnil(L);
        lua_setglobal(L, *r);
    }
    lua_pushglobaltable(L);
    lua_pushcfunction(L, l_pcall);
    lua_setfield(L, -2, "pcall");
    lua_pushcfunction(L, l_xpcall);
    lua_setfield(L, -2, "xpcall");
    wrap(L, "setmetatable", l_setmetatable, -1);
    lua_pop(L, 1);
    lua_getglobal(L, "string");
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");   /* it would give bytecode back */
    for (int k = PAT_FIND; k <= PAT_GSUB; k++)
        wrap(L, pat_names[k], l_pattern, k);
    wrap(L, "rep", l_rep, -1);
    lua_pop(L, 1);
    lua_getglobal(L, "table");
    wrap(L, "move", l_move, -1);
    lua_pop(L, 1);
    lua_sethook(L, hook, LUA_MASKCOUNT, SANDBOX_STEP);
    return s;
}

void gen_sandbox_free(gen_sandbox *s)
{
    if (!s)
        return;
    lua_close(s->L);
    free(s);
}

void gen_sandbox_set_budget(gen_sandbox *s, long instructions, long ms)
{
    s->instructions = instructions > 0 ? instructions : GEN_SANDBOX_INSTRUCTIONS;
    s->ms = ms > 0 ? ms : GEN_SANDBOX_MS;
}

void gen_sandbox_recheck(lua_State *L) { recheck(L); }

/* Message handler of an entry: a non-string error object gets a text naming its type and
 * where it was raised; an error inside a library file names the line that called into it. */
static int l_msgh(lua_State *L)
{
    gen_sandbox *s = sb_of(L);
    if (s->tripped) {
        lua_pushstring(L, s->trip);
        return 1;
    }
    char at[200];
    where(L, 1, at, sizeof at);
    if (lua_type(L, 1) != LUA_TSTRING) {
        lua_pushfstring(L, "%s%serror object is a %s", at, at[0] ? " " : "", luaL_typename(L, 1));
        return 1;
    }
    /* the first Lua frame outside the file the error is in, when that is a library */
    const char *msg = lua_tostring(L, 1);
    if (strncmp(msg, "templates/lib/", 14) != 0)
        return 1;
    size_t flen = strcspn(msg, ":");
    lua_Debug ar;
    for (int level = 1; lua_getstack(L, level, &ar); level++) {
        if (!lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0)
            continue;
        if (strlen(ar.short_src) != flen || strncmp(ar.short_src, msg, flen) != 0) {
            lua_pushfstring(L, "%s (called from %s:%d)", msg, ar.short_src, ar.currentline);
            return 1;
        }
    }
    return 1;
}

struct body_call {
    int (*fn)(lua_State *L, void *arg);
    void *arg;
    int rc;
};

static int l_body(lua_State *L)
{
    struct body_call *b = lua_touserdata(L, 1);
    lua_settop(L, 0);
    b->rc = b->fn(L, b->arg);
    return 0;
}

int gen_sandbox_run(gen_sandbox *s, int (*body)(lua_State *L, void *arg), void *arg, char *err,
                    size_t errn)
{
    lua_State *L = s->L;
    err[0] = 0;
    lua_settop(L, 0);
    s->tripped = 0;
    s->periods = 0;
    s->deadline = now_ms() + (double)s->ms;
    lua_sethook(L, hook, LUA_MASKCOUNT, SANDBOX_STEP);
    struct body_call b = {body, arg, -1};
    /* pushing light C functions and a light userdata allocates nothing: this cannot fail */
    lua_pushcfunction(L, l_msgh);
    lua_pushcfunction(L, l_body);
    lua_pushlightuserdata(L, &b);
    int rc = lua_pcall(L, 1, 0, 1);
    if (s->tripped) {
        snprintf(err, errn, "%s", s->trip);
    } else if (rc != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        snprintf(err, errn, "%s", msg ? msg : "error object is not a string");
    }
    lua_settop(L, 0);
    lua_sethook(L, hook, LUA_MASKCOUNT, SANDBOX_STEP);
    return s->tripped || rc != LUA_OK ? -1 : b.rc;
}
