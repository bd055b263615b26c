/* gen/kv.h: small ordered sets of named integer/string values (shapes, fixed values, params) */
#ifndef KF_GEN_KV_H
#define KF_GEN_KV_H

#include <stddef.h>

#define GEN_KV_MAX 40
#define GEN_KV_NAME 32
#define GEN_KV_STR 48

typedef struct gen_kv {
    char name[GEN_KV_NAME];
    int is_str;
    long long i;
    char s[GEN_KV_STR];
} gen_kv;

/* Entries are kept sorted by name, so the canonical text is the set's order. */
typedef struct gen_kvset {
    int n;
    gen_kv kv[GEN_KV_MAX];
} gen_kvset;

void gen_kv_clear(gen_kvset *set);
/* Set (insert or replace). Return 0, or -1 when the name or value is not
 * [a-z_]+ / [A-Za-z0-9_]+ or the set is full. */
int gen_kv_set_int(gen_kvset *set, const char *name, long long v);
int gen_kv_set_str(gen_kvset *set, const char *name, const char *v);
const gen_kv *gen_kv_find(const gen_kvset *set, const char *name);
/* Integer value of name, or dflt when absent or a string. */
long long gen_kv_int(const gen_kvset *set, const char *name, long long dflt);
/* String value of name, or NULL. */
const char *gen_kv_str(const gen_kvset *set, const char *name);
int gen_kv_remove(gen_kvset *set, const char *name);
/* Copies every entry of src into dst (replacing same names). */
int gen_kv_merge(gen_kvset *dst, const gen_kvset *src);

/* Canonical "a=1,b=bf16" (sorted). Returns the length written (truncation is an error: -1). */
int gen_kv_format(const gen_kvset *set, char *buf, size_t n);
/* Key form "a1.b-bf16" (sorted; strings as name-value). */
int gen_kv_keyform(const gen_kvset *set, char *buf, size_t n);
/* Parses "a=1,b=bf16" (also accepts spaces around items and ';'). On error returns -1
 * and writes a message naming the bad item into err. Integers accept k/K (x1024) suffix;
 * one past the 64-bit range is an error, and so is a name given twice in text. */
int gen_kv_parse(gen_kvset *set, const char *text, char *err, size_t errn);

#endif
