/* gen/hash.h: content hashes of templates and fragments (XXH3-128 from xxHash) */
#ifndef KF_GEN_HASH_H
#define KF_GEN_HASH_H

#include <stddef.h>

typedef struct gen_hash128 {
    void *state;   /* XXH3_state_t, owned */
} gen_hash128;

void gen_hash128_init(gen_hash128 *h);
void gen_hash128_update(gen_hash128 *h, const void *data, size_t len);
/* Writes 32 lower-case hex digits and a NUL into hex[33]; frees the state. */
void gen_hash128_hex(gen_hash128 *h, char hex[33]);
/* One-shot hash of a string into hex[33]. */
void gen_hash128_str(const char *s, char hex[33]);

#endif
