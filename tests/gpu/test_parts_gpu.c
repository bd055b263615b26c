/* tests/gpu/test_parts_gpu.c: split-score decode (attn_parts_decode: absorbed MLA, base + delta, joint layer scan, paged KV) on the GPU against tuner/ref_parts, plus its mutants */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "db/db.h"
#include "gen/build.h"
#include "gen/template.h"
#include "runtime/cuda.h"
#include "runtime/device.h"
#include "runtime/kforge.h"
#include "runtime/module.h"
#include "runtime/parts_launch.h"
#include "runtime/parts_tmap.h"
#include "tuner/check.h"
#include "tuner/parts_run.h"
#include "tuner/ref_parts.h"
#include "tests/gpu/gpu_job.h"

/*
 * Needs a GPU: prints "skipped: no CUDA device" and returns 77 without one. With
 * KFORGE_TEST_PRECOMPILE=1 and no GPU, every variant (mutants included) is compiled for sm_90a into
 * $KFORGE_TEST_DB (default ./test_parts_gpu.db) first, so the GPU run calls no NVRTC.
 * Inputs: fresh random values every run; NaN in every cache row past each length, in every page the
 * block table does not use (the pages of a sequence shuffled), and -1 in unused block-table slots;
 * outputs poisoned. Cases: MLA (latent 512 + rope 64, value = latent) Hq 16/32/64/128, Sq 1 and 2,
 * lengths 1, 63, 64, 65, 4097 and 0, splits, page sizes 16/64/128 and contiguous; base 128 + delta 32
 * (8/4 and 8/2 heads), layers 1..4 against the reference, and bit for bit (fp16) against the 1-layer
 * variant run on each layer alone. The MLA cases run again with impl=wgmma (parts/decode_sm90.cuh, sm_90a:
 * Hq 32/64/128, Sq 1 and 2 causal, the same lengths, pages, splits and tolerances; skipped with a line
 * on a GPU that is not sm_90a), and with impl=wgmma_ks (parts/decode_sm90_ks.cuh: Hq 16/24/32/40/64/128, Sq 1/2/4/16
 * causal, lengths up to 64K, splits up to more than the blocks), and the same again with impl=wgmma_ksl (the lagged
 * schedule) and impl=wgmma_tma (that schedule with whole blocks by tensor map; pages 64, 128, 256 and contiguous). The FP8 latent cache (kv_dtype e4m3, impl mma): e4m3 rows (values up to +-448, some exactly there) with
 * one fp32 scale per token (0.5 .. 1.25 / 160, neighbours differ), NaN bytes (0x7f) and NaN scales past each length
 * and in unused pages, Hq 16/128, Sq 1 and 2 causal, lengths 0, 1, 63, 64, 65, 4097, pages 64/16 and contiguous,
 * splits, stages 1..3, against the reference on the same dequantised values (scale * e4m3; q in the dtype), with the
 * bf16 tolerances. KFORGE_TEST_FILTER=<text> runs only the cases, timing rows and mutants whose params contain <text>
 * (e.g. "impl=wgmma_ksl"; "kv_dtype=e4m3" the FP8 cases and rows), and skips the bitwise and API cases. Mutants (value not aliased, delta not in the softmax, wrong in-page
 * offset; the first and last again on the wgmma and the wgmma_ks cases alone; for wgmma_ks also the exchanged P
 * read from the wrong slot and the causal bound +-1; for FP8 the scale of the neighbouring token; for impl wg8, the FP8
 * cache on e4m3 wgmma, those four and P^T's key order differing from V^T's) are planted in the rendered source, each
 * in its own process: each must fail.
 */

enum { MLA = 0, BD = 1 };
enum { M_VALUE = 1, M_DELTA = 2, M_PAGE = 4, M_WVALUE = 8, M_WPAGE = 16, M_KSVALUE = 32, M_KSPAGE = 64, M_KSP = 128,
       M_KSCAUSAL = 256, M_KSLVALUE = 512, M_KSLPAGE = 1024, M_KSLP = 2048, M_KSLCAUSAL = 4096, M_KSLLAG = 8192,
       M_FP8SCALE = 16384, M_TVALUE = 32768, M_TPAGE = 65536, M_TP = 131072, M_TCAUSAL = 262144, M_TLAG = 524288,
       M_8VALUE = 1 << 20, M_8PAGE = 1 << 21, M_8SCALE = 1 << 22, M_8CAUSAL = 1 << 23, M_8SLOT = 1 << 24,
       M_8TPAGE = 1 << 25, M_8TCOL = 1 << 26 };
/* mutants of sm_90a-only cases */
#define M_SM90A (M_WVALUE | M_WPAGE | M_KSVALUE | M_KSPAGE | M_KSP | M_KSCAUSAL | M_KSLVALUE | M_KSLPAGE | M_KSLP \
                 | M_KSLCAUSAL | M_KSLLAG | M_TVALUE | M_TPAGE | M_TP | M_TCAUSAL | M_TLAG | M_8VALUE | M_8PAGE      \
                 | M_8SCALE | M_8CAUSAL | M_8SLOT | M_8TPAGE | M_8TCOL)

/* the wgmma kernel's params (tm 64, wn 1, bn 32: the only bn whose tiles fit 227 KB at 576 key columns) */
#define WG(st, sp) "impl=wgmma,tm=64,wn=1,bn=32,stages=" #st ",sp=" #sp
/* the keys-split kernel's params (parts/decode_sm90_ks.cuh: one 64-key block per consumer, two slots) */
#define KS(sp) "impl=wgmma_ks,tm=64,wn=1,bn=64,stages=2,sp=" #sp
/* the same kernel with the lagged consumer schedule (KF_KS_LAG: consumer 1 half a block behind consumer 0) */
#define KSL(sp) "impl=wgmma_ksl,tm=64,wn=1,bn=64,stages=2,sp=" #sp
/* the lagged schedule with whole blocks loaded by tensor map (KF_PARTS_TMA; runtime/parts_tmap.c encodes the maps) */
#define KST(sp) "impl=wgmma_tma,tm=64,wn=1,bn=64,stages=2,sp=" #sp
/* the FP8 latent cache on e4m3 wgmma (parts/decode_wg8.cuh: one warpgroup, 16 packed rows, 64-key blocks) */
#define W8(st, sp) "impl=wg8,tm=16,wn=1,bn=64,stages=" #st ",sp=" #sp

typedef struct pcase {
    int kind;                  /* MLA or BD */
    const char *dtype;
    int b, sq, hq, hkv, layers, ps, causal;
    int kv_len[8];             /* b entries */
    const char *params;        /* overrides of the template default, or NULL */
    int muts;                  /* mutants the case takes part in */
    int kv8;                   /* 1: the FP8 latent cache (kv_dtype e4m3, per-token scales; MLA only); 2: the same with
                                * the rope columns read from a copy of the cache (the parts not one tensor: impl wg8
                                * without its tensor map) */
} pcase;

