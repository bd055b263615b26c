/* gen/json.c: JSON string escaping (RFC 8259) for the CLI's and the tuner's --json output */
#include "gen/json.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

const char *gen_json_str(char *buf, size_t n, const char *s)
{
    assert(buf && n >= 5);
    if (!s)
        return strcpy(buf, "null");
    size_t o = 0;
    buf[o++] = '"';
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        const char *e = esc;
        switch (*p) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        default:
            if (*p < 0x20)
                snprintf(esc, sizeof esc, "\\u%04x", *p);
            else
                esc[0] = (char)*p, esc[1] = 0;
        }
        size_t len = strlen(e);
        if (o + len + 2 > n) {              /* room for the closing quote and the NUL */
            if ((*p & 0xC0) == 0x80) {      /* mid UTF-8 sequence: drop its lead and continuation bytes */
                while (o > 1 && ((unsigned char)buf[o - 1] & 0xC0) == 0x80)
                    o--;
                if (o > 1 && ((unsigned char)buf[o - 1] & 0xC0) == 0xC0)
                    o--;
            }
            break;
        }
        memcpy(buf + o, e, len);
        o += len;
    }
    buf[o++] = '"';
    buf[o] = 0;
    return buf;
}
