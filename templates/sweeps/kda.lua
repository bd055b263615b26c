-- sweeps/kda.lua: Kimi Delta Attention (K = V = 128): the issue's prefill and decode rows, plus a packed small batch
local shapes = {}
local function add(family, n, t, h, hv)
  shapes[#shapes + 1] = { family = family, n = n, t = t, h = h, hv = hv, dk = 128, dv = 128 }
end
add("kda_prefill", 1, 8192, 16, 16)   -- the issue's T 8192 H 16 row
add("kda_prefill", 1, 8192, 64, 64)   -- T 8192 H 64
add("kda_prefill", 8, 2048, 16, 16)   -- a batch of 8 x 2048
add("kda_prefill", 3, 17, 2, 4)       -- small packed batch (the [17, 0, 16] row, HV = 2H)
add("kda_decode", 128, 1, 32, 32)     -- decode N 128 H 32: the state read and written
add("kda_decode", 32, 1, 16, 32)      -- decode with HV = 2H
return {
  doc = "KDA K=V=128: prefill T8192 H16/H64, 8x2048 H16, a small packed batch H2/HV4; decode N128 H32 and N32 H16/HV32",
  shapes = shapes,
}
