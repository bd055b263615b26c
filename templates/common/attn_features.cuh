/* common/attn_features.cuh: the model features' switches (0 unless the template defines them) and the softcap, shared by the GQA attention kernels (attn/fwd.cuh, attn/fwd_sm90.cuh, attn/naive.cuh) */
#ifndef KF_ATTN_FEATURES_CUH
#define KF_ATTN_FEATURES_CUH

/* What each feature does: common/attn_params.h; how a kernel serves it: the header of that kernel. Needs
 * common/types.cuh (kf_exp2). */
#ifndef KF_WIN
#define KF_WIN 0                                      /* sliding window (p.window_left) */
#endif
#ifndef KF_CAP
#define KF_CAP 0                                      /* softcap (p.softcap) */
#endif
#ifndef KF_SINK
#define KF_SINK 0                                     /* sink logits (p.sinks) */
#endif
#ifndef KF_KV8
#define KF_KV8 0                                      /* FP8 (e4m3) K/V */
#endif

#if KF_CAP
/* softcap of a raw dot product x: cap * tanh(x * m), m = scale / cap; tanh(y) = 1 - 2 / (e^2y + 1) (exact at
 * both ends: e^2y = inf gives 1, 0 gives -1), |error| ~ 1e-7 */
__device__ __forceinline__ float kf_softcap(float x, float m, float cap)
{
    const float y = fminf(fmaxf(x * m, -20.f), 20.f);
    const float e = kf_exp2(y * 2.8853900817779268f);
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(e + 1.f));
    return cap * (1.f - 2.f * r);
}
#endif

/* The score scales of a kernel whose raw dot products carry the factor kq (FP8 K/V: K's scale and Q's exponent;
 * else 1): sl2 takes a score to log2 units for the exponent, snat to natural-log units for the running max and the
 * LSE. With softcap the capped scores are already scaled (sl2 = log2 e, snat = 1) and capm is the factor of
 * kf_softcap. Declares const floats sl2, snat (and capm) in the enclosing scope. */
#if KF_CAP
#define KF_SCORE_SCALES(p, kq)                                                                                     \
    const float sl2 = 1.4426950408889634f, snat = 1.f, capm = (p).scale * (kq) / (p).softcap
#else
#define KF_SCORE_SCALES(p, kq) const float sl2 = (p).scale_log2 * (kq), snat = (p).scale * (kq)
#endif

/* A query row's end (head hh) from its running max m and sum l: inv = 1 / l (0 for a row without keys) and
 * lse = m snat + log l (-inf), the sink joining the denominator where the CTA writes o itself (no split; the split-KV
 * combine adds it otherwise). Returns inv. Needs common/attn_params.h. */
__device__ __forceinline__ float kf_attn_finish(const kf_attn_params &p, float m, float l, float snat, int hh, int nsplit,
                                                float &lse)
{
    float inv = l > 0.f ? 1.f / l : 0.f;
    lse = l > 0.f ? m * snat + logf(l) : KF_NEG_INF;
#if KF_SINK
    if (nsplit == 1) {   /* the sink joins the denominator: lse = log(e^lse + e^sink), o scaled by e^(lse0 - lse) */
        const float sk = p.sinks[hh], lse0 = lse;
        const float mm = fmaxf(lse0, sk);
        lse = mm + logf(expf(lse0 - mm) + expf(sk - mm));
        inv *= expf(lse0 - lse); // KF_MUTANT_SINK
    }
#endif
    return inv;
}

#endif