static const pcase cases[] = {
    /* absorbed MLA, paged 64 */
    {MLA, "bf16", 4, 1, 16, 1, 1, 64, 0, {1, 63, 64, 65}, NULL, M_VALUE | M_PAGE},
    {MLA, "bf16", 3, 1, 16, 1, 1, 64, 0, {4097, 0, 130}, "sp=4", M_VALUE | M_PAGE},
    {MLA, "bf16", 3, 1, 16, 1, 1, 64, 0, {4097, 65, 1}, "impl=mma,tm=32,wn=4,bn=64,stages=1,sp=2", 0},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 64}, "impl=mma,tm=64,wn=4,bn=64,stages=2", M_VALUE},
    {MLA, "bf16", 2, 1, 128, 1, 1, 64, 0, {1000, 65}, "impl=mma,tm=64,wn=4,bn=64,stages=2,sp=2", 0},
    {MLA, "bf16", 2, 2, 128, 1, 1, 64, 1, {65, 1}, "impl=mma,tm=32,wn=4,bn=64,stages=2", 0},
    {MLA, "bf16", 2, 2, 16, 1, 1, 64, 1, {4097, 63}, "sp=2", 0},
    {MLA, "bf16", 2, 1, 32, 1, 1, 64, 0, {300, 64}, NULL, 0},
    {MLA, "bf16", 2, 2, 64, 1, 1, 64, 1, {300, 2}, "impl=mma,tm=32,wn=4,bn=64,stages=2", 0},
    {MLA, "bf16", 2, 1, 16, 1, 1, 0, 0, {4097, 63}, NULL, M_VALUE},
    {MLA, "fp16", 2, 1, 16, 1, 1, 16, 0, {200, 17}, "impl=mma,tm=16,wn=4,bn=64,stages=1,sp=1", M_PAGE},
    {MLA, "bf16", 2, 1, 64, 1, 1, 128, 0, {700, 129}, "impl=mma,tm=64,wn=4,bn=64,stages=2,sp=1", 0},
    /* base 128 + delta 32, contiguous and paged */
    {BD, "bf16", 4, 1, 8, 4, 1, 0, 0, {1, 63, 64, 65}, NULL, M_DELTA},
    {BD, "bf16", 2, 1, 8, 2, 1, 0, 0, {4097, 0}, "sp=4", M_DELTA},
    {BD, "bf16", 3, 1, 8, 4, 2, 0, 0, {65, 4097, 0}, NULL, 0},
    {BD, "bf16", 3, 1, 8, 2, 3, 32, 0, {65, 200, 1}, NULL, M_PAGE},
    {BD, "bf16", 4, 1, 8, 4, 4, 0, 0, {1, 63, 64, 65}, NULL, M_DELTA},
    {BD, "bf16", 2, 1, 8, 2, 4, 0, 0, {4097, 0}, "sp=2", 0},
    {BD, "bf16", 2, 2, 8, 4, 4, 64, 1, {300, 2}, "impl=mma,tm=16,wn=2,bn=64,stages=2,sp=1", M_PAGE},
    /* absorbed MLA, impl=wgmma (sm_90a): Hq 64/128 at Sq 1, Hq 32+ at Sq 2 (causal), Hq 32 at Sq 1 (half a tile) */
    {MLA, "bf16", 4, 1, 64, 1, 1, 64, 0, {1, 63, 64, 65}, WG(3, 1), M_WVALUE | M_WPAGE},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 130}, WG(2, 4), M_WVALUE | M_WPAGE},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 64}, WG(3, 1), 0},
    {MLA, "bf16", 2, 1, 64, 1, 1, 64, 0, {1000, 65}, WG(2, 2), 0},
    {MLA, "bf16", 2, 1, 128, 1, 1, 128, 0, {700, 129}, WG(2, 8), 0},
    {MLA, "bf16", 2, 2, 128, 1, 1, 64, 1, {65, 1}, WG(3, 1), 0},
    {MLA, "bf16", 2, 2, 64, 1, 1, 64, 1, {4097, 63}, WG(2, 2), 0},
    {MLA, "bf16", 2, 2, 32, 1, 1, 64, 1, {300, 2}, WG(3, 1), 0},
    {MLA, "bf16", 2, 1, 32, 1, 1, 64, 0, {300, 64}, WG(2, 1), 0},
    {MLA, "bf16", 2, 1, 64, 1, 1, 0, 0, {4097, 63}, WG(3, 1), M_WVALUE},
    {MLA, "fp16", 2, 1, 128, 1, 1, 32, 0, {200, 17}, WG(3, 2), M_WPAGE},
    {MLA, "fp16", 2, 2, 64, 1, 1, 0, 1, {64, 1}, WG(2, 1), 0},
    /* absorbed MLA, impl=wgmma_ks (sm_90a): Hq 16..128 (rows past G x Sq padded), Sq 1/2/4/16 causal, lengths 0, 1,
     * 63, 64, 65, 4097 and 64K (odd block counts: the phantom block), splits 1 .. more than blocks, pages 64/128 and
     * contiguous */
    {MLA, "bf16", 4, 1, 64, 1, 1, 64, 0, {1, 63, 64, 65}, KS(1), M_KSVALUE | M_KSPAGE | M_KSP},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 130}, KS(4), M_KSVALUE | M_KSPAGE | M_KSP},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 64}, KS(1), 0},
    {MLA, "bf16", 2, 1, 16, 1, 1, 64, 0, {4097, 63}, KS(2), M_KSP},
    {MLA, "bf16", 2, 1, 24, 1, 1, 64, 0, {1000, 65}, KS(3), 0},
    {MLA, "bf16", 2, 2, 40, 1, 1, 64, 1, {300, 2}, KS(1), M_KSCAUSAL},
    {MLA, "bf16", 2, 4, 32, 1, 1, 64, 1, {4097, 63}, KS(2), M_KSCAUSAL},
    {MLA, "bf16", 2, 16, 16, 1, 1, 64, 1, {200, 16}, KS(1), M_KSCAUSAL},
    {MLA, "bf16", 2, 2, 128, 1, 1, 64, 1, {65, 1}, KS(1), 0},
    {MLA, "bf16", 1, 1, 64, 1, 1, 64, 0, {65536}, KS(16), 0},
    {MLA, "bf16", 2, 1, 128, 1, 1, 128, 0, {700, 129}, KS(8), 0},
    {MLA, "bf16", 2, 1, 64, 1, 1, 0, 0, {4097, 63}, KS(1), M_KSVALUE},
    {MLA, "fp16", 2, 1, 128, 1, 1, 64, 0, {200, 17}, KS(2), M_KSPAGE},
    {MLA, "bf16", 2, 1, 128, 1, 1, 64, 0, {4097, 1}, KS(128), 0},
    {MLA, "fp16", 2, 2, 64, 1, 1, 0, 1, {64, 1}, KS(1), 0},
    /* impl=wgmma_ksl (sm_90a): the wgmma_ks cases again, and their mutants; the chained max (P_0 brought to the pair's
     * max) needs two blocks or more */
    {MLA, "bf16", 4, 1, 64, 1, 1, 64, 0, {1, 63, 64, 65}, KSL(1), M_KSLVALUE | M_KSLPAGE | M_KSLP},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 130}, KSL(4), M_KSLVALUE | M_KSLPAGE | M_KSLP | M_KSLLAG},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 64}, KSL(1), M_KSLLAG},
    {MLA, "bf16", 2, 1, 16, 1, 1, 64, 0, {4097, 63}, KSL(2), M_KSLP},
    {MLA, "bf16", 2, 1, 24, 1, 1, 64, 0, {1000, 65}, KSL(3), M_KSLLAG},
    {MLA, "bf16", 2, 2, 40, 1, 1, 64, 1, {300, 2}, KSL(1), M_KSLCAUSAL},
    {MLA, "bf16", 2, 4, 32, 1, 1, 64, 1, {4097, 63}, KSL(2), M_KSLCAUSAL | M_KSLLAG},
    {MLA, "bf16", 2, 16, 16, 1, 1, 64, 1, {200, 16}, KSL(1), M_KSLCAUSAL},
    {MLA, "bf16", 2, 2, 128, 1, 1, 64, 1, {65, 1}, KSL(1), 0},
    {MLA, "bf16", 1, 1, 64, 1, 1, 64, 0, {65536}, KSL(16), 0},
    {MLA, "bf16", 2, 1, 128, 1, 1, 128, 0, {700, 129}, KSL(8), 0},
    {MLA, "bf16", 2, 1, 64, 1, 1, 0, 0, {4097, 63}, KSL(1), M_KSLVALUE},
    {MLA, "fp16", 2, 1, 128, 1, 1, 64, 0, {200, 17}, KSL(2), M_KSLPAGE},
    {MLA, "bf16", 2, 1, 128, 1, 1, 64, 0, {4097, 1}, KSL(128), 0},
    {MLA, "fp16", 2, 2, 64, 1, 1, 0, 1, {64, 1}, KSL(1), 0},
    /* impl=wgmma_tma (sm_90a): the wgmma_ksl cases again, and their mutants (the in-page offset on the map's row
     * and on the cp.async tail); whole blocks by map, the block reaching each length by cp.async */
    {MLA, "bf16", 4, 1, 64, 1, 1, 64, 0, {1, 63, 64, 65}, KST(1), M_TVALUE | M_TPAGE | M_TP},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 130}, KST(4), M_TVALUE | M_TPAGE | M_TP | M_TLAG},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 64}, KST(1), M_TLAG},
    {MLA, "bf16", 2, 1, 16, 1, 1, 64, 0, {4097, 63}, KST(2), M_TP},
    {MLA, "bf16", 2, 1, 24, 1, 1, 64, 0, {1000, 65}, KST(3), M_TLAG},
    {MLA, "bf16", 2, 2, 40, 1, 1, 64, 1, {300, 2}, KST(1), M_TCAUSAL},
    {MLA, "bf16", 2, 4, 32, 1, 1, 64, 1, {4097, 63}, KST(2), M_TCAUSAL | M_TLAG},
    {MLA, "bf16", 2, 16, 16, 1, 1, 64, 1, {200, 16}, KST(1), M_TCAUSAL},
    {MLA, "bf16", 2, 2, 128, 1, 1, 64, 1, {65, 1}, KST(1), 0},
    {MLA, "bf16", 1, 1, 64, 1, 1, 64, 0, {65536}, KST(16), 0},
    {MLA, "bf16", 2, 1, 128, 1, 1, 128, 0, {700, 129}, KST(8), M_TPAGE},
    {MLA, "bf16", 2, 1, 64, 1, 1, 0, 0, {4097, 63}, KST(1), M_TVALUE},
    {MLA, "fp16", 2, 1, 128, 1, 1, 64, 0, {200, 17}, KST(2), M_TPAGE},
    {MLA, "bf16", 2, 1, 128, 1, 1, 64, 0, {4097, 1}, KST(128), 0},
    {MLA, "fp16", 2, 2, 64, 1, 1, 0, 1, {64, 1}, KST(1), 0},
    {MLA, "bf16", 2, 1, 128, 1, 1, 256, 0, {4097, 1000}, KST(1), M_TPAGE},
    /* the FP8 latent cache (kv_dtype e4m3, impl mma): the template default, then tiles, stages, pages, splits */
    {MLA, "bf16", 4, 1, 16, 1, 1, 64, 0, {1, 63, 64, 65}, NULL, M_FP8SCALE | M_PAGE, 1},
    {MLA, "bf16", 3, 1, 16, 1, 1, 64, 0, {4097, 0, 130}, "sp=4", M_FP8SCALE, 1},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 65}, NULL, M_FP8SCALE, 1},
    {MLA, "bf16", 2, 1, 128, 1, 1, 64, 0, {1000, 65}, "impl=mma,tm=32,wn=4,bn=64,stages=3,sp=2", 0, 1},
    {MLA, "bf16", 2, 2, 16, 1, 1, 64, 1, {4097, 63}, "sp=2", 0, 1},
    {MLA, "bf16", 2, 2, 128, 1, 1, 64, 1, {65, 1}, "impl=mma,tm=32,wn=4,bn=64,stages=2", M_FP8SCALE, 1},
    {MLA, "bf16", 3, 1, 16, 1, 1, 64, 0, {4097, 65, 1}, "impl=mma,tm=32,wn=4,bn=64,stages=1,sp=2", 0, 1},
    {MLA, "bf16", 2, 1, 16, 1, 1, 0, 0, {4097, 63}, NULL, M_FP8SCALE, 1},
    {MLA, "fp16", 2, 1, 16, 1, 1, 16, 0, {200, 17}, "impl=mma,tm=16,wn=4,bn=64,stages=3,sp=1", M_PAGE | M_FP8SCALE, 1},
    {MLA, "fp16", 2, 2, 128, 1, 1, 0, 1, {64, 0}, "impl=mma,tm=16,wn=4,bn=64,stages=2,sp=1", 0, 1},
    /* the FP8 latent cache on impl wg8 (sm_90a, bf16 q): Hq 16..128 (16-row tiles, rows past G x Sq padded), Sq 1/2/4/16
     * causal, lengths 0, 1, 63..65, 4097, 64K, pages 64/128/256 and contiguous, splits 1..32, stages 2..4 */
    {MLA, "bf16", 4, 1, 16, 1, 1, 64, 0, {1, 63, 64, 65}, W8(3, 1),
     M_8VALUE | M_8PAGE | M_8SCALE | M_8SLOT | M_8TPAGE | M_8TCOL, 1},
    {MLA, "bf16", 3, 1, 16, 1, 1, 64, 0, {4097, 0, 130}, W8(3, 4), M_8VALUE | M_8SLOT, 1},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 65}, W8(2, 1), M_8SCALE, 1},
    {MLA, "bf16", 2, 1, 24, 1, 1, 128, 0, {1000, 65}, W8(4, 2), M_8PAGE, 1},
    {MLA, "bf16", 2, 2, 40, 1, 1, 64, 1, {300, 2}, W8(3, 1), M_8CAUSAL, 1},
    {MLA, "bf16", 2, 4, 32, 1, 1, 64, 1, {4097, 63}, W8(3, 2), M_8CAUSAL, 1},
    {MLA, "bf16", 2, 16, 16, 1, 1, 64, 1, {200, 16}, W8(2, 1), M_8CAUSAL, 1},
    {MLA, "bf16", 2, 2, 128, 1, 1, 64, 1, {65, 1}, W8(3, 1), 0, 1},
    {MLA, "bf16", 2, 1, 16, 1, 1, 0, 0, {4097, 63}, W8(3, 1), M_8SCALE | M_8SLOT | M_8TCOL, 1},
    {MLA, "bf16", 2, 1, 64, 1, 1, 256, 0, {4097, 1000}, W8(2, 8), 0, 1},
    {MLA, "bf16", 1, 1, 16, 1, 1, 64, 0, {65536}, W8(3, 32), 0, 1},
    /* the latent and rope columns not one tensor: no tensor map, every block by cp.async */
    {MLA, "bf16", 2, 2, 40, 1, 1, 64, 1, {300, 65}, W8(3, 2), M_8PAGE, 2},
    {MLA, "bf16", 2, 1, 16, 1, 1, 0, 0, {4097, 63}, W8(2, 1), 0, 2},
};
#define N_CASES (int)(sizeof cases / sizeof cases[0])

