/* gen/json.h: JSON string escaping (RFC 8259) for the CLI's and the tuner's --json output */
#ifndef KF_GEN_JSON_H
#define KF_GEN_JSON_H

#include <stddef.h>

/* Writes s into buf[n] as a quoted JSON string: " \ and the control characters
 * escaped (\b \f \n \r \t, the rest as \u00XX), other bytes as they are. When the
 * result does not fit, s is cut before the escape or UTF-8 sequence that overflows and
 * the closing quote is kept, so buf always holds one valid JSON value. s NULL writes
 * null (no quotes). n must be at least 5. Returns buf, for use as a printf argument. */
const char *gen_json_str(char *buf, size_t n, const char *s);

#endif
