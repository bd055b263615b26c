/* gen/kv.c: small ordered sets of named integer/string values (shapes, fixed values, params) */
#include "gen/kv.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= GEN_KV_NAME)
        return 0;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || *s == '_'))
            return 0;
    return 1;
}

static int valid_str(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= GEN_KV_STR)
        return 0;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_'))
            return 0;
    return 1;
}

void gen_kv_clear(gen_kvset *set) { set->n = 0; }

/* Returns the slot for name, inserting it in sorted position; NULL when full. */
static gen_kv *slot(gen_kvset *set, const char *name)
{
    int i = 0;
    while (i < set->n && strcmp(set->kv[i].name, name) < 0)
        i++;
    if (i < set->n && strcmp(set->kv[i].name, name) == 0)
        return &set->kv[i];
    if (set->n >= GEN_KV_MAX)
        return NULL;
    memmove(&set->kv[i + 1], &set->kv[i], (size_t)(set->n - i) * sizeof(gen_kv));
    set->n++;
    memset(&set->kv[i], 0, sizeof(gen_kv));
    snprintf(set->kv[i].name, GEN_KV_NAME, "%s", name);
    return &set->kv[i];
}

int gen_kv_set_int(gen_kvset *set, const char *name, long long v)
{
    if (!valid_name(name))
        return -1;
    gen_kv *e = slot(set, name);
    if (!e)
        return -1;
    e->is_str = 0;
    e->i = v;
    e->s[0] = 0;
    return 0;
}

int gen_kv_set_str(gen_kvset *set, const char *name, const char *v)
{
    if (!valid_name(name) || !valid_str(v))
        return -1;
    gen_kv *e = slot(set, name);
    if (!e)
        return -1;
    e->is_str = 1;
    e->i = 0;
    snprintf(e->s, GEN_KV_STR, "%s", v);
    return 0;
}

const gen_kv *gen_kv_find(const gen_kvset *set, const char *name)
{
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->kv[i].name, name) == 0)
            return &set->kv[i];
    return NULL;
}

long long gen_kv_int(const gen_kvset *set, const char *name, long long dflt)
{
    const gen_kv *e = gen_kv_find(set, name);
    return (e && !e->is_str) ? e->i : dflt;
}

const char *gen_kv_str(const gen_kvset *set, const char *name)
{
    const gen_kv *e = gen_kv_find(set, name);
    return (e && e->is_str) ? e->s : NULL;
}

int gen_kv_remove(gen_kvset *set, const char *name)
{
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->kv[i].name, name) == 0) {
            memmove(&set->kv[i], &set->kv[i + 1], (size_t)(set->n - i - 1) * sizeof(gen_kv));
            set->n--;
            return 0;
        }
    return -1;
}

int gen_kv_merge(gen_kvset *dst, const gen_kvset *src)
{
    for (int i = 0; i < src->n; i++) {
        const gen_kv *e = &src->kv[i];
        int rc = e->is_str ? gen_kv_set_str(dst, e->name, e->s) : gen_kv_set_int(dst, e->name, e->i);
        if (rc)
            return -1;
    }
    return 0;
}

static int emit(const gen_kvset *set, char *buf, size_t n, const char *sep, const char *isep,
                const char *ssep)
{
    size_t len = 0;
    if (n == 0)
        return -1;
    buf[0] = 0;
    for (int i = 0; i < set->n; i++) {
        const gen_kv *e = &set->kv[i];
        int w = e->is_str ? snprintf(buf + len, n - len, "%s%s%s%s", i ? sep : "", e->name, ssep, e->s)
                          : snprintf(buf + len, n - len, "%s%s%s%lld", i ? sep : "", e->name, isep, e->i);
        if (w < 0 || (size_t)w >= n - len)
            return -1;
        len += (size_t)w;
    }
    return (int)len;
}

int gen_kv_format(const gen_kvset *set, char *buf, size_t n) { return emit(set, buf, n, ",", "=", "="); }

int gen_kv_keyform(const gen_kvset *set, char *buf, size_t n) { return emit(set, buf, n, ".", "", "-"); }

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

int gen_kv_parse(gen_kvset *set, const char *text, char *err, size_t errn)
{
    char buf[2048];
    if (strlen(text) >= sizeof buf) {
        snprintf(err, errn, "too long (%zu characters)", strlen(text));
        return -1;
    }
    snprintf(buf, sizeof buf, "%s", text);
    gen_kvset seen;   /* the names of this text: each at most once */
    gen_kv_clear(&seen);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",;", &save); item; item = strtok_r(NULL, ",;", &save)) {
        char *t = trim(item);
        if (!*t)
            continue;
        char *eq = strchr(t, '=');
        if (!eq) {
            snprintf(err, errn, "'%s' is not name=value", t);
            return -1;
        }
        *eq = 0;
        char *name = trim(t), *val = trim(eq + 1);
        if (!valid_name(name)) {
            snprintf(err, errn, "bad name '%s' (lower-case letters and '_')", name);
            return -1;
        }
        if (gen_kv_find(&seen, name)) {
            snprintf(err, errn, "'%s' is given twice", name);
            return -1;
        }
        if (gen_kv_set_int(&seen, name, 0)) {
            snprintf(err, errn, "too many values at '%s'", name);
            return -1;
        }
        char *end = NULL;
        errno = 0;
        long long v = strtoll(val, &end, 10);
        int number = end != val && (*end == 0 || ((*end == 'k' || *end == 'K') && end[1] == 0));
        if (number && (errno == ERANGE || (*end && __builtin_mul_overflow(v, 1024LL, &v)))) {
            snprintf(err, errn, "value '%s' of '%s' is out of range (a 64-bit integer)", val, name);
            return -1;
        }
        if (number) {
            if (gen_kv_set_int(set, name, v)) {
                snprintf(err, errn, "too many values at '%s'", name);
                return -1;
            }
        } else if (gen_kv_set_str(set, name, val)) {
            snprintf(err, errn, "bad value '%s' for '%s' (letters, digits and '_')", val, name);
            return -1;
        }
    }
    return 0;
}