/* bitwise: fp16, layers L against the 1-layer variant on each layer alone, same tile and split */
static const pcase bit_cases[] = {
    {BD, "fp16", 2, 1, 8, 4, 4, 0, 0, {4097, 65}, "impl=mma,tm=16,wn=1,bn=64,stages=2,sp=4", 0},
    {BD, "fp16", 2, 1, 8, 2, 3, 64, 0, {700, 1}, "impl=mma,tm=16,wn=2,bn=32,stages=2,sp=1", 0},
    {BD, "fp16", 2, 2, 8, 4, 2, 0, 1, {300, 64}, "impl=mma,tm=16,wn=1,bn=32,stages=3,sp=2", 0},
};
#define N_BIT (int)(sizeof bit_cases / sizeof bit_cases[0])

/* through the public API (kf_parts_plan / kf_parts_run, template default, JIT or the test database) */
static const pcase api_cases[] = {
    {MLA, "bf16", 4, 1, 16, 1, 1, 64, 0, {1, 63, 4097, 0}, NULL, 0},
    {MLA, "bf16", 2, 2, 128, 1, 1, 64, 1, {65, 300}, NULL, 0},
    {MLA, "bf16", 3, 1, 128, 1, 1, 64, 0, {4097, 0, 65}, NULL, 0},
    {BD, "bf16", 3, 1, 8, 2, 4, 0, 0, {65, 2048, 0}, NULL, 0},
    {MLA, "bf16", 4, 1, 16, 1, 1, 64, 0, {1, 63, 4097, 0}, NULL, 0, 1},
    {MLA, "bf16", 2, 2, 128, 1, 1, 64, 1, {65, 300}, NULL, 0, 1},
};
#define N_API (int)(sizeof api_cases / sizeof api_cases[0])

/* the tuner's runner (tuner/parts_run.c) on the shapes: its gate must pass; timings are printed
 * (default variants, or the params given; the audit group against four calls of attn_decode D 64 at the same
 * cache budget; the MLA rows again with impl=wgmma, sm_90a only) */
#define MLA_SHAPE(sq, hq, causal)                                                                                     \
    "family=attn_parts_decode,dtype=bf16,b=128,sq=" #sq ",skv=4096,hq=" #hq ",hkv=1,parts=latent512_rope64,"          \
    "value=alias_latent,dv=512,layers=1,page_size=64,causal=" #causal
static const struct tshape {
    const char *shape, *params;   /* params: overrides of the template default, or NULL */
} time_shapes[] = {
    {MLA_SHAPE(1, 16, 0), NULL},
    {MLA_SHAPE(1, 128, 0), NULL},   /* the default: impl=wgmma on sm_90a */
    {MLA_SHAPE(1, 128, 0), "impl=mma,tm=64,wn=4,bn=64,stages=2"},
    {MLA_SHAPE(2, 128, 1), "impl=mma,tm=32,wn=4,bn=64,stages=2"},
    {"family=attn_parts_decode,dtype=bf16,b=128,sq=1,skv=2048,hq=8,hkv=4,parts=base128_delta32,value=separate,"
     "dv=160,layers=4,page_size=0,causal=0", NULL},
    {"family=attn_parts_decode,dtype=bf16,b=128,sq=1,skv=2048,hq=8,hkv=4,parts=base128_delta32,value=separate,"
     "dv=160,layers=1,page_size=0,causal=0", NULL},
    {"family=attn_decode,dtype=bf16,b=128,sq=1,skv=2048,hq=8,hkv=4,d=64,causal=0", NULL},
    {MLA_SHAPE(1, 128, 0), WG(2, 1)},
    {MLA_SHAPE(1, 128, 0), WG(3, 1)},
    {MLA_SHAPE(1, 64, 0), WG(3, 1)},
    {MLA_SHAPE(1, 64, 0), WG(3, 2)},
    {MLA_SHAPE(2, 128, 1), WG(3, 1)},
    {MLA_SHAPE(1, 128, 0), KS(1)},
    {MLA_SHAPE(1, 64, 0), KS(1)},
    {MLA_SHAPE(1, 16, 0), KS(1)},
    {MLA_SHAPE(2, 128, 1), KS(1)},
    {MLA_SHAPE(1, 128, 0), KSL(1)},
    {MLA_SHAPE(1, 64, 0), KSL(1)},
    {MLA_SHAPE(1, 16, 0), KSL(1)},
    {MLA_SHAPE(2, 128, 1), KSL(1)},
    {MLA_SHAPE(1, 128, 0), KST(1)},
    {MLA_SHAPE(1, 64, 0), KST(1)},
    {MLA_SHAPE(1, 16, 0), KST(1)},
    {MLA_SHAPE(2, 128, 1), KST(1)},
    {MLA_SHAPE(1, 16, 0) ",kv_dtype=e4m3", NULL},   /* the FP8 latent cache (issue 18: >= 1.8x the bf16 row) */
    {MLA_SHAPE(1, 128, 0) ",kv_dtype=e4m3", NULL},
};
#define N_TIME (int)(sizeof time_shapes / sizeof time_shapes[0])

typedef struct mutant {
    int bit;
    const char *name, *marker, *from, *to;
} mutant;
static const mutant mutants[] = {
    {M_VALUE, "value not aliased (starts at column 64: rope dims read into V)", "KF_MUTANT_VALUE", "OFF8 0", "OFF8 8"},
    {M_DELTA, "delta scores not in the softmax", "KF_MUTANT_DELTA", "KF_SCORE_PARTS 2", "KF_SCORE_PARTS 1"},
    {M_PAGE, "wrong in-page offset", "KF_MUTANT_PAGE", "(j % KF_PS)", "(j % (KF_PS / 2))"},
    {M_WVALUE, "wgmma: value not aliased (V one panel to the right)", "KF_MUTANT_VALUE", "OFF8 0", "OFF8 8"},
    {M_WPAGE, "wgmma: wrong in-page offset", "KF_MUTANT_PAGE", "(j % KF_PS)", "(j % (KF_PS / 2))"},
    {M_KSVALUE, "wgmma_ks: value not aliased (V one panel to the right)", "KF_MUTANT_VALUE", "OFF8 0", "OFF8 8"},
    {M_KSPAGE, "wgmma_ks: wrong in-page offset", "KF_MUTANT_PAGE", "(j % KF_PS)", "(j % (KF_PS / 2))"},
    {M_KSP, "wgmma_ks: P exchange of the wrong half (own P on the other block)", "KF_MUTANT_KSP", "sOther + KF_KS_PP",
     "sMine + KF_KS_PP"},
    {M_KSCAUSAL, "wgmma_ks: causal bound +1", "KF_MUTANT_KSCAUSAL", "j > i + coff", "j > i + coff + 1"},
    {M_KSCAUSAL, "wgmma_ks: causal bound -1", "KF_MUTANT_KSCAUSAL", "j > i + coff", "j >= i + coff"},
    {M_KSLVALUE, "wgmma_ksl: value not aliased (V one panel to the right)", "KF_MUTANT_VALUE", "OFF8 0", "OFF8 8"},
    {M_KSLPAGE, "wgmma_ksl: wrong in-page offset", "KF_MUTANT_PAGE", "(j % KF_PS)", "(j % (KF_PS / 2))"},
    {M_KSLP, "wgmma_ksl: P exchange of the wrong half (own P on the other block)", "KF_MUTANT_KSP",
     "sOther + KF_KS_PP", "sMine + KF_KS_PP"},
    {M_KSLCAUSAL, "wgmma_ksl: causal bound +1", "KF_MUTANT_KSCAUSAL", "j > i + coff", "j > i + coff + 1"},
    {M_KSLCAUSAL, "wgmma_ksl: causal bound -1", "KF_MUTANT_KSCAUSAL", "j > i + coff", "j >= i + coff"},
    {M_KSLLAG, "wgmma_ksl: P_0 not brought to the pair's common max", "KF_MUTANT_KSLAG", "kf_ks_pack(sc, s0, s1, pa)",
     "kf_ks_pack(sc, 1.f, 1.f, pa)"},
    {M_FP8SCALE, "FP8: the scale of the neighbouring token", "KF_MUTANT_FP8SCALE", "jt = j;", "jt = j ^ 1;"},
    {M_TVALUE, "wgmma_tma: value not aliased (V one panel to the right)", "KF_MUTANT_VALUE", "OFF8 0", "OFF8 8"},
    {M_TPAGE, "wgmma_tma: wrong in-page offset", "KF_MUTANT_PAGE", "(j % KF_PS)", "(j % (KF_PS / 2))"},
    {M_TP, "wgmma_tma: P exchange of the wrong half (own P on the other block)", "KF_MUTANT_KSP", "sOther + KF_KS_PP",
     "sMine + KF_KS_PP"},
    {M_TCAUSAL, "wgmma_tma: causal bound +1", "KF_MUTANT_KSCAUSAL", "j > i + coff", "j > i + coff + 1"},
    {M_TCAUSAL, "wgmma_tma: causal bound -1", "KF_MUTANT_KSCAUSAL", "j > i + coff", "j >= i + coff"},
    {M_TLAG, "wgmma_tma: P_0 not brought to the pair's common max", "KF_MUTANT_KSLAG", "kf_ks_pack(sc, s0, s1, pa)",
     "kf_ks_pack(sc, 1.f, 1.f, pa)"},
    {M_8VALUE, "wg8: value not aliased (V half a panel to the right)", "KF_MUTANT_VALUE", "OFF8 0", "OFF8 8"},
    {M_8PAGE, "wg8: wrong in-page offset", "KF_MUTANT_PAGE", "(j % KF_PS)", "(j % (KF_PS / 2))"},
    {M_8SCALE, "wg8: the scale of the neighbouring token", "KF_MUTANT_FP8SCALE", "jt = j;", "jt = j ^ 1;"},
    {M_8CAUSAL, "wg8: causal bound +1", "KF_MUTANT_W8CAUSAL", "j > i + coff", "j > i + coff + 1"},
    {M_8CAUSAL, "wg8: causal bound -1", "KF_MUTANT_W8CAUSAL", "j > i + coff", "j >= i + coff"},
    {M_8SLOT, "wg8: P^T's key order not V^T's", "KF_MUTANT_W8SLOT", "4 * ((k >> 1) & 3) + (k >> 3)",
     "4 * (k >> 3) + ((k >> 1) & 3)"},
    {M_8TPAGE, "wg8: the copy engine's box from the neighbouring page", "KF_MUTANT_PAGE8", "kvh, pg, bar", "kvh, pg ^ 1, bar"},
    {M_8TCOL, "wg8: the copy engine's panels swapped in pairs", "KF_MUTANT_TCOL8", "128 * pp,", "128 * (pp ^ 1),"},
};
#define N_MUT (int)(sizeof mutants / sizeof mutants[0])

