/* runtime/binkey.h: which binary a chosen variant runs (a winner's timed cubin, or its params under the current templates) */
#ifndef KF_RT_BINKEY_H
#define KF_RT_BINKEY_H

#include <stddef.h>

#include "runtime/jit.h"
#include "runtime/select.h"

/*
 * The variant key and binary cache key the plan loads for choice ch.
 *  - The template default (ch->winner NULL): the keys of ch->vp under the current templates
 *    (needs the generator: -1 with a message without one).
 *  - A winner from the database, with a generator (jit != NULL): its params keyed under the
 *    current templates, so a template changed since the tuning run (a fix, a new fragment) is
 *    compiled anew rather than served from the old cubin (design.md: change the template and the
 *    old binary is not used). When the current template no longer accepts the winner's params,
 *    the winner's own binary is used.
 *  - A winner from a bundle, or any winner without a generator (libkforge_rt): the winner's own
 *    binary, as timed: a bundle is a frozen set of cubins.
 * Returns 1 when a winner was keyed anew (its cubin is not the one the tuner timed), 0 otherwise,
 * -1 on failure (status and message in *e). Pure apart from the generator's memo of rendered keys.
 */
int rt_binary_keys(rt_jit *jit, const rt_choice *ch, const rt_devinfo *dev, char *variant, size_t vn,
                   char *key, size_t kn, core_err *e);

#endif
