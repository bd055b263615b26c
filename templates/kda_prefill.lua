-- kda_prefill.lua: chunked KDA prefill: per-chunk preparation (fp32) + serial state pass on tensor cores, or one fused kernel
-- Launch (runtime/kda_launch.c): fused 0: k0 kf_kda_prep grid (total/chunk + nseq, hv), k1 kf_kda_state grid
-- (dv/vs, hv, nseq), workspace (total/chunk + nseq) * hv * slot bytes (the state pass double-buffers the slot it reads);
-- fused 1: k0 kf_kda_state alone, no workspace. seg > 1 (split): k0 prep, k1 kf_kda_segop grid (dv/vs + dk/vs, hv,
-- nseq*seg), k2 kf_kda_segcomb grid (dv/vs, hv, nseq), k3 kf_kda_state grid (dv/vs, hv, nseq*seg); workspace adds
-- nseq*hv*seg*(2*dk*dv + dk*dk) fp32 after the slots (rounded up to 256 bytes).
-- impl "mma" (the default off sm_90a): the state pass of kda/prefill.cuh (mma.sync, the state in fragments of w warps, written to
-- shared memory as bf16 every chunk). impl "wgmma" (sm_90a; kda/prefill_sm90.cuh): the same kernels, grids and
-- workspace, the state pass as a producer warpgroup streaming the chunk slots and vs/64 consumer warpgroups holding
-- S^T as a wgmma accumulator (block 128 + 2 vs threads; w 8, unused), the segment combine the same; the sm_90a default since
-- session 9 (the GPU suite passed it, and it timed fastest). impl "recurrent" (any target; fused 1, one kernel, no
-- workspace, grid (dv/vs, hv, nseq) as the fused path): the token recurrence of kda/recur.cuh (a slice of vs value
-- columns in registers, vs / w columns a warp, the lanes of a column splitting the key rows) with the tokens taken
-- REC_TB at a time, their inputs staged in shared memory by the whole block and the serial pass over them reading only
-- shared memory and shuffles: short sequences in one launch.
local REC_TB = 32              -- impl recurrent: tokens a batch (kda/recur.cuh KF_RC_TB)
-- REC_T 20 (session 32, H100, kforge run sustained): n 3 t 17 7.7 us against the chunked path's 9.6, n 1 t 32 10.7
-- against 9.0; ~0.2 us a token between, so 20 keeps a ~8% margin under the crossover (t 18..28 not yet measured).
local REC_T = 20               -- the default's impl recurrent: small calls of few blocks up to this many tokens a sequence,
local REC_T_ANY = 4            -- and any call up to this many
-- impl wgmma's segments for the default (vs 64): the s of {1, 2, 4, 8, 16} whose estimated time is least, in units
-- of one chunk of the serial pass, for a chain of L = ceil(t / chunk) chunks (t: the plan's tokens a sequence): the
-- waves of kf_kda_segop's blocks (V / 64 + K / 64 a sequence, head and segment but the last) and of the state
-- pass's (V / 64 a segment), one block an SM (the ring takes the shared memory), each wave a chain of ceil(L / s),
-- plus the combine (a step a segment, about a chunk; ~3 fixed). Ties keep the smaller s. It picks (H200, kforge run
-- sustained, session 17) T 1K H2 8 (39.1 us; 4: 41.8, 16: 55.1), T 4K H2 16 (72.9; 8: 71.1, the one miss),
-- 2 x 4K H4 8 (0.126 ms; 4: 0.131, 16: 0.148), 32K H8 8 (0.707; 16: 0.724), T 8K H16 4 (0.364; 8: 0.380), and 1 at
-- T 8K H64 (0.868; 2: 1.23) and 8 x 2K H16 (0.456; 2: 0.659), where the state pass already fills the SMs.
-- A plan of n > 1 sequences (t = max_tokens / max_seqs) is called with anything from n sequences of t tokens to
-- one sequence of n t, and the two ends want different s: [1024, 0, 31] (n 3, t 352, H2) is 22 chunks a sequence
-- (seg 4 best) or one chain of 66 (seg 8 or 16; seg 4 1.43x their cost). So it takes the s whose worse cost relative
-- to the best s of either case is least (seg 8 there: 1.06x the best of 3 x 352), ties to the smaller s, among the s
-- whose segment workspace (n hv s (2 K V + K^2) fp32, kda_launch.c) is at most 256 MiB, the two bests taken among
-- them too (a many-sequence plan would otherwise reserve gigabytes for the one-sequence case), and only among the s
-- that cost n equal sequences at most 1.25x their best: without that bound equal sequences paid up to the model's
-- worse ratio (4 x 1K H8 seg 4: 1.34x seg 1; many short sequences at few heads the most, 64 x 1K H2 seg 4: 2.5x
-- seg 1). One sequence keeps the rule above.
local WG_SEG_WS = 256 * 1024 * 1024
local function wg_seg_cost(n, t, hv, shape, dev, c, s)
  local L, nhv, vb = (t + c - 1) // c, n * hv, shape.dv // 64
  local function waves(blocks) return (blocks + dev.sms - 1) // dev.sms end
  if s == 1 then return waves(nhv * vb) * L end
  return (waves(nhv * (vb + shape.dk // 64) * (s - 1)) + waves(nhv * vb * s)) * ((L + s - 1) // s) + (s - 1) + 3
end
local function wg_seg(shape, dev, c)
  local n, hv, cand = shape.n, shape.hv, {}
  for _, s in ipairs({ 1, 2, 4, 8, 16 }) do
    if n * s > 65535 then break end                -- the grid's z (kda_launch.c refuses it)
    if n == 1 or s == 1 or 4 * n * hv * s * (2 * shape.dk * shape.dv + shape.dk * shape.dk) <= WG_SEG_WS then
      cand[#cand + 1] = s
    end
  end
  local ca, cb = {}, {}                            -- cost: n sequences of t; one sequence of n t
  local ba, bb = math.huge, math.huge
  for i, s in ipairs(cand) do
    ca[i], cb[i] = wg_seg_cost(n, shape.t, hv, shape, dev, c, s), wg_seg_cost(1, n * shape.t, hv, shape, dev, c, s)
    ba, bb = math.min(ba, ca[i]), math.min(bb, cb[i])
  end
  -- max(ca / ba, cb / bb) over the common denominator ba bb, in integers (n 1: ca = cb, the least cost), among the s
  -- that keep n equal sequences within 1.25x their best (batched prefill of equal lengths is the common call)
  local best, best_w = 1, math.huge
  for i, s in ipairs(cand) do
    local w = math.max(ca[i] * bb, cb[i] * ba)
    if 4 * ca[i] <= 5 * ba and w < best_w then best, best_w = s, w end
  end
  return best
end

local function slot_bytes(f, c)
  return 2 * (3 * c * f.dk + c * c + c * f.dv) + 4 * f.dk
end

-- shared memory, mirrors the KF_PF_* layout of kda/prefill.cuh
local function scratch_floats(f, c, un)
  local kp, cp = f.dk + 1, c + 1
  local qk = (c - 16 + 32) * kp
  local tv = c * cp + c * un
  return 3 * c * kp + 2 * c * cp + c + math.max(qk, tv)
end
-- prep 1 (kda/prep_tc.cuh): bytes of its shared memory, mirrors KF_PF_TC_*; a chunk whose gates the bf16
-- factors cannot hold falls back to the fp32 preparation in the same memory, so the block gets the larger of both
local function tc_bytes(f, c, un)
  local k, ldk, ldc = f.dk, f.dk + 8, c + 8
  return 4 * c * (k + 4) + 12 * c * ldk + 12 * c + 12 * (c // 16) * k + 4 * c * (c + 1) + 6 * c * ldc
    + 48 * c + 2 * c * c + 2 * c * (un + 8)
end
local function prep_bytes(f, p, un)
  local fp32 = 4 * scratch_floats(f, p.chunk, un)
  if (p.prep or 0) == 1 then return math.max(fp32, tc_bytes(f, p.chunk, un)) end
  return fp32
end
local function state_bytes(f, p)
  local ldk, ldc = f.dk + 8, p.chunk + 8
  local nbuf = p.fused == 1 and 1 or 2     -- the split path double-buffers the chunk it reads
  local buf = 2 * 2 * p.chunk * ldk + 2 * f.dk * ldc + 2 * p.chunk * ldc + 2 * p.chunk * p.vs + 4 * f.dk
  return 2 * p.vs * ldk + 2 * p.vs * ldc + nbuf * buf
end
-- state tiles (16 x 8) of a dk x vs state block
local function f_tiles(dk, vs) return dk * vs // 128 end

-- impl wgmma: one ring stage (W, Qg in K/64 swizzled panels of C rows, KdT one panel of K rows, A one panel of C rows,
-- U [C][vs + 8], gl [K] fp32; 1024-aligned), and as many stages as fit (2..8: the producer runs ahead); mirrors
-- KF_PW_* of kda/prefill_sm90.cuh. The stage count is a fact of the sm_90a target (232448 bytes opt-in), so render
-- needs no device.
local WG_SMEM = 232448
local function wg_stage(f, p)
  local c = p.chunk
  return (4 * c * f.dk + 128 * f.dk + 128 * c + 2 * c * (p.vs + 8) + 4 * f.dk + 1023) // 1024 * 1024
end
-- impl wgmma's segment combine: one stage (M_s bf16 [K][K], c_s's image fp32 K vs; KF_PW_CB) and its two mbarriers,
-- as many as fit (2..8)
local function wg_comb_stage(f, p) return (2 * f.dk * f.dk + 4 * f.dk * p.vs + 1023) // 1024 * 1024 end
local function wg_comb_stages(f, p) return math.min(8, (WG_SMEM - 1024) // (wg_comb_stage(f, p) + 16)) end
local function wg_stages(f, p) return math.min(8, (WG_SMEM - 1024 - 128) // wg_stage(f, p)) end

local function smem_of(p, f)
  if p.impl == "wgmma" then   -- alignment slack, the stages, full and empty mbarriers
    local n = wg_stages(f, p)
    return { state = 1024 + n * wg_stage(f, p) + 16 * n, prep = prep_bytes(f, p, f.dv) }
  end
  local st = state_bytes(f, p)
  if p.fused == 1 then
    return { state = (st + 15) // 16 * 16 + prep_bytes(f, p, p.vs), prep = 0 }
  end
  return { state = st, prep = prep_bytes(f, p, f.dv) }
end

-- impl wgmma's scope: the split path with the state transposed, one consumer warpgroup per 64 value columns.
local function valid_wgmma(p, f, dev)
  if dev.arch ~= "sm_90a" then return false, "impl wgmma needs the sm_90a target, got " .. tostring(dev.arch) end
  if p.tr ~= 1 or p.fused ~= 0 or p.mma ~= 1 then
    return false, "impl wgmma takes tr 1, fused 0, mma 1 (the split path, state transposed), got tr " .. p.tr .. " fused "
      .. p.fused .. " mma " .. p.mma
  end
  if p.vs ~= 64 and p.vs ~= 128 then
    return false, "impl wgmma takes vs 64 or 128 (a consumer warpgroup per 64), got " .. p.vs
  end
  -- w plays no part (every kernel of impl wgmma, its segment combine too since session 18, has a producer warpgroup
  -- and vs / 64 consumers, 128 + 2 vs threads): one value keeps the space free of duplicate variants
  if p.w ~= 8 then return false, "impl wgmma takes w 8 (no kernel of it uses w), got " .. p.w end
  if (p.seg or 1) > 1 and p.vs > f.dk then
    return false, "impl wgmma with seg > 1 needs vs <= dk (identity columns), got vs " .. p.vs
  end
  if wg_stages(f, p) < 2 then return false, "impl wgmma: fewer than 2 ring stages fit" end
  local s = smem_of(p, f)
  if s.state > dev.smem_optin then return false, "state block shared memory " .. s.state .. " > " .. dev.smem_optin end
  if s.prep > dev.smem_optin then return false, "prep shared memory " .. s.prep .. " > " .. dev.smem_optin end
  return true
end

-- impl recurrent: kda/recur.cuh, a block per value slice of vs columns; the knobs of the chunked paths are pinned (one
-- variant a geometry). Mirrors KF_RC_*: cw columns a warp in groups of c (the fewest, of 1, 2, 4, that leave a lane at
-- most 8 key rows: a token's shared-memory reads a block shrink with c, its shuffle levels grow), lc lanes a group, r
-- key rows a lane, the batch's stage.
local function rec_geom(p, f)
  local g = { cw = p.vs // p.w, smem = 16 * REC_TB * f.dk + 4 * REC_TB * p.vs + 8 * REC_TB }
  for _, c in ipairs({ 1, 2, 4 }) do
    local grp = g.cw // c
    if c <= g.cw and g.cw % c == 0 and 32 % grp == 0 then
      g.c, g.lc = c, 32 // grp
      g.r = f.dk // g.lc
      if g.r <= 8 then break end
    end
  end
  return g
end
local function valid_recurrent(p, f, dev)
  if p.chunk ~= 16 or p.tr ~= 1 or p.fused ~= 1 or p.mma ~= 1 or (p.seg or 1) ~= 1 or (p.prep or 0) ~= 0 then
    return false, "impl recurrent takes chunk 16, tr 1, fused 1, mma 1, seg 1, prep 0 (its knobs are vs and w)"
  end
  local g = rec_geom(p, f)
  if p.vs % p.w ~= 0 or not g.c then
    return false, "impl recurrent: vs " .. p.vs .. " over w " .. p.w .. " warps: the column groups of a warp must divide 32"
  end
  -- the lane's state and its rows' k values sit beside the batch's staged loads: more than 32 state values spill
  if g.r * g.c > 32 then
    return false, "impl recurrent: " .. g.r .. " key rows x " .. g.c .. " columns a lane (vs " .. p.vs .. ", w " .. p.w
      .. "); at most 32 values"
  end
  if g.smem > dev.smem_optin then return false, "impl recurrent: shared memory " .. g.smem .. " > " .. dev.smem_optin end
  return true
end

-- The part of kda/prefill.cuh that impl wgmma shares, cut at its section comment, so that impl mma renders the
-- fragment whole and byte for byte as before the knob: the preparation (everything before the serial state pass;
-- kda/prefill_sm90.cuh has its own state pass, segment operators and combine), and the #endif of its guard.
local function prefill_prep()
  local src = fragment("kda/prefill.cuh")
  local a = src:find("/* ---- the serial state pass", 1, true)
  if not a then error("kda/prefill.cuh: the state pass section comment moved") end
  return src:sub(1, a - 1), "#endif /* KF_KDA_PREFILL_CUH */\n"
end

-- The kernels of a variant in launch order (kernels() marks them for dependent launch).
local function kernels_of(p, f)
  if p.impl == "recurrent" then return { { name = "kf_kda_recur", threads = 32 * p.w, smem = rec_geom(p, f).smem } } end
  local s = smem_of(p, f)
  -- impl wgmma: the state and segment passes run a producer warpgroup beside vs / 64 consumer warpgroups
  local st_threads = p.impl == "wgmma" and 128 + 2 * p.vs or 32 * p.w
  if p.fused == 1 then
    return { { name = "kf_kda_state", threads = 32 * p.w, smem = s.state } }
  end
  if (p.seg or 1) > 1 then
    return { { name = "kf_kda_prep", threads = 256, smem = s.prep },
             { name = "kf_kda_segop", threads = st_threads, smem = s.state },
             p.impl == "wgmma" and { name = "kf_kda_segcomb", threads = 128 + 2 * p.vs,
                                          smem = 1024 + wg_comb_stages(f, p) * (wg_comb_stage(f, p) + 16) }
               or { name = "kf_kda_segcomb", threads = 32 * p.w, smem = 4 * (f.dk * f.dk + f.dk * p.vs) },
             { name = "kf_kda_state", threads = st_threads, smem = s.state } }
  end
  return { { name = "kf_kda_prep", threads = 256, smem = s.prep },
           { name = "kf_kda_state", threads = st_threads, smem = s.state } }
end

return {
  family   = "kda_prefill",
  doc      = "Kimi Delta Attention chunked prefill: chunk preparation + serial state pass (mma.sync, or wgmma on sm_90a), or one fused kernel, or the token recurrence (short sequences)",
  includes = { "common/kda_params.h", "common/types.cuh", "common/mma.cuh", "kda/common.cuh", "kda/prefill.cuh",
               "kda/prep_tc.cuh", "common/wgmma.cuh", "kda/prefill_sm90.cuh", "kda/recur.cuh" },
  shape    = { n = "int", t = "int", h = "int", hv = "int", dk = "int", dv = "int" },
  -- chunk: tokens per chunk; vs: value columns per state block; w: warps of the state block;
  -- tr: state held transposed [vs, K]; fused: one kernel (small batches); mma: 0 = CUDA-core fragments (debug)
  -- seg: segments per sequence run in parallel (split path; the chunk update is affine in the state)
  -- prep: the chunk preparation, 0 fp32 on CUDA cores, 1 on tensor cores (kda/prep_tc.cuh; mma 0 runs its
  -- fragments on CUDA cores too)
  -- impl: the state pass on mma.sync, or on wgmma (sm_90a; vs 128 only there), or the token recurrence
  -- ("recurrent": the value slice vs over w warps; chunk 16, tr 1, fused 1, mma 1, seg 1, prep 0 only)
  params   = { chunk = { 16, 32, 64 }, vs = { 16, 32, 64, 128 }, w = { 4, 8 }, tr = { 0, 1 }, fused = { 0, 1 }, mma = { 1, 0 },
               seg = { 1, 2, 4, 8, 16 }, prep = { 0, 1 }, impl = { "mma", "wgmma", "recurrent" } },
  fixed    = function(shape) return { dk = shape.dk, dv = shape.dv } end,
  valid    = function(p, f, dev)
    if f.dk ~= 64 and f.dk ~= 128 then return false, "dk must be 64 or 128, got " .. f.dk end
    if f.dv ~= 64 and f.dv ~= 128 then return false, "dv must be 64 or 128, got " .. f.dv end
    if p.vs > f.dv then return false, "vs " .. p.vs .. " > dv " .. f.dv end
    if p.impl == "recurrent" then return valid_recurrent(p, f, dev) end
    local seg = p.seg or 1
    if seg > 1 and (p.fused == 1 or p.tr ~= 1 or p.mma ~= 1) then
      return false, "seg " .. seg .. " only on the split tensor-core path with tr 1"
    end
    if seg > 1 and 4 * (f.dk * f.dk + f.dk * p.vs) > dev.smem_optin then return false, "segment combine shared memory" end
    if p.impl == "wgmma" then return valid_wgmma(p, f, dev) end
    -- impl mma's segment combine (kda/prefill.cuh, fp32 on CUDA cores, two shared reads a multiply-add) takes ~40 us
    -- a segment on an H200, so more segments than 4 never pay there; impl wgmma's combine is a few wgmma a segment
    if seg ~= 1 and seg ~= 4 then return false, "seg " .. seg .. " only with impl wgmma (impl mma takes seg 1 or 4)" end
    if p.vs > 64 then return false, "vs " .. p.vs .. " only with impl wgmma" end
    -- mma 0 (the same fragments on CUDA cores) exists to debug the tensor-core path: one geometry is enough
    if p.mma == 0 and (p.vs ~= 16 or p.w ~= 4) then return false, "mma 0 (debug) only with vs 16, w 4" end
    local ns = f.dk * p.vs // 128
    if ns % p.w ~= 0 then return false, "state tiles " .. ns .. " do not split over " .. p.w .. " warps" end
    -- 16 tiles (64 fp32 accumulators per thread: vs 64, w 4 at dk 128) spill 8-1288 B under NVRTC 13
    if ns // p.w > 8 then return false, "more than 8 state tiles per warp (" .. ns // p.w .. ": registers spill)" end
    local s = smem_of(p, f)
    if s.state > dev.smem_optin then return false, "state block shared memory " .. s.state .. " > " .. dev.smem_optin end
    if s.prep > dev.smem_optin then return false, "prep shared memory " .. s.prep .. " > " .. dev.smem_optin end
    return true
  end,
  default  = function(shape, dev)
    -- From the tuner on an H200 (2026-11-29, kforge tune --sweep kda --budget 16..24, bench/RESULTS.md):
    -- chunk 16, w 8 and the split path won every shape: T8192 H16 chunk16.vs16.w8 1.11 ms; T8192 H64
    -- vs64 2.81 ms (the chunk-32 default of before: 4.58); 8 x 2048 H16 vs64 1.42 ms (x1.34);
    -- [17,0,16] H2/HV4 vs32 28 us (the fused one-launch path: 45). Few state blocks (N HV < 32) take
    -- narrow value slices (vs 16) to fill the SMs, many take vs 64.
    -- Segments (issue 17): with N HV < 32 the serial pass runs on N HV V/VS <= 128 blocks, fewer than the
    -- SMs, over t/16 chunks each, and seg 4 shortens that chain. Measured 2026-12-01 (H200, kforge run,
    -- sustained, 1980 MHz): T 8192 H16 seg 4 1.305 ms, against seg 1's 1.109 ms of 2026-11-29: the
    -- segments' extra passes cost more than the shorter chain gains at chunk 16, so seg stays 1 here and
    -- the tuner may pick seg 4 (its workspace, N HV seg (2 K V + K^2) fp32, is sized only for seg > 1).
    -- Session 7 (H200, 2026-12-01, kforge tune --sweep kda exhaustive, sustained and interleaved, band 1.0%): vs 32 w 4
    -- won all three shapes it reached over the vs 16 / 64, w 8 defaults: T 8192 H16 with seg 4, 1.0365 ms (x1.070);
    -- T 8192 H64 2.758 ms (x1.016); 8 x 2048 H16 1.390 ms (x1.024). With vs 32 the segments pay where N HV < 32.
    -- The small packed calls (tokens x HV <= 4096) were not reached: they keep vs 32, w 8.
    -- Session 9 (H200, 2026-12-01, test_kda_gpu's prefill timings, T 8192): prep 1 (the preparation on tensor cores)
    -- takes k0 0.611 -> 0.377 ms at H16 and 2.42 -> 1.46 ms at H64; impl wgmma (sm_90a) takes the state pass
    -- 0.65 -> 0.38 ms (seg 1, vs 64) and, with seg 4, 0.78 ms in all at H16 (impl mma prep 0: 1.17); at H64 wgmma
    -- prep 1 2.03 ms (mma prep 1: 2.35). The small packed calls: prep 1, vs 32, w 8 24.8 us (prep 0: 34.1).
    -- This default at T 8192 H16, kforge run sustained (1980 MHz, 418 W): 0.635 ms.
    -- Session 11 (H200, kforge run sustained, 1980 MHz, one sequence at H 2): the small-call variant below
    -- against impl wgmma vs 64: t 1024 0.1128 / 0.0619 ms (seg 4: 0.1246 / 0.1694; chunk 32 0.0847), t 256
    -- 0.0352 / 0.0247, t 64 0.0158 / 0.0144 (graphs). So on sm_90a a small call whose sequences hold >= 64
    -- tokens each (t) takes the wgmma state pass; shorter ones ([17, 0, 16], t 11: not timed with wgmma) keep
    -- the mma one. The [1024, 0, 31] row with wgmma: 0.0700 ms in the harness, fla chunk_kda 0.0751.
    local small = shape.n * shape.t * shape.hv <= 4096
    -- Session 15 (H200, kforge run sustained, graphs, 1980 MHz): the token recurrence (impl recurrent, one launch) against
    -- the chunked default. Few blocks (latency-bound, one warp a scheduler): n 3 t 11 H 2/HV 4 9.1 us against 12.5,
    -- n 1 t 16 11.5 against 11.5, n 1 t 32 21 against 12.4. Many blocks (issue-bound): n 64 t 4 H 16 106 us against
    -- 160, but n 8 t 16 H 16 31 against 26 and n 16 t 16 64 against 44. So: t <= 4 always, t <= REC_T while the value
    -- slices of 16 columns leave at most 2 blocks an SM. t is the plan's average tokens a sequence: a call whose tokens
    -- gather in one long sequence runs them in series (~0.35 us a token); a tuned winner overrides the rule.
    -- Session 19 (kda/recur.cuh, the same rule): n 3 t 11 8.0 us (was 8.9), n 3 t 17 9.5 (13.6), n 1 t 32 11.5 (19.3),
    -- n 8 t 16 H 16 vs 32 34.5 (vs 16 was 54.5), n 64 t 4 H 16 vs 32 156 (179): many blocks want vs 32 still.
    local vs16_blocks = shape.n * shape.hv * (shape.dv // 16)
    if shape.t <= REC_T_ANY or (small and shape.t <= REC_T and vs16_blocks <= 2 * dev.sms) then
      local vs = vs16_blocks <= 2 * dev.sms and 16 or 32
      return { chunk = 16, vs = vs, w = 4, tr = 1, fused = 1, mma = 1, seg = 1, prep = 0, impl = "recurrent" }
    end
    if small and not (dev.arch == "sm_90a" and shape.t >= 64) then
      return { chunk = 16, vs = 32, w = 8, tr = 1, fused = 0, mma = 1, seg = 1, prep = 1, impl = "mma" }
    end
    if dev.arch == "sm_90a" then   -- vs 64 <= dk, dv always (both 64 or 128)
      -- Session 17 (H200, kforge run sustained, 1980 MHz; bench/NOTES.md): with the combine on wgmma, segments pay
      -- wherever the state blocks leave SMs idle, and chunk 32 beats 16 on sequences of >= 4K tokens with segments
      -- (32K H8 seg 8: 0.733 ms against chunk 16's 0.802; T 8K H16 seg 4 0.390 against 0.420), not without them
      -- (T 8K H64 0.933 against 0.870) nor at 1K (seg 8: 62.2 against 63.4 us).
      local chunk = shape.t >= 2048 and 32 or 16
      local seg = wg_seg(shape, dev, chunk)
      if seg == 1 then chunk = 16 end
      return { chunk = chunk, vs = 64, w = 8, tr = 1, fused = 0, mma = 1, seg = seg, prep = 1, impl = "wgmma" }
    end
    local seg = (not small and shape.n * shape.hv < 32 and shape.t >= 4096) and 4 or 1
    return { chunk = 16, vs = 32, w = 4, tr = 1, fused = 0, mma = 1, seg = seg, prep = 1, impl = "mma" }
  end,
  render   = function(p, f)
    if p.impl == "recurrent" then
      return subst("#define KF_BF16 1\n#define KF_KDA_K ${dk}\n#define KF_KDA_V ${dv}\n#define KF_RC_VS ${vs}\n#define KF_RC_W ${w}\n"
                   .. "#define KF_RC_C ${c}\n#define KF_RC_TB ${tb}\n",
                   { dk = f.dk, dv = f.dv, vs = p.vs, w = p.w, c = rec_geom(p, f).c, tb = REC_TB })
        .. fragment("common/kda_params.h") .. "\n" .. fragment("common/types.cuh") .. "\n" .. fragment("kda/common.cuh")
        .. "\n" .. fragment("kda/recur.cuh")
    end
    local hdr = subst([[
#define KF_BF16 1
#define KF_KDA_K ${dk}
#define KF_KDA_V ${dv}
#define KF_PF_C ${c}
#define KF_PF_VS ${vs}
#define KF_PF_W ${w}
#define KF_PF_TR ${tr}
#define KF_PF_MMA ${mma}
#define KF_PF_FUSED ${fused}
#define KF_PF_SEG ${seg}
#define KF_PF_PREP ${prep}
]], { dk = f.dk, dv = f.dv, c = p.chunk, vs = p.vs, w = p.w, tr = p.tr, mma = p.mma, fused = p.fused, seg = p.seg or 1,
      prep = p.prep or 0 })
    local tc = (p.prep or 0) == 1 and "\n" .. fragment("kda/prep_tc.cuh") or ""
    if p.impl == "wgmma" then   -- only then: impl mma's sources stay byte for byte those of before the knob
      local prep, guard_end = prefill_prep()
      local wg = subst("#define KF_PF_WG_NST ${n}\n#define KF_PF_WG_SMEM ${b}\n#define KF_PF_WG_CNST ${cn}\n",
                       { n = wg_stages(f, p), b = smem_of(p, f).state, cn = wg_comb_stages(f, p) })
      return hdr .. wg .. fragment("common/kda_params.h") .. "\n"
        .. fragment("common/types.cuh") .. "\n" .. fragment("common/mma.cuh") .. "\n" .. fragment("common/wgmma.cuh") .. "\n"
        .. fragment("kda/common.cuh") .. "\n" .. prep .. fragment("kda/prefill_sm90.cuh") .. "\n" .. guard_end .. tc
    end
    local src = hdr .. fragment("common/kda_params.h") .. "\n" .. fragment("common/types.cuh") .. "\n"
      .. fragment("common/mma.cuh") .. "\n" .. fragment("kda/common.cuh") .. "\n" .. fragment("kda/prefill.cuh")
    return src .. tc
  end,
  -- every kernel starts with KF_PDL_ENTRY (common/types.cuh): launched behind the previous kernel of the stream (the
  -- driver keeps pdl on sm_90+ only)
  kernels  = function(p, f, dev)
    local ks = kernels_of(p, f)
    for _, k in ipairs(ks) do k.pdl = 1 end
    return ks
  end,
}
