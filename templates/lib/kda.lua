-- lib/kda.lua: the geometry of kda/decode.cuh's state slices and its rendering (kda_decode; kda_prefill's impl
-- recurrent has its own kernel since session 19, kda/recur.cuh).
-- A template reads it with import("lib/kda.lua") and lists it in its includes.
local K = {}

-- The state slice of a block: vsplit value-column slices of dv, 32 w threads, ws 1 warp slices; mirrors the
-- KF_DEC_* macros of kda/decode.cuh.
function K.dec_geom(p, f)
  local vc = f.dv // p.vsplit
  local t = 32 * p.w
  local g = { vc = vc, t = t, tprk = vc // 4, tprv = f.dk // 4 }
  g.rgk = t // g.tprk
  if (p.ws or 0) == 1 then               -- warp slices: VC/w columns per warp, its rows over the lanes
    g.vcw = vc // p.w
    g.tprk = g.vcw // 4
    g.rgk = g.tprk >= 1 and 32 // g.tprk or 0
  end
  g.rgv = t // g.tprv
  g.rk = f.dk // math.max(g.rgk, 1)
  g.rv = vc // math.max(g.rgv, 1)
  -- ws 1, ipc 1: ask for the occupancy the state allows at 4 R + 48 registers a thread (R 16, 128
  -- threads: 4 blocks; R 8: 6; R 4: 9); tighter bounds spilled under NVRTC 13 (4 R + 32: 36-172 B)
  g.minb = 1
  if (p.ws or 0) == 1 and (p.ipc or 1) == 1 then
    local r = math.max(g.rk, g.rv, 1)
    g.minb = math.max(1, math.min(16, 65536 // (t * (4 * r + 48))))
  end
  return g
end

-- Whether the slice geometry of p tiles a block (true) or why not (false, reason).
function K.dec_valid(p, f, dev)
  local g = K.dec_geom(p, f)
  if (p.ws or 0) == 1 then
    if g.vc % p.w ~= 0 or g.vcw % 4 ~= 0 or g.tprk < 1 or g.tprk > 32 or 32 % g.tprk ~= 0 then
      return false, "ws 1: a warp's " .. g.vc / p.w .. " value columns are not a power-of-two number of 4-column quads"
    end
  end
  if g.vc % 4 ~= 0 or g.tprk > g.t or g.t % g.tprk ~= 0 then return false, "value slice " .. g.vc .. " does not tile the block" end
  if f.dk % g.rgk ~= 0 or g.rk < 1 then return false, "K-first: " .. g.rgk .. " row groups do not divide dk" end
  if g.t % g.tprv ~= 0 or g.vc % g.rgv ~= 0 or g.rv < 1 then
    return false, "V-first: " .. g.rgv .. " row groups do not divide the slice of " .. g.vc
  end
  if math.max(g.rk, g.rv) > 16 then return false, "more than 16 state rows per thread (register pressure)" end
  if (p.ipc or 1) > 1 then
    if math.max(g.rk, g.rv) < 2 then return false, "ipc > 1 with one state row per thread (little to prefetch; NVRTC spills)" end
    if 16 * math.max(g.rk, g.rv) * g.t > dev.smem_optin then return false, "prefetch buffer > smem_optin" end
  end
  return true
end

-- kda/decode.cuh for p (vsplit, w, ipc, ws).
function K.dec_render(p, f)
  local src = subst("#define KF_BF16 1\n#define KF_KDA_K ${dk}\n#define KF_KDA_V ${dv}\n#define KF_DEC_THREADS ${t}\n#define KF_DEC_VSPLIT ${vs}\n#define KF_DEC_IPC ${ipc}\n#define KF_DEC_WS ${ws}\n#define KF_DEC_MINB ${minb}\n",
                    { dk = f.dk, dv = f.dv, t = 32 * p.w, vs = p.vsplit, ipc = p.ipc or 1, ws = p.ws or 0,
                      minb = K.dec_geom(p, f).minb })
  return src .. fragment("common/kda_params.h") .. "\n" .. fragment("common/types.cuh") .. "\n"
    .. fragment("common/mma.cuh") .. "\n" .. fragment("kda/common.cuh") .. "\n" .. fragment("kda/decode.cuh")
end

return K
