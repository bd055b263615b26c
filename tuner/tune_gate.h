/* tuner/tune_gate.h: the cases a shape is gated and timed on: full for timing, bounded for the correctness gate (pure) */
#ifndef KF_TUNER_TUNE_GATE_H
#define KF_TUNER_TUNE_GATE_H

#include <stdint.h>

#include "gen/kv.h"
#include "tuner/attn_run.h"

/* The gate case holds at most this many bytes of K+V: the gate runs on every variant (its
 * inputs filled on the host once per shape and run, uploaded for each variant). */
#define TUNE_GATE_KV_BYTES (1ll << 24)
/* Prefill gates on at most this many query rows and keys per sequence. */
#define TUNE_GATE_PREFILL_MAX 2048

/* Timing case of a GQA shape: exactly the shape, every sequence full, inputs from
 * seed (one seed per shape, so every variant is timed on the same data). -1 when the
 * shape lacks a field or its dtype is not bf16/fp16. */
int tune_time_case(const gen_kvset *shape, uint64_t seed, tune_attn_case *c);

/*
 * Gate case of a GQA shape: the same compile-time facts (dtype, d, G, causal) and the
 * same hq, hkv and sq, bounded in size:
 *  - prefill (family attn_prefill): sq and skv capped at TUNE_GATE_PREFILL_MAX (sq == skv kept);
 *  - while K+V exceeds TUNE_GATE_KV_BYTES: halve b, then skv (not below 256);
 *  - decode: ragged lengths drawn from seed: sequence 0 ends up to 63 keys short of skv,
 *    the others anywhere in 1..skv; the NaN tails past them must never be read.
 * kv_len has room for the shape's b. Inputs are fresh (seed 0: attn_run draws a new one).
 * Returns 1 when the case is smaller than the shape (reduced), 0 when equal, -1 on a bad shape.
 */
int tune_gate_case(const gen_kvset *shape, uint64_t seed, tune_attn_case *c, int *kv_len);

/* "b4 sq1 skv8192" of a case, for messages. */
void tune_case_str(const tune_attn_case *c, char *buf, size_t n);

#endif