static const rt_cu *cu;
static gen_host *host;
static db_store *db;
static gen_target tg;
static int g_mutant = -1;      /* index into mutants applied to every source, or -1 */
static const char *g_filter;   /* KFORGE_TEST_FILTER: only cases, timing rows and mutants whose params contain it */

/* 1 when a case or a time shape with these params runs under the filter (no filter: all) */
static int selected(const char *params)
{
    return !g_filter || (params && strstr(params, g_filter));
}

/* 1 when case c runs under the filter: its params, or "kv_dtype=e4m3" for an FP8 case */
static int case_selected(const pcase *c)
{
    return selected(c->params) || (c->kv8 && strstr("kv_dtype=e4m3", g_filter));
}

/* 1 when some selected case takes part in the mutant's bit */
static int mutant_selected(int bit);

/* 1 when params (a case's or a time shape's) take impl=wgmma and the target is not sm_90a: skipped, with a line */
static int needs_sm90a(const char *params)
{
    return params && strstr(params, "impl=wgmma") && strcmp(tg.arch, "sm_90a") != 0;
}

/* ---- variants ------------------------------------------------------------------------- */

typedef struct variant {
    gen_kvset vp;
    rt_module m;
    char key[512];
    int ok;
} variant;

static void case_shape(const pcase *c, int layers, gen_kvset *s)
{
    gen_kv_clear(s);
    gen_kv_set_str(s, "dtype", c->dtype);
    gen_kv_set_int(s, "b", c->b);
    gen_kv_set_int(s, "sq", c->sq);
    int mx = 0;
    for (int i = 0; i < c->b; i++)
        mx = c->kv_len[i] > mx ? c->kv_len[i] : mx;
    gen_kv_set_int(s, "skv", mx);
    gen_kv_set_int(s, "hq", c->hq);
    gen_kv_set_int(s, "hkv", c->hkv);
    gen_kv_set_str(s, "parts", c->kind == MLA ? "latent512_rope64" : "base128_delta32");
    gen_kv_set_str(s, "value", c->kind == MLA ? "alias_latent" : "separate");
    gen_kv_set_int(s, "dv", c->kind == MLA ? 512 : 160);
    gen_kv_set_int(s, "layers", layers);
    gen_kv_set_int(s, "page_size", c->ps);
    gen_kv_set_int(s, "causal", c->causal);
    if (c->kv8)
        gen_kv_set_str(s, "kv_dtype", "e4m3");
}

/* Plants mutant g_mutant into j's source; -1 when no line takes it. */
static int plant(gen_job *j)
{
    const mutant *m = &mutants[g_mutant];
    return gpu_job_mutate(j, tg.arch, m->marker, &m->from, &m->to, 1, 8) ? 0 : -1;
}

/* Builds (or finds in the database) the variant of case c with `layers` layers; load: onto the GPU. */
static int variant_build(variant *v, const pcase *c, int layers, int load)
{
    core_err err = CORE_ERR_INIT;
    char w[256];
    memset(v, 0, sizeof *v);
    gen_tmpl *t = gen_tmpl_load(host, "attn_parts_decode");
    gen_kvset shape;
    case_shape(c, layers, &shape);
    gen_job j;
    memset(&j, 0, sizeof j);
    j.tmpl = t;
    if (!t || gen_tmpl_fixed(t, &shape, &j.fixed) || gen_tmpl_default(t, &shape, &tg.dev, &j.params)) {
        printf("  error: template: %s\n", gen_host_errmsg(host));
        return -1;
    }
    if (c->params) {
        gen_kvset over;
        gen_kv_clear(&over);
        if (gen_kv_parse(&over, c->params, err.msg, sizeof err.msg)) {
            printf("  error: params '%s': %s\n", c->params, err.msg);
            return -1;
        }
        gen_kv_merge(&j.params, &over);
    }
    if (gen_tmpl_valid(t, &j.fixed, &j.params, &tg.dev, w, sizeof w) <= 0) {
        printf("  error: variant not valid: %s\n", w);
        return -1;
    }
    if (gen_build_prepare(&j, &tg)) {
        printf("  error: prepare: %s\n", gen_host_errmsg(host));
        return -1;
    }
    if (g_mutant >= 0 && plant(&j)) {
        gen_job_free(&j);
        return 1;   /* the mutant does not apply to this variant */
    }
    if (gen_build_run(&j, 1, 2, db, &tg, NULL, NULL, err.msg, sizeof err.msg) != 0 || j.failed) {
        printf("  error: compile %s: %s %s\n", j.variant_key, j.err, err.msg);
        gen_job_free(&j);
        return -1;
    }
    snprintf(v->key, sizeof v->key, "%s", j.variant_key);
    gpu_job_vp(&j, "attn_parts_decode", &v->vp);
    if (load) {
        if (gpu_job_load(&j, &v->m, &err)) {
            printf("  error: load %s: %s\n", j.variant_key, err.msg);
            gen_job_free(&j);
            return -1;
        }
    }
    v->ok = 1;
    gen_job_free(&j);
    return 0;
}

/* ---- host problems --------------------------------------------------------------------- */

typedef struct buf {
    uint16_t *h;
    size_t n;                  /* elements */
    CUdeviceptr d;
} buf;

typedef struct prob {
    const pcase *c;
    check_dtype dt;
    int dv, L;
    int npages, max_pages;
    int *bt;                   /* [b, max_pages] */
    long long csb, css;        /* cache batch (page) and key strides per column of heads*dim: see cache() */
    buf q[4][2];               /* layer, key part (MLA: one [b,sq,hq,576] buffer in q[0][0]) */
    buf kc[2 * 4 + 2];         /* caches in tile order (MLA: one 576-wide buffer in kc[0]) */
    int kdim[2 * 4 + 2];
    buf o[4];
    float *lse_h[4];
    CUdeviceptr lse_d[4], bt_d, len_d, ws_d;
    size_t ws_bytes;
    double scale;
    /* FP8 latent cache (c->kv8): the 576-wide e4m3 rows (instead of kc[0]) and the per-token scales [rows, hkv],
     * laid out as kc[0] would be (csb, css per byte) */
    unsigned char *k8;
    float *sc;
    size_t n8, nsc;
    CUdeviceptr k8_d, sc_d, k8b_d;   /* k8b_d: the copy of kv8 2 */
} prob;

