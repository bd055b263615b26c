/* runtime/shape.c: the one check of a family's shape that the C API's descriptions and the CLI's --shape strings go through */
#include "runtime/shape.h"
#include "runtime/family.h"

#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

typedef rt_shape_field field;
typedef rt_shape_rules family_rules;

typedef struct chk {
    const family_rules *r;
    const gen_kvset *s;
    rt_names names;
    core_err *e;
} chk;

static const char *nm(const chk *c, const char *key)
{
    if (c->names == RT_NAMES_DESC)
        for (const field *f = c->r->fields; f->key; f++)
            if (!strcmp(f->key, key))
                return f->desc;
    return key;
}

static long long iv(const chk *c, const char *key) { return gen_kv_int(c->s, key, 0); }

static kf_status say(const chk *c, kf_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static kf_status say(const chk *c, kf_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    core_err_vset(c->e, st, fmt, ap);
    va_end(ap);
    return st;
}

/* key >= lo, with "must be positive" (lo 1) or "must be >= lo" */
static kf_status at_least(const chk *c, const char *key, long long lo)
{
    long long v = iv(c, key);
    if (v >= lo)
        return KF_OK;
    if (lo == 1)
        return say(c, KF_ERR_ARG, "%s must be positive, got %lld", nm(c, key), v);
    return say(c, KF_ERR_ARG, "%s must be >= %lld, got %lld", nm(c, key), lo, v);
}

static kf_status flag(const chk *c, const char *key)
{
    long long v = iv(c, key);
    return v == 0 || v == 1 ? KF_OK : say(c, KF_ERR_ARG, "%s must be 0 or 1, got %lld", nm(c, key), v);
}

static kf_status dtype(const chk *c)
{
    const char *v = gen_kv_str(c->s, "dtype");
    if (!strcmp(v, "bf16") || !strcmp(v, "fp16"))
        return KF_OK;
    return say(c, KF_ERR_ARG, "%s = '%s' must be bf16 or fp16", nm(c, "dtype"), v);
}

static kf_status multiple(const chk *c, const char *a, const char *b)
{
    if (iv(c, a) % iv(c, b) == 0)
        return KF_OK;
    return say(c, KF_ERR_ARG, "%s (%lld) must be a multiple of %s (%lld)", nm(c, a), iv(c, a), nm(c, b), iv(c, b));
}

/* a * b within an int (rows of the split workspace, tokens of a call) */
static kf_status product_fits(const chk *c, const char *a, const char *b, const char *what)
{
    long long p;
    if (!rt_mul_ll(iv(c, a), iv(c, b), &p) && p <= INT_MAX)
        return KF_OK;
    return say(c, KF_ERR_ARG, "%s * %s = %lld * %lld is more than %d %s", nm(c, a), nm(c, b), iv(c, a), iv(c, b),
               INT_MAX, what);
}

/* ---- the families ------------------------------------------------------------------------ */

#define GQA_FIELDS                                                                                            \
    {"dtype", "desc.dtype", 1}, {"b", "desc.max_batch", 0}, {"sq", "desc.max_q", 0}, {"skv", "desc.max_kv", 0}, \
        {"hq", "desc.hq", 0}, {"hkv", "desc.hkv", 0}, {"d", "desc.d", 0}, {"causal", "desc.causal", 0}

/* the model features: optional, absent when off (runtime/attn_features.c sets them from a description) */
#define GQA_FEATURE_FIELDS                                                                                    \
    {"window", "desc.window_left", 0, 1}, {"softcap", "desc.softcap", 0, 1}, {"sinks", "desc.sinks", 0, 1},   \
        {"kv_dtype", "desc.kv_dtype", 1, 1}, {"page_size", "desc.page_size", 0, 1}

static const field gqa_fields[] = {GQA_FIELDS, GQA_FEATURE_FIELDS, {NULL, NULL, 0, 0}};

/* The feature keys a shape has, each within its range. */
static kf_status gqa_features(const chk *c)
{
    const gen_kv *e;
    if ((e = gen_kv_find(c->s, "window")) && e->i < 0)
        return say(c, KF_ERR_ARG, "%s must be >= 0, got %lld", nm(c, "window"), e->i);
    if ((e = gen_kv_find(c->s, "window")) && !iv(c, "causal"))
        return say(c, KF_ERR_UNSUPPORTED, "a sliding window (%s = %lld) needs causal attention (%s = 0)", nm(c, "window"),
                   e->i, nm(c, "causal"));
    if ((e = gen_kv_find(c->s, "softcap")) && e->i < 1)
        return say(c, KF_ERR_ARG, "%s must be positive (leave it out for none), got %lld", nm(c, "softcap"), e->i);
    if ((e = gen_kv_find(c->s, "sinks")) && e->i != 0 && e->i != 1)
        return say(c, KF_ERR_ARG, "%s must be 0 or 1, got %lld", nm(c, "sinks"), e->i);
    if ((e = gen_kv_find(c->s, "kv_dtype")) && strcmp(e->s, "e4m3") && strcmp(e->s, gen_kv_str(c->s, "dtype")))
        return say(c, KF_ERR_ARG, "%s = '%s' must be e4m3 or the dtype", nm(c, "kv_dtype"), e->s);
    if ((e = gen_kv_find(c->s, "page_size")) && e->i < 1)
        return say(c, KF_ERR_ARG, "%s must be >= 1 (leave it out for contiguous K/V), got %lld", nm(c, "page_size"), e->i);
    return KF_OK;
}

static kf_status gqa(const family_rules *r, const gen_kvset *s, rt_names names, core_err *e)
{
    chk c = {r, s, names, e};
    kf_status st;
    if ((st = dtype(&c)) || (st = at_least(&c, "hq", 1)) || (st = at_least(&c, "hkv", 1)) ||
        (st = multiple(&c, "hq", "hkv")) || (st = at_least(&c, "d", 1)) || (st = flag(&c, "causal")) ||
        (st = at_least(&c, "b", 1)) || (st = at_least(&c, "sq", 1)) || (st = at_least(&c, "skv", 0)) ||
        (st = product_fits(&c, "b", "sq", "query rows")) || (st = gqa_features(&c)))
        return st;
    if (r->reference)
        return KF_OK;
    long long d = iv(&c, "d");
    if (d != 64 && d != 128 && d != 256)
        return say(&c, KF_ERR_UNSUPPORTED, "head dim %s = %lld is not supported (64, 128 or 256)", nm(&c, "d"), d);
    if (r->max_sq && iv(&c, "sq") > r->max_sq)
        return say(&c, KF_ERR_UNSUPPORTED, "decode serves up to %d query rows per sequence, %s = %lld (prefill serves more)",
                   r->max_sq, nm(&c, "sq"), iv(&c, "sq"));
    return KF_OK;
}

static const field combine_fields[] = {{"dtype", "dtype", 1}, {"b", "b", 0}, {"sq", "sq", 0}, {"hq", "hq", 0},
                                       {"dv", "dv", 0}, {"sinks", "sinks", 0, 1}, {NULL, NULL, 0}};

static kf_status combine(const family_rules *r, const gen_kvset *s, rt_names names, core_err *e)
{
    chk c = {r, s, names, e};
    kf_status st;
    if ((st = dtype(&c)) || (st = at_least(&c, "b", 1)) || (st = at_least(&c, "sq", 1)) ||
        (st = at_least(&c, "hq", 1)) || (st = at_least(&c, "dv", 1)) || (st = product_fits(&c, "b", "sq", "query rows")))
        return st;
    return KF_OK;
}

static const field parts_fields[] = {
    {"dtype", "desc.dtype", 1}, {"b", "desc.max_batch", 0}, {"sq", "desc.max_q", 0}, {"skv", "desc.max_kv", 0},
    {"hq", "desc.hq", 0}, {"hkv", "desc.hkv", 0}, {"parts", "desc.parts", 1}, {"value", "desc.value", 1},
    {"dv", "desc.dv", 0}, {"layers", "desc.layers", 0}, {"page_size", "desc.page_size", 0},
    {"causal", "desc.causal", 0}, {"kv_dtype", "desc.kv_dtype", 1, 1}, {NULL, NULL, 0}};

int rt_parts_parse(const char *s, int dims[KF_PARTS_MAXK])
{
    int n = 0;
    const char *c = s;
    if (!s || !*s)
        return -1;
    while (*c) {
        if (n == KF_PARTS_MAXK || !islower((unsigned char)*c))
            return -1;
        while (islower((unsigned char)*c))
            c++;
        if (!isdigit((unsigned char)*c))
            return -1;
        long v = 0;
        while (isdigit((unsigned char)*c) && v < 100000)
            v = v * 10 + (*c++ - '0');
        dims[n++] = (int)v;
        if (*c == '_' && c[1])
            c++;
        else if (*c)
            return -1;
    }
    return n;
}

static kf_status parts(const family_rules *r, const gen_kvset *s, rt_names names, core_err *e)
{
    chk c = {r, s, names, e};
    kf_status st;
    if ((st = dtype(&c)))
        return st;
    const char *ps = gen_kv_str(s, "parts"), *value = gen_kv_str(s, "value");
    int dims[KF_PARTS_MAXK], nk = strlen(ps) < 64 ? rt_parts_parse(ps, dims) : -1;
    if (nk < 1)
        return say(&c, KF_ERR_ARG, "%s = '%.80s' is not 1..4 parts <name><dim> joined by '_'", nm(&c, "parts"), ps);
    int sum = 0;
    for (int i = 0; i < nk; i++) {
        if (dims[i] < 16 || dims[i] % 16 || dims[i] > 1024)
            return say(&c, KF_ERR_UNSUPPORTED, "%s = '%s': part %d has dim %d (a multiple of 16 in 16..1024)",
                       nm(&c, "parts"), ps, i, dims[i]);
        sum += dims[i];
    }
    char alias[80];
    size_t k = 0;
    while (islower((unsigned char)ps[k]))
        k++;
    snprintf(alias, sizeof alias, "alias_%.*s", (int)k, ps);
    int separate = !strcmp(value, "separate");
    if (!separate && strcmp(value, alias))
        return say(&c, KF_ERR_ARG, "%s = '%s' must be 'separate' or '%s' (the first part's name)", nm(&c, "value"),
                   value, alias);
    long long dv = iv(&c, "dv");
    if (separate && dv != sum)
        return say(&c, KF_ERR_ARG, "%s = %lld must be the sum of the parts' dims (%d) with separate values", nm(&c, "dv"),
                   dv, sum);
    if (!separate && (dv < 16 || dv % 16 || dv > dims[0]))
        return say(&c, KF_ERR_ARG, "%s = %lld must be a multiple of 16 within key part 0 (%d columns)", nm(&c, "dv"), dv,
                   dims[0]);
    long long hq = iv(&c, "hq"), hkv = iv(&c, "hkv");
    if (hq <= 0 || hkv <= 0 || hq % hkv)
        return say(&c, KF_ERR_ARG, "%s = %lld, %s = %lld: both positive, hq a multiple of hkv", nm(&c, "hq"), hq,
                   nm(&c, "hkv"), hkv);
    long long layers = iv(&c, "layers"), page = iv(&c, "page_size");
    if (layers < 1 || layers > KF_PARTS_MAXL)
        return say(&c, KF_ERR_ARG, "%s must be 1..4, got %lld", nm(&c, "layers"), layers);
    if (page < 0)
        return say(&c, KF_ERR_ARG, "%s must be >= 0 (0: contiguous caches), got %lld", nm(&c, "page_size"), page);
    if (page && (page < 16 || page > 1024 || (page & (page - 1))))
        return say(&c, KF_ERR_UNSUPPORTED, "%s = %lld: 0 (contiguous) or a power of two in 16..1024", nm(&c, "page_size"),
                   page);
    if ((st = flag(&c, "causal")))
        return st;
    const gen_kv *kv = gen_kv_find(s, "kv_dtype");
    if (kv && strcmp(kv->s, "e4m3") && strcmp(kv->s, gen_kv_str(s, "dtype")))
        return say(&c, KF_ERR_ARG, "%s = '%s' must be e4m3 or the dtype", nm(&c, "kv_dtype"), kv->s);
    if (kv && !strcmp(kv->s, "e4m3") && (separate || layers != 1))
        return say(&c, KF_ERR_UNSUPPORTED, "the FP8 latent cache (%s e4m3) serves the absorbed-MLA form only (an aliased "
                   "value, one layer), got %s '%s' with %s %lld", nm(&c, "kv_dtype"), nm(&c, "value"), value,
                   nm(&c, "layers"), layers);
    long long b = iv(&c, "b"), sq = iv(&c, "sq");
    if (b <= 0 || b > 65535)
        return say(&c, KF_ERR_ARG, "%s must be 1..65535, got %lld", nm(&c, "b"), b);
    if (sq <= 0 || sq > 16)
        return say(&c, sq <= 0 ? KF_ERR_ARG : KF_ERR_UNSUPPORTED, "%s must be 1..16 (decode), got %lld", nm(&c, "sq"), sq);
    return at_least(&c, "skv", 0);
}

static const field kda_fields[] = {{"n", "desc.max_seqs", 0}, {"t", "tokens per sequence (desc.max_tokens / desc.max_seqs)", 0},
                                   {"h", "desc.h", 0}, {"hv", "desc.hv", 0}, {"dk", "desc.dk", 0},
                                   {"dv", "desc.dv", 0}, {NULL, NULL, 0}};

static kf_status kda(const family_rules *r, const gen_kvset *s, rt_names names, core_err *e)
{
    chk c = {r, s, names, e};
    kf_status st;
    if ((st = at_least(&c, "n", 1)) || (st = at_least(&c, "t", 1)) || (st = at_least(&c, "h", 1)) ||
        (st = at_least(&c, "hv", 1)) || (st = multiple(&c, "hv", "h")) || (st = at_least(&c, "dk", 1)) ||
        (st = at_least(&c, "dv", 1)) || (st = product_fits(&c, "n", "t", "tokens")))
        return st;
    if (r->reference)
        return KF_OK;
    long long dk = iv(&c, "dk"), dv = iv(&c, "dv");
    if (dk != 64 && dk != 128)
        return say(&c, KF_ERR_UNSUPPORTED, "head dim %s = %lld is not supported (64 or 128)", nm(&c, "dk"), dk);
    if (dv != 64 && dv != 128)
        return say(&c, KF_ERR_UNSUPPORTED, "head dim %s = %lld is not supported (64 or 128)", nm(&c, "dv"), dv);
    if (dk != dv)
        return say(&c, KF_ERR_UNSUPPORTED, "%s = %lld and %s = %lld differ: the KDA kernels are verified for dk = dv only",
                   nm(&c, "dk"), dk, nm(&c, "dv"), dv);
    if (iv(&c, "n") > 65535)
        return say(&c, KF_ERR_UNSUPPORTED, "%s = %lld: at most 65535 sequences a call", nm(&c, "n"), iv(&c, "n"));
    if (iv(&c, "hv") > 65535)
        return say(&c, KF_ERR_UNSUPPORTED, "%s = %lld: at most 65535 value heads", nm(&c, "hv"), iv(&c, "hv"));
    return KF_OK;
}

static const field gemm_fields[] = {{"m", "m", 0}, {"n", "n", 0}, {"k", "k", 0}, {NULL, NULL, 0}};

static kf_status gemm(const family_rules *r, const gen_kvset *s, rt_names names, core_err *e)
{
    chk c = {r, s, names, e};
    kf_status st;
    if ((st = at_least(&c, "m", 1)) || (st = at_least(&c, "n", 1)) || (st = at_least(&c, "k", 1)))
        return st;
    return KF_OK;
}

/* the rules the family table's entries point at (runtime/family.c) */
const rt_shape_rules rt_shape_gqa = {gqa_fields, gqa, 0, 0};
const rt_shape_rules rt_shape_gqa_decode = {gqa_fields, gqa, 0, 16};
const rt_shape_rules rt_shape_gqa_naive = {gqa_fields, gqa, 1, 0};
const rt_shape_rules rt_shape_combine = {combine_fields, combine, 0, 0};
const rt_shape_rules rt_shape_parts = {parts_fields, parts, 0, 0};
const rt_shape_rules rt_shape_kda = {kda_fields, kda, 0, 0};
const rt_shape_rules rt_shape_kda_naive = {kda_fields, kda, 1, 0};
const rt_shape_rules rt_shape_gemm = {gemm_fields, gemm, 0, 0};

/* ---- the check ------------------------------------------------------------------------------ */

static int in_fields(const field *f, const char *key)
{
    for (; f->key; f++)
        if (!strcmp(f->key, key))
            return 1;
    return 0;
}

static void list_keys(const family_rules *r, const gen_kvset *declared, char *buf, size_t n)
{
    size_t len = 0;
    buf[0] = 0;
    if (declared)
        for (int i = 0; i < declared->n && len < n; i++)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", i ? ", " : "", declared->kv[i].name);
    else
        for (const field *f = r->fields; f->key && len < n; f++)
            len += (size_t)snprintf(buf + len, n - len, "%s%s", f == r->fields ? "" : ", ", f->key);
}

kf_status rt_shape_check(const char *family, const gen_kvset *shape, const gen_kvset *declared, rt_names names,
                         core_err *e)
{
    if (!shape)
        return core_err_set(e, KF_ERR_ARG, "shape is NULL");
    if (!family)
        family = gen_kv_str(shape, "family");
    if (!family)
        return core_err_set(e, KF_ERR_ARG, "the shape names no family");
    const rt_family *fam = rt_family_find(family);
    const family_rules *r = fam ? fam->shape : NULL;
    char keys[512];
    /* no key the family does not read */
    for (int i = 0; i < shape->n; i++) {
        const gen_kv *kv = &shape->kv[i];
        if (!strcmp(kv->name, "family"))
            continue;
        int known = declared ? gen_kv_find(declared, kv->name) != NULL : (!r || in_fields(r->fields, kv->name));
        if (!known) {
            list_keys(r, declared, keys, sizeof keys);
            return core_err_set(e, KF_ERR_ARG,
                                "unknown shape key '%s' for '%s' (its keys: %s)", kv->name, family, keys);
        }
    }
    if (!r) {  /* a family of a template directory: sizes are never negative nor past an int */
        for (int i = 0; i < shape->n; i++) {
            const gen_kv *kv = &shape->kv[i];
            if (!kv->is_str && (kv->i < 0 || kv->i > INT_MAX))
                return core_err_set(e, KF_ERR_ARG, "shape key '%s' = %lld is outside 0..%d", kv->name, kv->i, INT_MAX);
        }
        return KF_OK;
    }
    chk c = {r, shape, names, e};
    /* every field present, with its type, integers within the C API's int fields */
    for (const field *f = r->fields; f->key; f++) {
        const gen_kv *kv = gen_kv_find(shape, f->key);
        if (!kv && f->optional)
            continue;       /* a model feature that is off */
        if (!kv && declared && gen_kv_find(declared, f->key))
            return KF_OK;   /* the template's own check (gen_tmpl_fixed) names the missing field */
        if (!kv)
            return say(&c, KF_ERR_ARG, "the shape of '%s' lacks '%s'", family, f->key);
        if (f->is_str && !kv->is_str)
            return say(&c, KF_ERR_ARG, "%s = %lld must be a name, not a number", nm(&c, f->key), kv->i);
        if (!f->is_str && kv->is_str)
            return say(&c, KF_ERR_ARG, "%s = '%s' must be an integer", nm(&c, f->key), kv->s);
        if (!f->is_str && (kv->i < INT_MIN || kv->i > INT_MAX))
            return say(&c, KF_ERR_ARG, "%s = %lld is outside the range of an int (at most %d)", nm(&c, f->key), kv->i,
                       INT_MAX);
    }
    return r->check(r, shape, names, e);
}

long long rt_span(int ndim, const long long *extent, const long long *stride)
{
    long long span = 1;
    for (int i = 0; i < ndim; i++) {
        long long t;
        if (extent[i] <= 0)
            return 0;
        if (rt_mul_ll(extent[i] - 1, stride[i], &t) || rt_add_ll(span, t, &span))
            return -1;
    }
    return span;
}
