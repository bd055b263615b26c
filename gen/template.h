/* gen/template.h: Lua templates in a sandbox: load, validate, enumerate, render, kernel facts */
#ifndef KF_GEN_TEMPLATE_H
#define KF_GEN_TEMPLATE_H

#include <stddef.h>

#include "gen/device.h"
#include "gen/kernels.h"
#include "gen/kv.h"
#include "gen/source.h"

#define GEN_PARAM_VALUES 32
#define GEN_PARAMS_MAX 16
typedef struct gen_param {
    char name[GEN_KV_NAME];
    int runtime;          /* listed in the template's `runtime` table */
    int n;
    gen_kv values[GEN_PARAM_VALUES];
} gen_param;

typedef struct gen_space {
    int n;
    gen_param p[GEN_PARAMS_MAX];  /* sorted by name */
} gen_space;

typedef struct gen_host gen_host;
typedef struct gen_tmpl gen_tmpl;

/* A host reading templates from dir (NULL: $KFORGE_TEMPLATE_DIR or the embedded copy).
 * Every template and every sweep file runs in a sandboxed Lua state of its own
 * (gen/sandbox.c), so none can change what another renders; library files are
 * imported into each state that asks for them (import(path), templates/README.md).
 * Not thread-safe: one thread uses a host at a time. */
gen_host *gen_host_new(const char *dir);

void gen_host_free(gen_host *h);
const char *gen_host_errmsg(const gen_host *h);   /* last error, never NULL */
const gen_source *gen_host_source(const gen_host *h);
/* Calls fn with each family name (every templates/<name>.lua), sorted. */
int gen_host_families(gen_host *h, int (*fn)(const char *family, void *arg), void *arg);

/* Loads (once per host) templates/<family>.lua and validates its table.
 * NULL on error: message "templates/x.lua:LINE: message" on the host. */
gen_tmpl *gen_tmpl_load(gen_host *h, const char *family);
const char *gen_tmpl_family(const gen_tmpl *t);
gen_host *gen_tmpl_host(const gen_tmpl *t);
const char *gen_tmpl_doc(const gen_tmpl *t);
const char *gen_tmpl_hash(const gen_tmpl *t);     /* 32 hex digits */
const char *gen_tmpl_text(const gen_tmpl *t);     /* the .lua source */
const gen_space *gen_tmpl_space(const gen_tmpl *t);
/* Shape fields the template declares, as "name:type" pairs in a kvset (value = type: int, string, int_opt, string_opt). */
const gen_kvset *gen_tmpl_shape_fields(const gen_tmpl *t);
/* Whether a declared shape type is optional ("int?" / "string?" in the template, kept as "int_opt" /
 * "string_opt"): a shape may leave such a field out (a model feature that is off). */
static inline int gen_shape_optional(const char *type)
{
    size_t n = type ? __builtin_strlen(type) : 0;
    return n > 4 && !__builtin_strcmp(type + n - 4, "_opt");
}
/* The fragments (includes that are not .lua files), the only headers a render may
 * #include: up to max (name, text) pairs, valid while the host lives. Returns the count. */
int gen_tmpl_headers(const gen_tmpl *t, const char **names, const char **texts, int max);

/* Every call below returns 0 on success, -1 on error (message on the host). */
/* Checks shape has every declared field with the right type, then runs fixed(). */
int gen_tmpl_fixed(gen_tmpl *t, const gen_kvset *shape, gen_kvset *fixed);
/* 1 valid, 0 not (why filled), -1 error. */
int gen_tmpl_valid(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params,
                   const gen_device *dev, char *why, size_t whyn);
int gen_tmpl_default(gen_tmpl *t, const gen_kvset *shape, const gen_device *dev, gen_kvset *params);
/* Cartesian product of the space (sorted by name, values in declared order); fn
 * gets each point and whether valid() accepts it. fn returns non-zero to stop. */
int gen_tmpl_enumerate(gen_tmpl *t, const gen_kvset *fixed, const gen_device *dev,
                       int (*fn)(const gen_kvset *params, int valid, const char *why, void *arg),
                       void *arg);
/* Checks that every param is in the space with a listed value. */
int gen_tmpl_check_params(gen_tmpl *t, const gen_kvset *params);
/* The source NVRTC sees: banner + render(params without runtime ones, fixed). *src malloc'd. */
int gen_tmpl_render(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params, char **src);
int gen_tmpl_kernels(gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params,
                     const gen_device *dev, gen_kernel *out, int max, int *n);

/* Variant key: family + fixed + params, sorted. With binary != 0 the template's
 * runtime params are left out (the key a binary is stored under). */
int gen_variant_key(const gen_tmpl *t, const gen_kvset *fixed, const gen_kvset *params,
                    int binary, char *buf, size_t n);


/* For gen/sweep.c: runs templates/<path> (a sweep file) in a fresh sandboxed state, then
 * read(L, arg) in protected mode with the chunk's value on the top of the stack. Returns
 * read's value, or -1 with the host's message. */
struct lua_State;
int gen_host_run_file(gen_host *h, const char *path, int (*read)(struct lua_State *L, void *arg),
                      void *arg);
/* Sets the host's message (printf style); returns -1. */
int gen_host_fail(gen_host *h, const char *fmt, ...);
#endif