#define CU(call) do { CUresult r_ = (call); if (r_) { char b_[128]; rt_cuda_errstr(r_, b_, sizeof b_); \
    printf("  error: %s: %s\n", #call, b_); exit(2); } } while (0)

static void buf_make(buf *x, size_t n)
{
    x->n = n;
    x->h = malloc(n * 2 + 16);
    x->d = 0;
}

static void buf_up(buf *x)
{
    if (!x->d)
        CU(cu->MemAlloc(&x->d, x->n * 2 + 16));
    CU(cu->MemcpyHtoD(x->d, x->h, x->n * 2));
}

/* A cache of `cols` columns, hkv heads: paged [npages, ps, hkv, cols] or [b, skv, hkv, cols];
 * NaN everywhere but the rows j < kv_len[b], which hold N(0, 1) values. */
static void cache_fill(prob *pb, buf *x, int cols, uint64_t seed)
{
    const pcase *c = pb->c;
    int skv = 0;
    for (int i = 0; i < c->b; i++)
        skv = c->kv_len[i] > skv ? c->kv_len[i] : skv;
    size_t row = (size_t)c->hkv * cols;
    size_t n = c->ps ? (size_t)pb->npages * c->ps * row : (size_t)c->b * (skv ? skv : 1) * row;
    buf_make(x, n);
    check_fill_nan(pb->dt, x->h, n);
    uint16_t *tmp = malloc(row * 2);
    for (int b = 0; b < c->b; b++)
        for (int j = 0; j < c->kv_len[b]; j++) {
            check_fill_normal(pb->dt, tmp, row, seed ^ ((uint64_t)b << 40) ^ ((uint64_t)j << 8), 1.0);
            size_t off = c->ps ? ((size_t)pb->bt[b * pb->max_pages + j / c->ps] * c->ps + j % c->ps) * row
                               : ((size_t)b * (skv ? skv : 1) + j) * row;
            memcpy(x->h + off, tmp, row * 2);
        }
    free(tmp);
    pb->css = (long long)row;
    pb->csb = c->ps ? (long long)c->ps * row : (long long)(skv ? skv : 1) * row;
}

/* The FP8 latent cache of an MLA case: e4m3 bytes of N(0, 1) * 160 (|x| > 2.8 saturates at +-448, and every 29th
 * value is +-448 itself), one scale per token, 0x7f (NaN) bytes and NaN scales past each length and in unused pages;
 * strides as cache_fill's. */
static void cache_fill8(prob *pb, uint64_t seed)
{
    const pcase *c = pb->c;
    int skv = 0;
    for (int i = 0; i < c->b; i++)
        skv = c->kv_len[i] > skv ? c->kv_len[i] : skv;
    size_t row = (size_t)c->hkv * 576, rows = c->ps ? (size_t)pb->npages * c->ps : (size_t)c->b * (skv ? skv : 1);
    pb->n8 = rows * row, pb->nsc = rows * c->hkv;
    pb->k8 = malloc(pb->n8 + 16);
    pb->sc = malloc(pb->nsc * 4 + 16 + 8 * (size_t)c->hkv);   /* + slack: the mutant reads token j ^ 1 */
    memset(pb->k8, 0x7f, pb->n8);
    for (size_t i = 0; i < pb->nsc + 2 * (size_t)c->hkv; i++)
        pb->sc[i] = NAN;
    check_rng r;
    for (int b = 0; b < c->b; b++)
        for (int j = 0; j < c->kv_len[b]; j++) {
            size_t at = c->ps ? (size_t)pb->bt[b * pb->max_pages + j / c->ps] * c->ps + j % c->ps
                              : (size_t)b * (skv ? skv : 1) + j;
            check_rng_seed(&r, seed ^ ((uint64_t)b << 40) ^ ((uint64_t)j << 8));
            for (size_t x = 0; x < row; x++) {
                double v = check_rng_normal(&r) * TUNE_KV8_AMP_K;
                if ((j + x) % 29 == 0)
                    v = v < 0 ? -448.0 : 448.0;
                unsigned char q8 = tune_e4m3_encode(v);
                pb->k8[at * row + x] = (q8 & 0x7f) ? q8 : (unsigned char)(q8 | 1);
            }
            for (int kh = 0; kh < c->hkv; kh++)
                pb->sc[at * c->hkv + kh] = (float)((0.5 + 0.75 * (check_rng_uniform(&r) * 0.5 + 0.5)) / TUNE_KV8_AMP_K);
        }
    pb->css = (long long)row;
    pb->csb = c->ps ? (long long)c->ps * row : (long long)(skv ? skv : 1) * row;
}

static void prob_make(prob *pb, const pcase *c, uint64_t seed)
{
    memset(pb, 0, sizeof *pb);
    pb->c = c;
    pb->dt = strcmp(c->dtype, "fp16") ? CHECK_BF16 : CHECK_FP16;
    pb->dv = c->kind == MLA ? 512 : 160;
    pb->L = c->layers;
    pb->scale = c->kind == MLA ? 0.0722 : 1.0 / 12.65;
    if (c->ps) {
        /* the pages of every sequence, shuffled over the whole pool, plus 3 pages nobody uses */
        for (int b = 0; b < c->b; b++) {
            int np = (c->kv_len[b] + c->ps - 1) / c->ps;
            pb->npages += np;
            pb->max_pages = np > pb->max_pages ? np : pb->max_pages;
        }
        pb->max_pages += 1;
        pb->npages += 3;
        int *perm = malloc(sizeof(int) * (size_t)pb->npages);
        check_rng r;
        check_rng_seed(&r, seed ^ 0x5eed);
        for (int i = 0; i < pb->npages; i++)
            perm[i] = i;
        for (int i = pb->npages - 1; i > 0; i--) {
            int k = (int)(check_rng_next(&r) % (uint64_t)(i + 1)), t = perm[i];
            perm[i] = perm[k], perm[k] = t;
        }
        pb->bt = malloc(sizeof(int) * (size_t)c->b * pb->max_pages);
        int next = 0;
        for (int b = 0; b < c->b; b++)
            for (int k = 0; k < pb->max_pages; k++)
                pb->bt[b * pb->max_pages + k] = k * c->ps < c->kv_len[b] ? perm[next++] : -1;
        free(perm);
    }
    size_t qrows = (size_t)c->b * c->sq * c->hq;
    int nc = 0;
    if (c->kind == MLA) {
        buf_make(&pb->q[0][0], qrows * 576);
        check_fill_normal(pb->dt, pb->q[0][0].h, qrows * 576, seed ^ 1, 1.0);
        if (c->kv8)
            cache_fill8(pb, seed ^ 2);
        else
            cache_fill(pb, &pb->kc[0], 576, seed ^ 2);
        pb->kdim[0] = 576;
        nc = 1;
    } else {
        int L = c->layers;
        for (int l = 0; l < L; l++) {
            buf_make(&pb->q[l][0], qrows * 128);
            check_fill_normal(pb->dt, pb->q[l][0].h, qrows * 128, seed ^ (10 + l), 1.0);
            buf_make(&pb->q[l][1], qrows * 32);
            check_fill_normal(pb->dt, pb->q[l][1].h, qrows * 32, seed ^ (20 + l), 1.0);
        }
        /* tile order: base k, delta k of each layer, base v, delta v of each layer */
        cache_fill(pb, &pb->kc[nc], 128, seed ^ 30), pb->kdim[nc++] = 128;
        for (int l = 0; l < L; l++)
            cache_fill(pb, &pb->kc[nc], 32, seed ^ (40 + l)), pb->kdim[nc++] = 32;
        cache_fill(pb, &pb->kc[nc], 128, seed ^ 50), pb->kdim[nc++] = 128;
        for (int l = 0; l < L; l++)
            cache_fill(pb, &pb->kc[nc], 32, seed ^ (60 + l)), pb->kdim[nc++] = 32;
    }
    for (int l = 0; l < pb->L; l++) {
        buf_make(&pb->o[l], qrows * pb->dv);
        pb->lse_h[l] = malloc(qrows * sizeof(float));
    }
}

static void prob_free(prob *pb)
{
    for (int l = 0; l < 4; l++) {
        for (int p = 0; p < 2; p++) {
            free(pb->q[l][p].h);
            if (pb->q[l][p].d)
                cu->MemFree(pb->q[l][p].d);
        }
        free(pb->o[l].h);
        if (pb->o[l].d)
            cu->MemFree(pb->o[l].d);
        free(pb->lse_h[l]);
        if (pb->lse_d[l])
            cu->MemFree(pb->lse_d[l]);
    }
    for (int i = 0; i < 10; i++) {
        free(pb->kc[i].h);
        if (pb->kc[i].d)
            cu->MemFree(pb->kc[i].d);
    }
    CUdeviceptr x[] = {pb->bt_d, pb->len_d, pb->ws_d, pb->k8_d, pb->sc_d, pb->k8b_d};
    for (int i = 0; i < 6; i++)
        if (x[i])
            cu->MemFree(x[i]);
    free(pb->bt);
    free(pb->k8);
    free(pb->sc);
}

static ref_strided rs(const void *p, long long sb, long long ss, long long sh)
{
    ref_strided r = {p, sb, ss, sh};
    return r;
}

/* The fp64 reference: o [L][b, sq, hq, dv] and lse [L][b, sq, hq] in rid order. */
static void reference(const prob *pb, double *o, double *lse)
{
    const pcase *c = pb->c;
    long long qs_h, qs_s, qs_b;
    ref_parts_desc d;
    memset(&d, 0, sizeof d);
    (void)qs_h, (void)qs_s, (void)qs_b;
    d.dtype = pb->dt;
    d.kv_len = c->kv_len;
    d.block_table = pb->bt;
    d.bt_sb = pb->max_pages;
    d.page_size = c->ps;
    d.b = c->b, d.sq = c->sq, d.hq = c->hq, d.causal = c->causal, d.scale = pb->scale;
    d.skv = 0;
    if (c->kind == MLA) {
        qs_h = 576, qs_s = (long long)c->hq * 576, qs_b = qs_s * c->sq;
        const uint16_t *q = pb->q[0][0].h, *k = pb->kc[0].h;
        d.nk = 2, d.nv = 1;
        d.kp[0] = (ref_kpart){rs(k, pb->csb, pb->css, 576), rs(q, qs_b, qs_s, qs_h), 512, 1, c->ps > 0};
        d.kp[1] = (ref_kpart){rs(k + 512, pb->csb, pb->css, 576), rs(q + 512, qs_b, qs_s, qs_h), 64, 1, c->ps > 0};
        if (c->kv8) {   /* the same strides over bytes; the scales [rows, hkv] */
            d.kp[0].k.p = pb->k8, d.kp[1].k.p = pb->k8 + 512;
            d.kv_fp8 = 1;
            d.kv_scale = rs(pb->sc, pb->csb / 576, pb->css / 576, 1);
        }
        d.vp[0].alias = 0, d.vp[0].dim = 512;
        ref_parts(&d, o, lse);
        return;
    }
    /* base + delta: every cache [.., hkv, dim] with its own row length */
    ref_parts_layers_desc g;
    memset(&g, 0, sizeof g);
    int L = c->layers;
    d.nk = 1, d.nv = 1;
    d.kp[0].dim = 128, d.kp[0].heads = c->hkv, d.kp[0].paged = c->ps > 0;
    g.shared = d;
    g.layers = L;
    for (int l = 0; l < L; l++) {
        g.q_base[l] = rs(pb->q[l][0].h, (long long)c->sq * c->hq * 128, (long long)c->hq * 128, 128);
        g.delta[l].q = rs(pb->q[l][1].h, (long long)c->sq * c->hq * 32, (long long)c->hq * 32, 32);
        g.delta[l].dim = 32, g.delta[l].heads = c->hkv, g.delta[l].paged = c->ps > 0;
        g.delta_v[l].alias = -1, g.delta_v[l].dim = 32, g.delta_v[l].heads = c->hkv, g.delta_v[l].paged = c->ps > 0;
    }
    /* cache strides: the row (key) stride is hkv*dim, the batch/page stride rows*that */
    int skv = 0;
    for (int i = 0; i < c->b; i++)
        skv = c->kv_len[i] > skv ? c->kv_len[i] : skv;
    long long rows = c->ps ? c->ps : (skv ? skv : 1);
#define CSTR(i, dim) rs(pb->kc[i].h, rows * c->hkv * (dim), (long long)c->hkv * (dim), (dim))
    g.shared.kp[0].k = CSTR(0, 128);
    g.shared.kp[0].q = g.q_base[0];
    for (int l = 0; l < L; l++) {
        g.delta[l].k = CSTR(1 + l, 32);
        g.delta_v[l].v = CSTR(L + 2 + l, 32);
    }
    g.shared.vp[0].alias = -1, g.shared.vp[0].dim = 128, g.shared.vp[0].heads = c->hkv, g.shared.vp[0].paged = c->ps > 0;
    g.shared.vp[0].v = CSTR(L + 1, 128);
#undef CSTR
    ref_parts_layers(&g, REF_PARTS_EXACT, o, lse);
}

/* Uploads the inputs (once) and fills the kernel params; layer_only >= 0: a 1-layer problem of that layer. */
static void params_of(prob *pb, const variant *v, int layer_only, kf_parts_params *p)
{
    const pcase *c = pb->c;
    memset(p, 0, sizeof *p);
    int skv = 0;
    for (int i = 0; i < c->b; i++)
        skv = c->kv_len[i] > skv ? c->kv_len[i] : skv;
    if (!pb->len_d) {
        for (int l = 0; l < 4; l++)
            for (int q = 0; q < 2; q++)
                if (pb->q[l][q].h)
                    buf_up(&pb->q[l][q]);
        for (int i = 0; i < 10; i++)
            if (pb->kc[i].h)
                buf_up(&pb->kc[i]);
        if (pb->k8) {
            CU(cu->MemAlloc(&pb->k8_d, pb->n8 + 16));
            CU(cu->MemcpyHtoD(pb->k8_d, pb->k8, pb->n8));
            if (c->kv8 == 2) {
                CU(cu->MemAlloc(&pb->k8b_d, pb->n8 + 16));
                CU(cu->MemcpyHtoD(pb->k8b_d, pb->k8, pb->n8));
            }
            CU(cu->MemAlloc(&pb->sc_d, pb->nsc * 4 + 16 + 8 * (size_t)c->hkv));
            CU(cu->MemcpyHtoD(pb->sc_d, pb->sc, pb->nsc * 4 + 8 * (size_t)c->hkv));
        }
        for (int l = 0; l < pb->L; l++) {
            CU(cu->MemAlloc(&pb->o[l].d, pb->o[l].n * 2 + 16));
            CU(cu->MemAlloc(&pb->lse_d[l], (size_t)c->b * c->sq * c->hq * 4 + 16));
        }
        CU(cu->MemAlloc(&pb->len_d, sizeof(int) * 8));
        CU(cu->MemcpyHtoD(pb->len_d, c->kv_len, sizeof(int) * (size_t)c->b));
        if (c->ps) {
            CU(cu->MemAlloc(&pb->bt_d, sizeof(int) * (size_t)c->b * pb->max_pages));
            CU(cu->MemcpyHtoD(pb->bt_d, pb->bt, sizeof(int) * (size_t)c->b * pb->max_pages));
        }
    }
    long long rows = c->ps ? c->ps : (skv ? skv : 1);
    int L = layer_only >= 0 ? 1 : c->layers;
    int l0 = layer_only >= 0 ? layer_only : 0;
    if (c->kind == MLA) {
        kf_parts_tensor k0 = {(void *)pb->kc[0].d, rows * 576, 576, 576};
        p->c[0] = k0;
        p->c[1] = k0;
        p->c[1].p = (const uint16_t *)(uintptr_t)pb->kc[0].d + 512;
        if (c->kv8) {   /* the same strides, in bytes; the scales [rows, hkv] */
            p->c[0].p = (const void *)(uintptr_t)pb->k8_d;
            p->c[1].p = (const unsigned char *)(uintptr_t)(c->kv8 == 2 ? pb->k8b_d : pb->k8_d) + 512;
            p->cs = (kf_parts_tensor){(const void *)(uintptr_t)pb->sc_d, rows * c->hkv, c->hkv, 1};
        }
        kf_parts_tensor q = {(void *)pb->q[0][0].d, (long long)c->sq * c->hq * 576, (long long)c->hq * 576, 576};
        p->q[0][0] = q;
        p->q[0][1] = q;
        p->q[0][1].p = (const uint16_t *)(uintptr_t)pb->q[0][0].d + 512;
    } else {
        int Lc = c->layers;
#define CT(i, dim) ((kf_parts_tensor){(void *)pb->kc[i].d, rows * c->hkv * (dim), (long long)c->hkv * (dim), (dim)})
        int n = 0;
        p->c[n++] = CT(0, 128);
        for (int l = 0; l < L; l++)
            p->c[n++] = CT(1 + l0 + l, 32);
        p->c[n++] = CT(Lc + 1, 128);
        for (int l = 0; l < L; l++)
            p->c[n++] = CT(Lc + 2 + l0 + l, 32);
#undef CT
        for (int l = 0; l < L; l++) {
            p->q[l][0] = (kf_parts_tensor){(void *)pb->q[l0 + l][0].d, (long long)c->sq * c->hq * 128, (long long)c->hq * 128, 128};
            p->q[l][1] = (kf_parts_tensor){(void *)pb->q[l0 + l][1].d, (long long)c->sq * c->hq * 32, (long long)c->hq * 32, 32};
        }
    }
    for (int l = 0; l < L; l++) {
        p->o[l] = (kf_parts_tensor){(void *)pb->o[l0 + l].d, (long long)c->sq * c->hq * pb->dv, (long long)c->hq * pb->dv, pb->dv};
        p->lse[l] = (float *)(uintptr_t)pb->lse_d[l0 + l];
    }
    p->lse_sb = (long long)c->hq * c->sq;
    p->lse_sh = c->sq;
    p->kv_len = (const int *)(uintptr_t)pb->len_d;
    p->block_table = c->ps ? (const int *)(uintptr_t)pb->bt_d : NULL;
    p->bt_sb = pb->max_pages;
    p->b = c->b, p->sq = c->sq, p->skv = skv, p->hq = c->hq, p->hkv = c->hkv;
    p->splits = (int)gen_kv_int(&v->vp, "sp", 1);
    p->ws_rows = c->b * c->sq;
    p->scale = (float)pb->scale;
    p->scale_log2 = (float)(pb->scale * 1.4426950408889634);
    size_t ws = rt_parts_workspace_bytes(&v->vp, p);
    if (ws > pb->ws_bytes) {
        if (pb->ws_d)
            cu->MemFree(pb->ws_d);
        CU(cu->MemAlloc(&pb->ws_d, ws));
        pb->ws_bytes = ws;
    }
    if (ws)
        CU(cu->MemsetD8(pb->ws_d, 0xFF, ws));
    rt_parts_set_workspace(&v->vp, p, ws ? (void *)(uintptr_t)pb->ws_d : NULL);
}

/* Poisons the outputs, launches every kernel of v, downloads o and lse (rid order: [b, sq, hq]). */
static int launch(prob *pb, const variant *v, int layer_only)
{
    const pcase *c = pb->c;
    kf_parts_params p;
    params_of(pb, v, layer_only, &p);
    int L = layer_only >= 0 ? 1 : c->layers, l0 = layer_only >= 0 ? layer_only : 0;
    size_t nl = (size_t)c->b * c->sq * c->hq;
    for (int l = l0; l < l0 + L; l++) {
        CU(cu->MemsetD8(pb->o[l].d, 0xFF, pb->o[l].n * 2));
        CU(cu->MemsetD32(pb->lse_d[l], CHECK_POISON32, nl));
    }
    core_err err = CORE_ERR_INIT;
    unsigned grid[3];
    kf_parts_tmaps tm;
    void *args[2];
    if (rt_parts_args(&v->vp, &p, &tm, args, &err) || rt_parts_grid(&v->vp, &p, 0, grid)
        || rt_module_launch(&v->m, 0, grid, args, NULL, &err)) {
        printf("  error: launch %s: %s\n", v->key, err.msg);
        return -1;
    }
    for (int l = 0; p.splits > 1 && l < L; l++) {
        kf_attn_params a;
        rt_parts_combine_params(&p, l, &a);
        void *cargs[] = {&a};
        if (rt_parts_grid(&v->vp, &p, 1, grid) || rt_module_launch(&v->m, 1, grid, cargs, NULL, &err)) {
            printf("  error: combine %s: %s\n", v->key, err.msg);
            return -1;
        }
    }
    CUresult r = cu->CtxSynchronize();
    if (r) {
        rt_cuda_errstr(r, err.msg, sizeof err.msg);
        printf("  error: run %s: %s\n", v->key, err.msg);
        exit(2);   /* the context is gone */
    }
    for (int l = l0; l < l0 + L; l++) {
        CU(cu->MemcpyDtoH(pb->o[l].h, pb->o[l].d, pb->o[l].n * 2));
        float *t = malloc(nl * 4);
        CU(cu->MemcpyDtoH(t, pb->lse_d[l], nl * 4));
        for (int b = 0; b < c->b; b++)   /* [b, hq, sq] -> [b, sq, hq] */
            for (int i = 0; i < c->sq; i++)
                for (int h = 0; h < c->hq; h++)
                    pb->lse_h[l][((size_t)b * c->sq + i) * c->hq + h] = t[((size_t)b * c->hq + h) * c->sq + i];
        free(t);
    }
    return 0;
}

static void case_str(const pcase *c, char *s, size_t n)
{
    int w = snprintf(s, n, "%s %s b%d sq%d %d/%d L%d ps%d c%d kv[", c->kind == MLA ? "mla" : "base+delta", c->dtype,
                     c->b, c->sq, c->hq, c->hkv, c->layers, c->ps, c->causal);
    for (int i = 0; i < c->b && w < (int)n; i++)
        w += snprintf(s + w, n - (size_t)w, "%s%d", i ? "," : "", c->kv_len[i]);
    if (w < (int)n)
        snprintf(s + w, n - (size_t)w, "]");
}

/* Runs case c against the reference: 1 pass, 0 fail. */
static int run_case(const pcase *c, int quiet)
{
    char cs[160];
    case_str(c, cs, sizeof cs);
    if (needs_sm90a(c->params)) {
        if (!quiet)
            printf("  %-60s %s: skipped: needs sm_90a, this GPU is %s\n", cs, c->params, tg.arch);
        return 1;
    }
    variant v;
    int st = variant_build(&v, c, c->layers, 1);
    if (st > 0)
        return 1;   /* mutant not applicable: nothing to run */
    if (st < 0) {
        printf("  %-60s build failed: FAIL\n", cs);
        return 0;
    }
    prob pb;
    prob_make(&pb, c, check_fresh_seed());
    size_t nl = (size_t)c->b * c->sq * c->hq;
    double *o = malloc(sizeof(double) * nl * pb.dv * c->layers), *lse = malloc(sizeof(double) * nl * c->layers);
    reference(&pb, o, lse);
    int ok = launch(&pb, &v, -1) == 0;
    for (int l = 0; ok && l < c->layers; l++) {
        check_stats so;
        check_lse_stats sl;
        check_compare(pb.dt, pb.o[l].h, o + l * nl * pb.dv, nl * pb.dv, &so);
        check_compare_lse(pb.lse_h[l], lse + l * nl, nl, &sl);
        int pass = check_pass(&so, check_tol(pb.dt)) && check_lse_pass(&sl, CHECK_LSE_TOL);
        if (!quiet) {
            char a[200], b[200];
            check_format(a, sizeof a, &so, check_tol(pb.dt));
            check_format_lse(b, sizeof b, &sl, CHECK_LSE_TOL);
            printf("  %-60s %s layer %d  o %s  lse %s\n", cs, v.key + strlen("attn_parts_decode."), l, a, b);
        }
        ok &= pass;
    }
    free(o);
    free(lse);
    prob_free(&pb);
    rt_module_unload(&v.m);
    return ok;
}

/* Layers L at once against the 1-layer variant on each layer alone, bit for bit. */
static int run_bitwise(const pcase *c)
{
    char cs[160];
    case_str(c, cs, sizeof cs);
    variant vl, v1;
    if (variant_build(&vl, c, c->layers, 1) || variant_build(&v1, c, 1, 1)) {
        printf("  %-60s build failed: FAIL\n", cs);
        return 0;
    }
    prob pb;
    prob_make(&pb, c, check_fresh_seed());
    size_t nl = (size_t)c->b * c->sq * c->hq;
    int ok = launch(&pb, &vl, -1) == 0;
    uint16_t *oj[4];
    float *lj[4];
    for (int l = 0; l < c->layers; l++) {
        oj[l] = malloc(pb.o[l].n * 2);
        memcpy(oj[l], pb.o[l].h, pb.o[l].n * 2);
        lj[l] = malloc(nl * 4);
        memcpy(lj[l], pb.lse_h[l], nl * 4);
    }
    for (int l = 0; ok && l < c->layers; l++) {
        ok = launch(&pb, &v1, l) == 0;
        size_t diff = 0;
        for (size_t i = 0; ok && i < pb.o[l].n; i++)
            diff += oj[l][i] != pb.o[l].h[i];
        for (size_t i = 0; ok && i < nl; i++)
            diff += memcmp(&lj[l][i], &pb.lse_h[l][i], 4) != 0;
        printf("  %-60s layer %d of %d vs alone: %zu differing values: %s\n", cs, l, c->layers, diff,
               diff ? "FAIL" : "pass");
        ok &= diff == 0;
    }
    for (int l = 0; l < c->layers; l++)
        free(oj[l]), free(lj[l]);
    prob_free(&pb);
    rt_module_unload(&vl.m);
    rt_module_unload(&v1.m);
    return ok;
}


/* Case c through kf_parts_plan / kf_parts_run on the plan's default variant: 1 pass, 0 fail. */
static int run_api_case(const pcase *c, const char *dbp)
{
    char cs[160];
    case_str(c, cs, sizeof cs);
    variant v;
    if (variant_build(&v, c, c->layers, 0)) {   /* the default variant, into the database */
        printf("  %-60s build failed: FAIL\n", cs);
        return 0;
    }
    kf_config cfg = KF_CONFIG_INIT;
    cfg.db_path = dbp;
    const char *tdir = getenv("KFORGE_TEMPLATE_DIR");
    cfg.template_dir = tdir && *tdir ? tdir : NULL;
    kf_ctx *ctx;
    if (kf_open(&ctx, &cfg) != KF_OK) {
        printf("  %-60s kf_open: %s: FAIL\n", cs, kf_errmsg(ctx));
        kf_close(ctx);
        return 0;
    }
    prob pb;
    prob_make(&pb, c, check_fresh_seed());
    kf_parts_params kp;
    params_of(&pb, &v, -1, &kp);   /* uploads the inputs */
    int skv = 0;
    for (int i = 0; i < c->b; i++)
        skv = c->kv_len[i] > skv ? c->kv_len[i] : skv;
    kf_parts_desc d = KF_PARTS_DESC_INIT;
    d.dtype = pb.dt == CHECK_FP16 ? KF_FP16 : KF_BF16;
    d.parts = c->kind == MLA ? "latent512_rope64" : "base128_delta32";
    d.value = c->kind == MLA ? KF_PARTS_VALUE_ALIAS : KF_PARTS_VALUE_SEPARATE;
    d.dv = pb.dv, d.hq = c->hq, d.hkv = c->hkv, d.layers = c->layers, d.page_size = c->ps, d.causal = c->causal;
    d.scale = (float)pb.scale;
    d.max_batch = c->b, d.max_q = c->sq, d.max_kv = skv;
    d.kv_dtype = c->kv8 ? KF_KV_E4M3 : KF_KV_SAME;
    kf_plan *plan = NULL;
    int ok = 1;
    if (kf_parts_plan(ctx, &d, &plan) != KF_OK) {
        printf("  %-60s kf_parts_plan: %s: FAIL\n", cs, kf_errmsg(ctx));
        ok = 0;
    }
    kf_parts_tensors t;
    memset(&t, 0, sizeof t);
    int nq = c->kind == MLA ? 1 : 2;
    for (int l = 0; l < c->layers; l++)
        for (int q = 0; q < nq; q++)
            t.q[l][q] = (kf_parts_view){kp.q[l][q].p, {kp.q[l][q].sb, kp.q[l][q].ss, kp.q[l][q].sh}};
    if (c->kind == MLA) {
        t.q[0][1] = (kf_parts_view){kp.q[0][1].p, {kp.q[0][1].sb, kp.q[0][1].ss, kp.q[0][1].sh}};
        t.k[0][0] = (kf_parts_view){kp.c[0].p, {kp.c[0].sb, kp.c[0].ss, kp.c[0].sh}};
        t.k[0][1] = (kf_parts_view){kp.c[1].p, {kp.c[1].sb, kp.c[1].ss, kp.c[1].sh}};
        if (c->kv8)
            t.kv_scale = (kf_parts_view){kp.cs.p, {kp.cs.sb, kp.cs.ss, kp.cs.sh}};
    } else {
        int L = c->layers;
        t.k[0][0] = (kf_parts_view){kp.c[0].p, {0, 0, 0}};
        t.v[0][0] = (kf_parts_view){kp.c[L + 1].p, {0, 0, 0}};
        for (int l = 0; l < L; l++) {
            t.k[l][1] = (kf_parts_view){kp.c[1 + l].p, {0, 0, 0}};
            t.v[l][1] = (kf_parts_view){kp.c[L + 2 + l].p, {0, 0, 0}};
        }
    }
    for (int l = 0; l < c->layers; l++) {
        t.o[l] = (kf_parts_view){kp.o[l].p, {0, 0, 0}};
        t.lse[l] = kp.lse[l];
    }
    t.kv_len = kp.kv_len;
    t.block_table = kp.block_table;
    t.bt_stride = c->ps ? pb.max_pages : 0;
    t.batch = c->b, t.q_len = c->sq;
    size_t nl = (size_t)c->b * c->sq * c->hq;
    for (int l = 0; ok && l < c->layers; l++) {
        CU(cu->MemsetD8(pb.o[l].d, 0xFF, pb.o[l].n * 2));
        CU(cu->MemsetD32(pb.lse_d[l], CHECK_POISON32, nl));
    }
    if (ok && kf_parts_run(plan, &t, NULL) != KF_OK) {
        printf("  %-60s kf_parts_run: %s: FAIL\n", cs, kf_errmsg(ctx));
        ok = 0;
    }
    if (ok) {
        CU(cu->CtxSynchronize());
        double *o = malloc(sizeof(double) * nl * pb.dv * c->layers), *lse = malloc(sizeof(double) * nl * c->layers);
        reference(&pb, o, lse);
        for (int l = 0; l < c->layers; l++) {
            CU(cu->MemcpyDtoH(pb.o[l].h, pb.o[l].d, pb.o[l].n * 2));
            float *tl = malloc(nl * 4);
            CU(cu->MemcpyDtoH(tl, pb.lse_d[l], nl * 4));
            for (int b = 0; b < c->b; b++)
                for (int i = 0; i < c->sq; i++)
                    for (int h = 0; h < c->hq; h++)
                        pb.lse_h[l][((size_t)b * c->sq + i) * c->hq + h] = tl[((size_t)b * c->hq + h) * c->sq + i];
            free(tl);
            check_stats so;
            check_lse_stats sl;
            check_compare(pb.dt, pb.o[l].h, o + l * nl * pb.dv, nl * pb.dv, &so);
            check_compare_lse(pb.lse_h[l], lse + l * nl, nl, &sl);
            char a[200], b[200];
            check_format(a, sizeof a, &so, check_tol(pb.dt));
            check_format_lse(b, sizeof b, &sl, CHECK_LSE_TOL);
            int pass = check_pass(&so, check_tol(pb.dt)) && check_lse_pass(&sl, CHECK_LSE_TOL);
            printf("  %-60s api %s (%s) layer %d  o %s  lse %s\n", cs, kf_plan_variant(plan), kf_plan_source(plan), l, a,
                   b);
            ok &= pass;
        }
        free(o);
        free(lse);
    }
    kf_plan_free(plan);
    prob_free(&pb);
    kf_close(ctx);
    return ok;
}


/* ---- the tuner's runner and timings ------------------------------------------------------ */

/* Builds the variant of time shape ts (the default, or the params it gives) into j (kept for the variant's
 * life). -1 on error. */
static int default_job(const struct tshape *ts, gen_kvset *shape, gen_job *j)
{
    char err[2048], w[256];
    gen_kv_clear(shape);
    if (gen_kv_parse(shape, ts->shape, err, sizeof err)) {
        printf("  error: shape '%s': %s\n", ts->shape, err);
        return -1;
    }
    gen_tmpl *t = gen_tmpl_load(host, gen_kv_str(shape, "family"));
    memset(j, 0, sizeof *j);
    j->tmpl = t;
    if (!t || gen_tmpl_fixed(t, shape, &j->fixed) || gen_tmpl_default(t, shape, &tg.dev, &j->params)) {
        printf("  error: template: %s\n", gen_host_errmsg(host));
        return -1;
    }
    if (ts->params) {
        gen_kvset over;
        gen_kv_clear(&over);
        if (gen_kv_parse(&over, ts->params, err, sizeof err)) {
            printf("  error: params '%s': %s\n", ts->params, err);
            return -1;
        }
        gen_kv_merge(&j->params, &over);
        if (gen_tmpl_valid(t, &j->fixed, &j->params, &tg.dev, w, sizeof w) <= 0) {
            printf("  error: variant not valid: %s\n", w);
            return -1;
        }
    }
    if (gen_build_prepare(j, &tg)) {
        printf("  error: template: %s\n", gen_host_errmsg(host));
        return -1;
    }
    if (gen_build_run(j, 1, 2, db, &tg, NULL, NULL, err, sizeof err) != 0 || j->failed) {
        printf("  error: compile %s: %s %s\n", j->variant_key, j->err, err);
        return -1;
    }
    return 0;
}

/* The gate again on the same tune_parts: its kept case (the inputs uploaded again, the reference
 * not recomputed) must pass as well and name the first gate's seed. */
static int gate_again(tune_ctx *tc, tune_parts *k, const tune_compiled *v, const char *first)
{
    char verdict[600] = "";
    int pass = 0;
    double rel;
    if (tune_parts_gate(tc, k, v, &pass, &rel, verdict, sizeof verdict)) {
        printf("  error: second gate: %s\n", tune_ctx_errmsg(tc));
        return 0;
    }
    const char *s1 = strstr(first, "seed "), *s2 = strstr(verdict, "seed ");
    if (!pass || !s1 || !s2 || strcmp(s1, s2)) {
        printf("  error: second gate (the kept case): %s; first: %s\n", verdict, first);
        return 0;
    }
    return 1;
}

static int run_timings(void)
{
    core_err err = CORE_ERR_INIT;
    tune_ctx *tc = tune_open(0, &err);
    if (!tc) {
        printf("  error: tune_open: %s\n", err.msg);
        return 0;
    }
    int ok = 1;
    double ms[N_TIME] = {0};
    for (int i = 0; i < N_TIME; i++) {
        gen_kvset shape;
        gen_job j;
        tune_compiled v;
        if (!selected(time_shapes[i].params) && !strstr(time_shapes[i].shape, g_filter))
            continue;
        if (needs_sm90a(time_shapes[i].params)) {
            printf("  skipped: %s %s needs sm_90a, this GPU is %s\n", time_shapes[i].shape, time_shapes[i].params, tg.arch);
            continue;
        }
        if (default_job(&time_shapes[i], &shape, &j) || tune_compiled_from_job(&v, &j)) {
            ok = 0;
            continue;
        }
        tune_timing t;
        memset(&t, 0, sizeof t);
        char verdict[600] = "";
        core_err e = CORE_ERR_INIT;
        const char *why = tune_ctx_errmsg(tc);   /* what failed: on the session, or in e before it */
        int rc;
        if (!strcmp(gen_kv_str(&shape, "family"), "attn_decode")) {
            tune_attn_case c;
            memset(&c, 0, sizeof c);
            c.dtype = CHECK_BF16, c.b = 128, c.sq = 1, c.skv = 2048, c.hq = 8, c.hkv = 4, c.d = 64;
            rc = tune_attn_time(tc, &v, &c, 30, &t);
            if (!rc)
                printf("  %-100s %8.4f ms (x4 layers: %.4f ms)\n", j.variant_key, t.median_ms, 4 * t.median_ms);
        } else {
            tune_parts *k = tune_parts_new(&shape, &e);
            int pass = 0;
            double rel = 0, bytes, flops;
            tune_parts_work(&shape, &bytes, &flops);
            rc = !k || tune_parts_gate(tc, k, &v, &pass, &rel, verdict, sizeof verdict);
            if (!k)
                why = e.msg;
            printf("  gate %-95s %s\n", j.variant_key, rc ? why : verdict);
            ok &= !rc && pass;
            if (!rc && pass)
                ok &= gate_again(tc, k, &v, verdict);
            if (!rc)
                rc = tune_parts_time(tc, k, &v, 30, &t);
            if (!rc)
                printf("  %-100s %8.4f ms  %.2f TB/s cache  %.1f TFLOP/s\n", j.variant_key, t.median_ms,
                       bytes / (t.median_ms * 1e-3) / 1e12, flops / (t.median_ms * 1e-3) / 1e12);
            tune_parts_free(k, tc);
        }
        if (rc) {
            printf("  error: %s: %s\n", j.variant_key, why);
            ok = 0;
        }
        ms[i] = t.median_ms;
        tune_timing_free(&t);
        gen_job_free(&j);
    }
    if (ms[3] > 0 && ms[5] > 0)
        printf("  audit group: joint scan of 4 layers %.4f ms vs 4 x attn_decode D64 %.4f ms: %.2fx (target <= 1.0x); "
               "4 x layers=1 %.4f ms\n", ms[3], 4 * ms[5], ms[3] / (4 * ms[5]), 4 * ms[4]);
    tune_close(tc);
    return ok;
}

/* ---- mutants: each in its own process ------------------------------------------------- */

static int mutant_child(int m)
{
    g_mutant = m;
    int ran = 0, failed = 0;
    for (int i = 0; i < N_CASES; i++) {
        if (!(cases[i].muts & mutants[m].bit) || !case_selected(&cases[i]))
            continue;
        ran++;
        failed += !run_case(&cases[i], 1);
    }
    return ran == 0 ? 4 : (failed ? 1 : 0);
}

static int mutant_selected(int bit)
{
    for (int i = 0; i < N_CASES; i++)
        if ((cases[i].muts & bit) && case_selected(&cases[i]))
            return 1;
    return 0;
}

static int run_mutants(void)
{
    int killed = 0, planted = N_MUT;
    for (int m = 0; m < N_MUT; m++) {
        if (!mutant_selected(mutants[m].bit)) {
            printf("  mutant %-66s skipped: no case under the filter '%s'\n", mutants[m].name, g_filter);
            planted--;
            continue;
        }
        if ((mutants[m].bit & M_SM90A) && strcmp(tg.arch, "sm_90a") != 0) {
            printf("  mutant %-66s skipped: its cases need sm_90a, this GPU is %s\n", mutants[m].name, tg.arch);
            planted--;
            continue;
        }
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0)
            _exit(mutant_child(m));
        int status = 0;
        waitpid(pid, &status, 0);
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        const char *verdict = code == 0 ? "SURVIVED" : code == 4 ? "NOT PLANTED" : "killed";
        printf("  mutant %-66s %s (exit %d)\n", mutants[m].name, verdict, code);
        killed += code != 0 && code != 4;
    }
    printf("mutants killed: %d / %d\n", killed, planted);
    return killed == planted;
}

