/* gen/kernels.c: the kernels of a variant (name, threads, dynamic shared memory, dependent launch) and their stored text form */
#include "gen/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gen_kernels_format(const gen_kernel *k, int n, char *buf, size_t len)
{
    size_t w = 0;
    buf[0] = 0;
    for (int i = 0; i < n && w < len; i++)
        w += (size_t)snprintf(buf + w, len - w, "%s%s/%d/%d%s", i ? "," : "", k[i].name, k[i].threads,
                              k[i].smem, k[i].pdl ? "/pdl" : "");
}

int gen_kernels_parse(const char *text, gen_kernel *k, int max)
{
    int n = 0;
    const char *p = text;
    while (p && *p) {
        if (n >= max)
            return -1;
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char item[128];
        if (len >= sizeof item)
            return -1;
        memcpy(item, p, len);
        item[len] = 0;
        char *s1 = strchr(item, '/');
        char *s2 = s1 ? strchr(s1 + 1, '/') : NULL;
        if (!s1 || !s2 || (size_t)(s1 - item) >= sizeof k[n].name)
            return -1;
        *s1 = 0;
        memcpy(k[n].name, item, (size_t)(s1 - item) + 1);
        k[n].threads = atoi(s1 + 1);
        char *s3 = strchr(s2 + 1, '/');
        if (s3 && strcmp(s3, "/pdl"))
            return -1;
        k[n].pdl = s3 != NULL;
        if (s3)
            *s3 = 0;
        k[n].smem = atoi(s2 + 1);
        n++;
        p = end ? end + 1 : NULL;
    }
    return n;
}

