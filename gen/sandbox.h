/* gen/sandbox.h: one sandboxed Lua state and the budget (memory, instructions, wall clock) Lua code cannot escape */
#ifndef KF_GEN_SANDBOX_H
#define KF_GEN_SANDBOX_H

#include <stddef.h>

struct lua_State;

#define GEN_SANDBOX_MEM (256u << 20)            /* bytes one state may hold */
#define GEN_SANDBOX_INSTRUCTIONS 500000000L     /* VM instructions per entry */
#define GEN_SANDBOX_MS 10000                    /* wall-clock milliseconds per entry */
#define GEN_PATTERN_STEPS 1e8                   /* worst-case steps of one string pattern call */

typedef struct gen_sandbox gen_sandbox;

/* A fresh state: base (without load, loadfile, dofile, require, collectgarbage, print,
 * warn, raw*), string (without dump), table, math, utf8; no io, os, debug, package,
 * coroutine. pcall and xpcall cannot swallow a spent budget, setmetatable refuses
 * __gc, and the C functions whose time Lua's hook cannot see (string.find, match,
 * gmatch, gsub, rep, table.move) refuse work over a bound. user is handed back by
 * gen_sandbox_user. NULL when out of memory. */
gen_sandbox *gen_sandbox_new(void *user);
void gen_sandbox_free(gen_sandbox *s);
struct lua_State *gen_sandbox_lua(gen_sandbox *s);
void *gen_sandbox_user(struct lua_State *L);
/* Budget of every later entry (instructions, milliseconds); the defaults above. */
void gen_sandbox_set_budget(gen_sandbox *s, long instructions, long ms);

/* One entry into Lua: runs body(L, arg) in protected mode under a fresh budget, with
 * an empty stack. body returns 0 or -1 (its own message, left where it put it).
 * A Lua error in body (or in Lua code it calls with lua_call) becomes -1 with
 * "file:line: message" in err; a non-string error object is named by its type and
 * where it was raised; a spent budget is "file:line: budget exceeded: ..." even when
 * Lua code caught it. Returns body's value, or -1 with err set (err[0] == 0 when body
 * failed with its own message). */
int gen_sandbox_run(gen_sandbox *s, int (*body)(struct lua_State *L, void *arg), void *arg,
                    char *err, size_t errn);

/* From a C function Lua called: raises the budget error again when it is spent (after a
 * lua_pcall of its own, which would otherwise have caught it). */
void gen_sandbox_recheck(struct lua_State *L);

/* Worst-case steps of string.find/match/gmatch/gsub of pat over a subject (exposed for tests). */
double gen_pattern_cost(const char *s, size_t n, const char *p, size_t m, int anchor_ok, int plain);

#endif