/* Without a GPU: build every variant (and every mutant of the cases it applies to) into the database. */
static int precompile(void)
{
    int bad = 0;
    for (int m = -1; m < N_MUT; m++) {
        g_mutant = m;
        int planted = 0;
        for (int i = 0; i < N_CASES; i++) {
            if (m >= 0 && !(cases[i].muts & mutants[m].bit))
                continue;
            variant v;
            int st = variant_build(&v, &cases[i], cases[i].layers, 0);
            bad += st < 0;
            planted += st == 0;
        }
        if (m >= 0)
            printf("  mutant '%s' planted in %d variants\n", mutants[m].name, planted);
        bad += m >= 0 && planted == 0;
        for (int i = 0; m < 0 && i < N_TIME; i++) {
            gen_kvset sh;
            gen_job j;
            bad += default_job(&time_shapes[i], &sh, &j) < 0;
            gen_job_free(&j);
        }
        for (int i = 0; m < 0 && i < N_API; i++) {
            variant v;
            bad += variant_build(&v, &api_cases[i], api_cases[i].layers, 0) < 0;
        }
        for (int i = 0; m < 0 && i < N_BIT; i++) {
            variant v;
            bad += variant_build(&v, &bit_cases[i], bit_cases[i].layers, 0) < 0;
            bad += variant_build(&v, &bit_cases[i], 1, 0) < 0;
        }
    }
    g_mutant = -1;
    return bad;
}

