/* gen/hash.c: content hashes of templates and fragments (XXH3-128 from xxHash) */
#include "gen/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <stdio.h>
#include <string.h>

void gen_hash128_init(gen_hash128 *h)
{
    h->state = XXH3_createState();
    XXH3_128bits_reset((XXH3_state_t *)h->state);
}

void gen_hash128_update(gen_hash128 *h, const void *data, size_t len)
{
    XXH3_128bits_update((XXH3_state_t *)h->state, data, len);
}

void gen_hash128_hex(gen_hash128 *h, char hex[33])
{
    XXH128_hash_t v = XXH3_128bits_digest((XXH3_state_t *)h->state);
    XXH3_freeState((XXH3_state_t *)h->state);
    h->state = NULL;
    snprintf(hex, 33, "%016llx%016llx", (unsigned long long)v.high64, (unsigned long long)v.low64);
}

void gen_hash128_str(const char *s, char hex[33])
{
    gen_hash128 h;
    gen_hash128_init(&h);
    gen_hash128_update(&h, s, strlen(s));
    gen_hash128_hex(&h, hex);
}