int main(void)
{
    core_err err = CORE_ERR_INIT;
    cu = rt_cuda(&err);
    int ndev = 0;
    int have_gpu = cu && !cu->DeviceGetCount(&ndev) && ndev > 0;
    const char *pre = getenv("KFORGE_TEST_PRECOMPILE");
    if (!have_gpu && !(pre && *pre && strcmp(pre, "0"))) {
        printf("skipped: no CUDA device\n");
        return 77;
    }
    g_filter = getenv("KFORGE_TEST_FILTER");
    g_filter = g_filter && *g_filter ? g_filter : NULL;
    const char *src = getenv("KFORGE_TEMPLATE_DIR");
    host = gen_host_new(src && *src ? src : NULL);
    const char *dbp = getenv("KFORGE_TEST_DB");
    dbp = dbp && *dbp ? dbp : "test_parts_gpu.db";
    if (!host || db_open(&db, dbp, DB_CREATE) != DB_OK) {
        fprintf(stderr, "error: cannot open the template host or database '%s'\n", dbp);
        return 1;
    }
    gen_device gd;
    const char *arch = "sm_90a";
    rt_devinfo info;
    if (have_gpu) {
        if (rt_module_context(0, &err) || rt_device_info(0, &info, &err)) {
            fprintf(stderr, "error: %s\n", err.msg);
            return 1;
        }
        rt_gen_device(&info, &gd);
        arch = gd.arch;
    } else {
        gen_device_for_arch(&gd, arch);
    }
    if (gen_target_init(&tg, arch, 0, &gd)) {
        fprintf(stderr, "error: no target for %s\n", arch);
        return 1;
    }
    if (!have_gpu) {
        int bad = precompile();
        printf("skipped: no CUDA device (variants precompiled into %s for %s, %d failed)\n", dbp, arch, bad);
        db_close(db);
        gen_host_free(host);
        return bad ? 1 : 77;
    }
    int fails = 0;
    if (g_filter)
        printf("filter '%s' (KFORGE_TEST_FILTER): the cases, timing rows and mutants whose params contain it; "
               "the bitwise and API cases skipped\n", g_filter);
    printf("== attn_parts_decode vs CPU fp64 (tuner/ref_parts)\n");
    for (int i = 0; i < N_CASES; i++)
        fails += case_selected(&cases[i]) ? !run_case(&cases[i], 0) : 0;
    printf("== joint layer scan vs one layer at a time (fp16, bitwise)\n");
    for (int i = 0; !g_filter && i < N_BIT; i++)
        fails += !run_bitwise(&bit_cases[i]);
    printf("== through the public API (kf_parts_plan, kf_parts_run)\n");
    for (int i = 0; !g_filter && i < N_API; i++)
        fails += !run_api_case(&api_cases[i], dbp);
    printf("== the tuner's runner (gate, timing) on the issue's shapes\n");
    fails += !run_timings();
    printf("== mutants (each must fail the cases above)\n");
    fails += !run_mutants();
    printf("%s: %d failure(s)\n", fails ? "FAIL" : "PASS", fails);
    db_close(db);
    gen_host_free(host);
    return fails ? 1 : 0;
}
