-- ===== gpuclust submit policy engine (fixed part; the POLICY tables above are generated) =====
-- Runs under Lua 5.1 (Debian's job_submit_lua.so links liblua5.1), 5.2, 5.3, 5.4 (RHEL 9's Slurm) and LuaJIT. From
-- 5.3 on, the numbers slurmctld pushes into job_desc (lua_pushnumber) are floats, which tostring writes as 16.0:
-- every count the engine prints goes through %d or int_text. No file or process access, no module loading:
-- this runs inside slurmctld, under its locks, one job at a time. Cost is O(rules) per job.
-- gpuclust/policy/evaluate.py is the Python twin of this file; a differential test keeps them identical.

local P = POLICY

-- Sentinels slurmctld uses for unset numbers (the `slurm` table holds them too; literals keep the engine
-- independent of which names a given slurmctld defines).
local NO_VAL = 4294967294
local NO_VAL16 = 65534
local NO_VAL64 = 18446744073709551614
local INFINITE = 4294967295
local SAT = 1000000000 -- GPU counts saturate here, so arithmetic stays exact in doubles

-- Return codes. Only a few ESLURM_* names exist in 22.05's `slurm` table (ESLURM_INVALID_GRES does not,
-- and a nil return ACCEPTS the job), so numbers are used directly.
local RC_OK = 0
local RC_ERROR = -1 -- slurm.ERROR
local RC_INVALID_ACCOUNT = 2045 -- slurm.ESLURM_INVALID_ACCOUNT
local RC_INVALID_TIME_LIMIT = 2051 -- slurm.ESLURM_INVALID_TIME_LIMIT
local RC_INVALID_GRES = 2072 -- ESLURM_INVALID_GRES (no slurm.* name in 22.05)

local sfind, ssub, sgsub, sformat, sgmatch, smatch = string.find, string.sub, string.gsub, string.format, string.gmatch,
  string.match
local mfloor, mceil, tostring, type, pcall, setmetatable = math.floor, math.ceil, tostring, type, pcall, setmetatable

local NAME = "^[A-Za-z0-9_%.%-]+$"
local DIGITS = "^[0-9]+$"

local function nonempty(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

-- A usable count: an integer in [1, limit); nil, NO_VAL*, 0, NaN and fractions are "unset".
local function valid_count(v, limit)
  if type(v) == "number" and v >= 1 and v < limit and v % 1 == 0 then return v end -- % 1: no call (v is finite here)
  return nil
end

local function sat_mul(a, b)
  local p = a * b
  if p > SAT then return SAT end
  return p
end

local function sat_add(a, b)
  local s = a + b
  if s > SAT then return SAT end
  return s
end

-- A user-supplied value made safe for a one-line message: 40 bytes, printable ASCII.
local function shown(s)
  return (sgsub(ssub(s, 1, 40), "[^\32-\126]", "?"))
end

local function to_count(digits)
  local c = tonumber(digits)
  if c > SAT then return SAT end
  return c
end

-- Rules in warn mode: P.warn[rule] says when they will be enforced (for the user's message). A failing warn rule is
-- noted (its first message per job) and the evaluation goes on: reject returns nil for it. WARN_RULES and
-- WARN_MSGS[1..NWARN] are this job's warnings (scratch tables reused for every job, as GPU_TYPES).
local WARN_RULES, WARN_MSGS, NWARN = {}, {}, 0
local function reject(rc, rule, msg)
  if P.warn[rule] == nil then return rc, rule, "gpuclust policy [" .. rule .. "]: " .. msg end
  for i = 1, NWARN do
    if WARN_RULES[i] == rule then return nil end
  end
  NWARN = NWARN + 1
  WARN_RULES[NWARN], WARN_MSGS[NWARN] = rule, msg
  return nil
end

-- A number as the log line writes it: an integral value as an integer under every Lua (tostring gives 16.0 from
-- 5.3 on), anything else as tostring does (%.14g, inf).
local function int_text(v)
  if v == v and v % 1 == 0 and v > -1e15 and v < 1e15 then return sformat("%d", v) end
  return tostring(v)
end

-- The one GPU tokenizer: every form a supported slurmctld hands job_submit.lua, in tres_per_job/node/socket/task
-- and gres (probed; see tests/data/policy/README.md):
--   22.05        gres:gpu:h100:2  gres:gpu:2  gres:gpu  gres:gpu:h100
--   24.11/26.05  gres/gpu:h100:2  gres/gpu:2  gres/gpu=1  gres/gpu:h100=1  cpu=4 (tres_per_task carries cpus)
--   bare         gpu:h100:2  gpu:2  gpu=2  gpu  (modify requests, other clients)
-- Items are comma-separated. Items of other GRES (shard, mps) or other TRES kinds (cpu=4, license/x=1) are skipped
-- once their name is well formed. Returns the GPU count, its untyped part, the offending item (nil if fine) and
-- ntypes: each distinct GPU type named (h100 in gpu:h100:2; also "-1" in gpu:-1 and "abc" in --gpus=abc, which
-- sbatch and slurmctld take as ONE GPU of that type) is appended once to `types`, whose first ntypes entries are
-- this job's. `types` is one scratch table reused for every job (slurmctld calls job_submit one job at a time),
-- so no tables are built per item or per job: this runs for every job.
local function add_type(types, ntypes, t)
  for i = 1, ntypes do
    if types[i] == t then return ntypes end
  end
  types[ntypes + 1] = t
  return ntypes + 1
end

-- One comma-free item: its GPU count (0 for items of other GRES or TRES kinds), whether it names a type, and
-- whether it is malformed.
-- The forms slurmctld sends for nearly every GPU job, matched in one call each: gres:gpu:h100:2 (22.05),
-- gres/gpu:h100:2 and gres/gpu:h100=1 (24.11+) and their untyped forms. Anything else (or a type that is all
-- digits) takes the general path below, which gives the same answer for these forms.
local FAST_TYPED = "^gres[:/]gpu:([A-Za-z0-9_%.%-]+)[:=]([0-9]+)$"
local FAST_UNTYPED = "^gres[:/]gpu[:=]([0-9]+)$"

local function scan_item(item, types, ntypes)
  local gtype, n = smatch(item, FAST_TYPED)
  if gtype and not sfind(gtype, DIGITS) then return to_count(n), true, false, add_type(types, ntypes, gtype) end
  n = smatch(item, FAST_UNTYPED)
  if n then return to_count(n), false, false, ntypes end
  local rest = item
  if ssub(rest, 1, 5) == "gres:" and #rest > 5 then
    rest = ssub(rest, 6)
  else
    local slash = sfind(rest, "/", 1, true)
    if slash then
      local kind = ssub(rest, 1, slash - 1)
      if kind == "gres" and slash < #rest then
        rest = ssub(rest, slash + 1)
      elseif kind ~= "gres" and sfind(kind, NAME) then
        return 0, false, false, ntypes -- another TRES kind (license/..., bb/...): never a GPU
      else
        return 0, false, true, ntypes
      end
    end
  end
  local eq = sfind(rest, "=", 1, true)
  local head, cnt = rest, nil
  if eq then head, cnt = ssub(rest, 1, eq - 1), ssub(rest, eq + 1) end
  local c1 = sfind(head, ":", 1, true)
  local name = head
  if c1 then name = ssub(head, 1, c1 - 1) end
  if not sfind(name, NAME) then return 0, false, true, ntypes end
  if name ~= "gpu" then return 0, false, false, ntypes end
  if eq then -- gpu=N | gpu:TYPE=N
    if not sfind(cnt, DIGITS) then return 0, false, true, ntypes end
    if c1 then
      local gtype = ssub(head, c1 + 1)
      if not sfind(gtype, NAME) or sfind(gtype, DIGITS) then return 0, false, true, ntypes end
      return to_count(cnt), true, false, add_type(types, ntypes, gtype)
    end
    return to_count(cnt), false, false, ntypes
  elseif not c1 then
    return 1, false, false, ntypes
  end
  local c2 = sfind(head, ":", c1 + 1, true)
  if not c2 then
    local second = ssub(head, c1 + 1)
    if sfind(second, DIGITS) then return to_count(second), false, false, ntypes end
    if sfind(second, NAME) then return 1, true, false, add_type(types, ntypes, second) end
    return 0, false, true, ntypes
  end
  local second, third = ssub(head, c1 + 1, c2 - 1), ssub(head, c2 + 1)
  if sfind(second, NAME) and not sfind(second, DIGITS) and sfind(third, DIGITS) then
    -- a third colon leaves ':' in `third`, which fails DIGITS
    return to_count(third), true, false, add_type(types, ntypes, second)
  end
  return 0, false, true, ntypes
end

local function scan_gpus(v, types, ntypes)
  if type(v) ~= "string" then return 0, 0, "(not a string)", ntypes end
  if not sfind(v, ",", 1, true) then -- one item (the usual case): no iterator
    if v == "" then return 0, 0, nil, ntypes end
    local count, typed, bad
    count, typed, bad, ntypes = scan_item(v, types, ntypes)
    if bad then return 0, 0, v, ntypes end
    if typed then return count, 0, nil, ntypes end
    return count, count, nil, ntypes
  end
  local total, untyped = 0, 0
  for item in sgmatch(v, "[^,]+") do
    local count, typed, bad
    count, typed, bad, ntypes = scan_item(item, types, ntypes)
    if bad then return total, untyped, item, ntypes end
    if count > 0 then
      total = sat_add(total, count)
      if not typed then untyped = sat_add(untyped, count) end
    end
  end
  return total, untyped, nil, ntypes
end

-- Memo of scan_gpus per distinct well-formed value: a site sends few distinct GPU strings (gres:gpu:h100:8 ...),
-- so a repeat costs one hash look-up (strings are interned in Lua) instead of the parse. An entry is
-- {total, untyped, ntypes, type1, ...}. The memo is dropped whole when it reaches CACHE_MAX entries, so its
-- size stays bounded inside slurmctld whatever users send. Only values up to CACHE_LEN bytes are kept.
local CACHE_MAX, CACHE_LEN = 1024, 512
local GPU_CACHE_LEN = CACHE_LEN
local GPU_MEMO, GPU_MEMO_N = {}, 0
local SCAN_TYPES = {} -- scratch for a miss
local function scan_memo(v, types, ntypes)
  if v == nil then return 0, 0, nil, ntypes end
  local e = GPU_MEMO[v]
  if e == nil then
    if type(v) ~= "string" or #v > GPU_CACHE_LEN then return scan_gpus(v, types, ntypes) end -- not kept: parse into `types`
    local n = 0
    local total, untyped, bad
    total, untyped, bad, n = scan_gpus(v, SCAN_TYPES, 0)
    if bad then return total, untyped, bad, ntypes end -- rejected (gres_syntax): the types no longer matter
    e = { total, untyped, n }
    for i = 1, n do e[3 + i] = SCAN_TYPES[i] end
    if GPU_MEMO_N >= CACHE_MAX then GPU_MEMO, GPU_MEMO_N = {}, 0 end
    GPU_MEMO[v] = e
    GPU_MEMO_N = GPU_MEMO_N + 1
  end
  local n = e[3]
  if n > 0 then
    if ntypes == 0 then -- the first field with types: copy (an entry's types are distinct)
      for i = 1, n do types[i] = e[3 + i] end
      return e[1], e[2], nil, n
    end
    for i = 1, n do ntypes = add_type(types, ntypes, e[3 + i]) end
  end
  return e[1], e[2], nil, ntypes
end

local W_NODES = "max_nodes is unlimited (an open -N range); give -N <min>-<max>"
local W_SOCKETS = "--gpus-per-socket needs --sockets-per-node"

-- The MOST GPUs Slurm may allocate the job: a limit must hold for every allocation Slurm can pick. Measured on the
-- lab (tests/data/policy/README.md): `-N 2-4 --gres=gpu:1` got 4 nodes; `-n 16 -c 2 --gres=gpu:1` (no -N) spread
-- over 4 nodes; `-N 1-3 --ntasks-per-node=2` got 4 tasks although sbatch sent num_tasks 2; `--ntasks-per-gpu=2 -n 4`
-- got 2 GPUs with no GPU field set; `--exclusive` got every GPU of its nodes.
--   nodes: max_nodes when set (never below min_nodes); else the larger of min_nodes (or 1) and num_tasks, since
--          Slurm never gives a job more nodes than tasks; max_nodes = INFINITE is unbounded.
--   tasks: num_tasks, raised to ntasks_per_node (or ntasks_per_socket x sockets_per_node) x nodes; without
--          num_tasks, min_cpus (>= tasks; the job record in slurm_job_modify has no num_tasks), else one per node.
-- Returns total, untyped, bad item, its field, nodes, why unbounded (nil if bounded), exclusive, and the number of
-- GPU types named (the names are GPU_TYPES[1..ntypes]).
-- tres_per_node and gres are the same request (gres is its alias), so gres is read only when tres_per_node is unset.
-- Fields are read only when needed: each read of job_desc is a call into slurmctld.
local GPU_TYPES = {} -- scan_gpus' scratch table (see there)
local function gpu_request(job)
  local per_node, node_field = job.tres_per_node, "tres_per_node"
  if per_node == nil or per_node == "" then node_field, per_node = "gres", job.gres end
  local types = GPU_TYPES
  local total, untyped, bad, ntypes = 0, 0, nil, 0
  local nt, nu, st, su, tt, tu = 0, 0, 0, 0, 0, 0
  local v = job.tres_per_job -- unset fields (the usual case for three of the four) cost no call
  if v ~= nil then
    total, untyped, bad, ntypes = scan_memo(v, types, 0)
    if bad then return total, untyped, bad, "tres_per_job" end
  end
  if per_node ~= nil then
    nt, nu, bad, ntypes = scan_memo(per_node, types, ntypes)
    if bad then return total, untyped, bad, node_field end
  end
  v = job.tres_per_socket
  if v ~= nil then
    st, su, bad, ntypes = scan_memo(v, types, ntypes)
    if bad then return total, untyped, bad, "tres_per_socket" end
  end
  v = job.tres_per_task
  if v ~= nil then
    tt, tu, bad, ntypes = scan_memo(v, types, ntypes)
    if bad then return total, untyped, bad, "tres_per_task" end
  end
  local per_gpu = nil -- --ntasks-per-gpu without any GPU field: Slurm allocates ceil(tasks / N) GPUs
  if total == 0 and nt == 0 and st == 0 and tt == 0 then per_gpu = valid_count(job.ntasks_per_tres, NO_VAL16) end
  local exclusive = job.shared == 0
  if nt == 0 and st == 0 and tt == 0 and not per_gpu and not exclusive then
    return total, untyped, nil, nil, 1, nil, false, ntypes
  end
  local why = nil
  -- valid_count and the saturating arithmetic written out here: this runs for every job with per-node GPUs
  local tasks = job.num_tasks
  if not (type(tasks) == "number" and tasks >= 1 and tasks < NO_VAL and tasks % 1 == 0) then tasks = nil end
  local lo = job.min_nodes
  if not (type(lo) == "number" and lo >= 1 and lo < NO_VAL and lo % 1 == 0) then lo = 1 end
  local mx = job.max_nodes
  local nodes
  if mx == INFINITE then
    nodes, why = SAT, W_NODES
  elseif type(mx) == "number" and mx >= 1 and mx < NO_VAL and mx % 1 == 0 then
    nodes = mx
    if nodes < lo then nodes = lo end
  else
    nodes = lo
    if tasks and tasks > nodes then nodes = tasks end
  end
  if nt > 0 then
    local p, q = nt * nodes, nu * nodes
    if p > SAT then p = SAT end
    if q > SAT then q = SAT end
    total, untyped = total + p, untyped + q
    if total > SAT then total = SAT end
    if untyped > SAT then untyped = SAT end
  end
  if st > 0 then
    local sockets = valid_count(job.sockets_per_node, NO_VAL16)
    if not sockets then sockets, why = SAT, why or W_SOCKETS end
    local m = sat_mul(sockets, nodes)
    total, untyped = sat_add(total, sat_mul(st, m)), sat_add(untyped, sat_mul(su, m))
  end
  if tt > 0 or per_gpu then
    local t = tasks or valid_count(job.min_cpus, NO_VAL)
    local tpn = valid_count(job.ntasks_per_node, NO_VAL16)
    if not tpn then
      local tps = valid_count(job.ntasks_per_socket, NO_VAL16)
      if tps then
        local spn = valid_count(job.sockets_per_node, NO_VAL16)
        if spn then tpn = sat_mul(tps, spn) end
      end
    end
    if tpn then
      local u = sat_mul(tpn, nodes)
      if not t or u > t then t = u end
    end
    if not t then t = nodes end
    total, untyped = sat_add(total, sat_mul(tt, t)), sat_add(untyped, sat_mul(tu, t))
    if per_gpu then
      local g = mceil(t / per_gpu)
      total, untyped = sat_add(total, g), sat_add(untyped, g)
    end
  end
  return total, untyped, nil, nil, nodes, why, exclusive, ntypes
end

-- ===== GPU amounts: GPU-equivalents ([policy] count_gpus = equivalents) and the per-GPU ratios =====
-- Amounts are integers in units of 1/P.unit GPU, held as floats (P.unit is rendered 700.0 ...), so they are exact in
-- doubles and never wrap as Lua 5.3 integers do. A typed GPU counts its share: the site's gpu_share
-- (P.share_units), else a MIG profile name read as gpuclust's slurm/gpushare.py reads it (N of the card's 7 compute
-- slices, 4 on A30; P.card_slices, P.a30_profiles, P.valid_slices are its facts), else a whole GPU. In devices
-- mode P.unit is 1 and every GPU counts 1. Shards and MPS are counted apart: their share is a partition's.
local slower = string.lower
local function type_units(t)
  if not P.count_eq then return P.unit end
  local u = P.share_units[t]
  if u then return u end
  local pre, s, m, x = smatch(slower(t), "^(.-)(%d+)g%.(%d+)gb([%+%-]?%a*)$")
  if not s or (pre ~= "" and not sfind(pre, "[_%-]$")) or (x ~= "" and not sfind(x, "^[%+%-]%a+$")) then
    return P.unit -- not a MIG profile name: a whole GPU
  end
  s = sgsub(s, "^0+(%d)", "%1")
  m = sgsub(m, "^0+(%d)", "%1")
  local card = P.card_slices
  if P.a30_profiles[s .. "g." .. m .. "gb"] or sfind(ssub(pre, 1, -2), "a30", 1, true) then card = P.a30_slices end
  if #s > 2 or tonumber(s) > card then return nil, "mig_slice_exceeds_card", s, card end
  if not P.valid_slices[card][tonumber(s)] then return nil, "unknown_mig_profile", s, card end
  return tonumber(s) * (P.unit / card)
end

-- Count of a shard / MPS item: `=N`, or the last `:N`, else 1.
local function unit_count(head, eq, cnt)
  if eq then
    if sfind(cnt, DIGITS) then return to_count(cnt) end
    return 1
  end
  local last = smatch(head, ":([^:]*)$")
  if last and sfind(last, DIGITS) then return to_count(last) end
  return 1
end

-- One field's GPU units, shards and MPS (a field gres_syntax passed), then the first type of unknown share (type,
-- code, slices, card). Memoised per value as GPU_MEMO.
local UNITS_MEMO, UNITS_MEMO_N = {}, 0
local SCAN1 = {}
local function scan_units(v)
  if type(v) ~= "string" then return 0, 0, 0 end
  local e = UNITS_MEMO[v]
  if e then return e[1], e[2], e[3], e[4], e[5], e[6], e[7] end
  local satu = SAT * P.unit
  local units, shards, mps = 0, 0, 0
  local bt, bc, bs, bk
  for item in sgmatch(v, "[^,]+") do
    local rest, skip = item, false
    if ssub(item, 1, 5) == "gres:" and #item > 5 then
      rest = ssub(item, 6)
    else
      local slash = sfind(item, "/", 1, true)
      if slash then
        if ssub(item, 1, slash - 1) ~= "gres" then skip = true else rest = ssub(item, slash + 1) end
      end
    end
    if not skip then
      local eqp = sfind(rest, "=", 1, true)
      local head, cnt = rest, nil
      if eqp then head, cnt = ssub(rest, 1, eqp - 1), ssub(rest, eqp + 1) end
      local c1 = sfind(head, ":", 1, true)
      local name = head
      if c1 then name = ssub(head, 1, c1 - 1) end
      if name == "gpu" then
        local count, typed = scan_item(item, SCAN1, 0)
        local u = P.unit
        if typed then
          local code, sl, card
          u, code, sl, card = type_units(SCAN1[1])
          if not u then
            bt, bc, bs, bk = SCAN1[1], code, sl, card
            break
          end
        end
        local p = count * u
        if p > satu then p = satu end
        units = units + p
        if units > satu then units = satu end
      elseif name == "shard" and P.count_eq then
        shards = sat_add(shards, unit_count(head, eqp, cnt))
      elseif name == "mps" and P.count_eq then
        mps = sat_add(mps, unit_count(head, eqp, cnt))
      end
    end
  end
  if #v <= CACHE_LEN then
    if UNITS_MEMO_N >= CACHE_MAX then UNITS_MEMO, UNITS_MEMO_N = {}, 0 end
    UNITS_MEMO[v] = { units, shards, mps, bt, bc, bs, bk }
    UNITS_MEMO_N = UNITS_MEMO_N + 1
  end
  return units, shards, mps, bt, bc, bs, bk
end

-- The job's amounts (evaluate.py's Amounts): at the most (gpu_request's node and task counts) in A_UNITS, A_SHARDS,
-- A_MPS; on the fewest nodes (min_nodes, or 1; num_tasks raised to ntasks_per_node there, or a task per node) in
-- L_UNITS, L_SHARDS, L_MPS, L_NODES, L_TASKS. Returns the first type of unknown share (type, code, slices, card).
local A_UNITS, A_SHARDS, A_MPS, L_UNITS, L_SHARDS, L_MPS, L_NODES, L_TASKS = 0, 0, 0, 0, 0, 0, 1, 1
local function amounts(job, nodes)
  local unit = P.unit
  local satu = SAT * unit
  local function smul(a, b)
    local p = a * b
    if p > satu then return satu end
    return p
  end
  local function sadd(a, b)
    local x = a + b
    if x > satu then return satu end
    return x
  end
  local per_node = job.tres_per_node
  if per_node == nil or per_node == "" then per_node = job.gres end
  local ju, js, jm, bt, bc, bs, bk = scan_units(job.tres_per_job)
  if bt then return bt, bc, bs, bk end
  local nu, ns, nm
  nu, ns, nm, bt, bc, bs, bk = scan_units(per_node)
  if bt then return bt, bc, bs, bk end
  local su, ss, sm
  su, ss, sm, bt, bc, bs, bk = scan_units(job.tres_per_socket)
  if bt then return bt, bc, bs, bk end
  local tu, ts, tm
  tu, ts, tm, bt, bc, bs, bk = scan_units(job.tres_per_task)
  if bt then return bt, bc, bs, bk end
  local per_gpu = nil
  if ju == 0 and nu == 0 and su == 0 and tu == 0 then per_gpu = valid_count(job.ntasks_per_tres, NO_VAL16) end
  local tasks = valid_count(job.num_tasks, NO_VAL)
  local spn = valid_count(job.sockets_per_node, NO_VAL16)
  local tpn = valid_count(job.ntasks_per_node, NO_VAL16)
  if not tpn then
    local tps = valid_count(job.ntasks_per_socket, NO_VAL16)
    if tps and spn then tpn = sat_mul(tps, spn) end
  end
  local t = tasks or valid_count(job.min_cpus, NO_VAL)
  if tpn then
    local x = sat_mul(tpn, nodes)
    if not t or x > t then t = x end
  end
  if not t then t = nodes end
  local m = sat_mul(spn or SAT, nodes)
  A_UNITS = sadd(sadd(sadd(ju, smul(nu, nodes)), smul(su, m)), smul(tu, t))
  A_SHARDS = sat_add(sat_add(sat_add(js, sat_mul(ns, nodes)), sat_mul(ss, m)), sat_mul(ts, t))
  A_MPS = sat_add(sat_add(sat_add(jm, sat_mul(nm, nodes)), sat_mul(sm, m)), sat_mul(tm, t))
  if per_gpu then A_UNITS = sadd(A_UNITS, smul(mceil(t / per_gpu), unit)) end
  local lo = valid_count(job.min_nodes, NO_VAL) or 1
  local lt = tasks
  if tpn then
    local x = sat_mul(tpn, lo)
    if not lt or x > lt then lt = x end
  end
  if not lt then lt = lo end
  local lm = sat_mul(spn or 1, lo)
  L_NODES, L_TASKS = lo, lt
  L_UNITS = sadd(sadd(sadd(ju, smul(nu, lo)), smul(su, lm)), smul(tu, lt))
  L_SHARDS = sat_add(sat_add(sat_add(js, sat_mul(ns, lo)), sat_mul(ss, lm)), sat_mul(ts, lt))
  L_MPS = sat_add(sat_add(sat_add(jm, sat_mul(nm, lo)), sat_mul(sm, lm)), sat_mul(tm, lt))
  if per_gpu then L_UNITS = sadd(L_UNITS, smul(mceil(lt / per_gpu), unit)) end
  return nil
end

-- The job's GPU units in partition `name`, its shards and MPS counted at that partition's share; nil: shards of
-- unknown share there (count_gpus = equivalents and no shards_per_gpu).
local function partition_units(name, lo)
  local pr = name and P.partitions[name]
  local units, shards, mps = A_UNITS, A_SHARDS, A_MPS
  if lo then units, shards, mps = L_UNITS, L_SHARDS, L_MPS end
  local su
  if pr then su = pr.shard_units elseif not P.count_eq then su = 0 end
  if shards > 0 and not su then return nil end
  local satu = SAT * P.unit
  local x = units
  local p = shards * (su or 0)
  if p > satu then p = satu end
  x = x + p
  if x > satu then x = satu end
  p = mps * P.mps_units
  if p > satu then p = satu end
  x = x + p
  if x > satu then x = satu end
  return x
end

-- A GPU amount in a message: whole as an integer, anything else with two decimals (evaluate.py's fmt_amount).
local function fmt_amount(x)
  if x == x and x % 1 == 0 and x < 1e15 then return sformat("%d", x) end
  return sformat("%.2f", x)
end

-- N of a cpus_per_tres / mem_per_tres value: `gres:gpu:N` (22.05), `gres/gpu:N`, `gpu=N`; nil otherwise.
local function per_gpu_value(v)
  if type(v) ~= "string" then return nil end
  local n = smatch(v, "^gres[:/]gpu[:=]([0-9]+)$") or smatch(v, "^gpu[:=]([0-9]+)$")
  if n then return to_count(n) end
  return nil
end

-- GPUs an exclusive job gets on partition `name`: every GPU of its nodes (needs gpus_per_node in the config).
local function whole_nodes(name, nodes)
  local pr = P.partitions[name]
  if pr and pr.gpus_per_node then return sat_mul(nodes, pr.gpus_per_node), nil end
  return 0, sformat("--exclusive gets every GPU of its nodes, and partition %s has no gpus_per_node in the site config",
    shown(name))
end

local function unbounded(why, what, name, max)
  return reject(RC_ERROR, "gpu_unbounded", sformat(
    "cannot bound the GPUs this job may be allocated: %s; %s %s allows at most %d per job", why, what, name, max))
end

local function too_many(rule, total, what, name, max)
  return reject(RC_ERROR, rule, sformat("job asks for %d GPUs at most (per-node and per-task requests count at the "
    .. "largest node and task counts Slurm may give it); %s %s allows at most %d per job; fix the counts with "
    .. "-N <nodes> and -n <tasks>, or ask with --gpus=<total>", total, what, name, max))
end

-- partition_max_gpus / account_max_gpus in GPU-equivalents (count_gpus = equivalents): the largest amount over the
-- job's partitions (each counts its shards at its own share), or every GPU of the nodes for --exclusive.
local function eq_limit(rule, what, name, max, parts, nparts, why, exclusive, nodes)
  local w, unit, x = why, P.unit, 0
  if exclusive then
    if nparts == 0 then w = w or "--exclusive gets every GPU of its nodes, and the job names no partition" end
    for i = 1, nparts do
      local _, xw = whole_nodes(parts[i], nodes)
      w = w or xw
    end
  end
  if nparts == 0 then
    x = partition_units(nil, false)
    if not x then
      w = w or "shards count 1/shards_per_gpu of a GPU, and the job names no partition"
      x = 0
    end
  end
  for i = 1, nparts do
    local y = partition_units(parts[i], false)
    if not y then
      w = w or sformat("shards count 1/shards_per_gpu of a GPU, and partition %s has no shards_per_gpu in the site "
        .. "config", shown(parts[i]))
    else
      if exclusive then
        local whole = whole_nodes(parts[i], nodes)
        if whole * unit > y then y = whole * unit end
      end
      if y > x then x = y end
    end
  end
  if w then return unbounded(w, what, name, max) end
  if x > max * unit then
    return reject(RC_ERROR, rule, sformat("job asks for %s GPU-equivalents at most (a MIG slice, shard or MPS share "
      .. "counts as its share of one GPU; per-node and per-task requests count at the largest node and task counts "
      .. "Slurm may give it); %s %s allows at most %d per job; fix the counts with -N <nodes> and -n <tasks>, or ask "
      .. "with --gpus=<total>", fmt_amount(x / unit), what, name, max))
  end
  return nil
end

-- partition_cpus_per_gpu and partition_mem_per_gpu: --cpus-per-gpu and --mem-per-gpu as given; otherwise the CPUs
-- (-c x tasks) or the memory (--mem x nodes, --mem-per-cpu x CPUs) on the fewest nodes the job may get, per GPU it
-- gets there (in GPU-equivalents with count_gpus = equivalents). A job without GPUs there is not judged.
local function ratios(job, pr)
  local g = partition_units(pr.name, true)
  if not g or g <= 0 then return nil end
  local unit = P.unit
  local cpus = sat_mul(valid_count(job.cpus_per_task, NO_VAL16) or 1, L_TASKS)
  local limit = pr.max_cpus_per_gpu
  if limit then
    local k = per_gpu_value(job.cpus_per_tres)
    local ratio = nil
    if k then
      if k > limit then ratio = k end
    elseif cpus * unit > limit * g then
      ratio = cpus * unit / g
    end
    if ratio then
      local rc, r, m = reject(RC_ERROR, "partition_cpus_per_gpu", sformat("job asks for %s CPUs per GPU (on the fewest "
        .. "nodes Slurm may give it); partition %s allows at most %d per GPU; ask for fewer CPUs (--cpus-per-gpu, or -c "
        .. "and -n) or more GPUs", fmt_amount(ratio), pr.name, limit))
      if rc then return rc, r, m end
    end
  end
  limit = pr.max_mem_per_gpu
  if limit then
    local mpt = per_gpu_value(job.mem_per_tres)
    local ratio = nil
    if mpt then
      if mpt > limit then ratio = mpt end
    else
      local node, cpu = job.min_mem_per_node, job.min_mem_per_cpu
      if type(node) ~= "number" then node = nil end
      if type(cpu) ~= "number" then cpu = nil end
      if node == 0 then
        return reject(RC_ERROR, "partition_mem_per_gpu", sformat("job asks for all the memory of its nodes (--mem=0); "
          .. "partition %s allows at most %d MB per GPU; ask with --mem-per-gpu=<size> or --mem=<size>", pr.name, limit))
      end
      local total = nil
      if node and node > 0 and node < NO_VAL64 then
        total = node * L_NODES
      elseif cpu and cpu >= 0 and cpu < NO_VAL64 then
        total = cpu * cpus
      end
      if total and total * unit > limit * g then ratio = total * unit / g end
    end
    if ratio then
      return reject(RC_ERROR, "partition_mem_per_gpu", sformat("job asks for %s MB of memory per GPU (on the fewest "
        .. "nodes Slurm may give it); partition %s allows at most %d MB per GPU; ask for less with --mem-per-gpu, --mem "
        .. "or --mem-per-cpu", fmt_amount(ratio), pr.name, limit))
    end
  end
  return nil
end

local ONE_PART = {} -- a one-partition list for eq_limit (reused for every job)

-- Label values in --comment: tokens are separated by commas, semicolons or blanks, a token is key=value (split
-- at its first '='), and the first token with the key and a non-empty value wins. Searched per key with plain
-- finds, without splitting the comment into a table (this runs for every job).
local LABEL_VALUE = "^[^,; \t\n\r\v\f]*"
local SEP_BYTE = { [44] = true, [59] = true, [32] = true, [9] = true, [10] = true, [13] = true, [11] = true, [12] = true }
local sbyte = string.byte

-- The job's partitions in PARTS[1..n] (one scratch table reused for every job, as GPU_TYPES).
local PARTS = {}
local SEEN_JOB, SEEN_USER, SEEN_ACCOUNT, SEEN_GPUS, SEEN_PART_READ, SEEN_PART -- see log_reject
local function partitions_of(job)
  local n = 0
  local p = job.partition
  SEEN_PART_READ, SEEN_PART = true, p
  if type(p) == "string" then
    if not sfind(p, ",", 1, true) then -- one partition (the usual case): no iterator
      if p ~= "" then
        PARTS[1] = p
        return PARTS, 1
      end
    else
      for name in sgmatch(p, "[^,]+") do
        n = n + 1
        PARTS[n] = name
      end
    end
  end
  if n == 0 and P.default_partition then
    n = 1
    PARTS[1] = P.default_partition
  end
  return PARTS, n
end

-- The label rules' verdict on one comment: nil when every label the policy names is there with an allowed value, else
-- the rejection. It depends on nothing but the comment, so comments that passed are remembered (LABELS_OK, bounded
-- as GPU_MEMO): jobs of one project send the same comment again and again.
local LABELS_OK, LABELS_OK_N = {}, 0

-- Per label: a plain find for `key=` (memchr and memcmp in C: far cheaper than a Lua pattern walking the comment
-- byte by byte), the byte before it (a token starts there), then the value. A label with exact values: one
-- string.match makes the value string (an allowed value is already interned: nothing is allocated) for a hash
-- look-up. A label with globs only: the globs are tried in place at the value first, since a glob that matches
-- proves the value non-empty (no string.byte, no value string). Globs that end in `*` stop where that `*` starts
-- (gpuclust.policy.compile.glob_in_place), so `proj-*` is a literal compare; `*LITERAL` globs find the value's end
-- once, then compare each literal there with one plain find. Written out in one function: in Lua 5.1 a Lua call
-- costs about what a C call does (~0.1 µs), so the count of calls per label is the cost. (One pass tokenizing the
-- comment, a string.find with captures per token, measured 3x slower: the matcher walks a set class at ~200
-- instructions per byte and each captured value is a new string, while a plain find skips ahead with memchr.)
local function check_labels(comment, labels, from)
  local nul = nil -- does the comment hold a NUL byte? (looked up once, when a glob is first needed)
  for i = from, #labels do
    local rule = labels[i]
    local key_eq, has_exact = rule.key_eq, rule.has_exact
    local value, b, ok, last, tried = nil, nil, false, nil, false -- last: where the value ends, once looked for
    local s, e = sfind(comment, key_eq, 1, true)
    while s do -- the first token with this key and a non-empty value
      if s == 1 or SEP_BYTE[sbyte(comment, s - 1)] then
        if has_exact then
          value = smatch(comment, LABEL_VALUE, e + 1) -- '^' anchors at e + 1 in Lua 5.1: one call, no ssub
          if value ~= "" then break end
        else
          if rule.globs_first then -- globs only, none filed by first byte: all tried here, before anything else
            if nul == nil then nul = sfind(comment, "\0", 1, true) ~= nil end
            if not nul then
              local pats = rule.lead
              for j = 1, #pats do
                if sfind(comment, pats[j], e + 1) then
                  ok = true
                  break
                end
              end
              pats = rule.suffix
              if not ok and pats[1] then
                local _
                _, last = sfind(comment, LABEL_VALUE, e + 1)
                for j = 1, #pats do
                  local x = pats[j]
                  local at = last - #x + 1 -- the literal ends where the value does (plain find: one memcmp)
                  if at > e and sfind(comment, x, at, true) == at then
                    ok = true
                    break
                  end
                end
              end
              if not ok then
                pats = rule.wild
                for j = 1, #pats do
                  if sfind(comment, pats[j], e + 1) then
                    ok = true
                    break
                  end
                end
              end
              if ok then break end -- a glob that matches proves the value non-empty
              tried = true -- no glob matches this token's value (if it is empty, the next token is tried)
            end
          end
          b = sbyte(comment, e + 1)
          if b and not SEP_BYTE[b] then break end
        end
      end
      s, e = sfind(comment, key_eq, s + 1, true)
    end
    if s == nil then
      return RC_ERROR, "label_missing", sformat(
        "--comment must contain %s=<value> (allowed: %s)", rule.key, rule.allowed), i
    end
    if not ok and rule.any == false and not (has_exact and rule.exact[value]) then
      if nul == nil then nul = sfind(comment, "\0", 1, true) ~= nil end
      if nul then -- `*` matches no NUL byte: the full patterns decide (%Z), as glob_to_regex's [^\x00]
        value = value or smatch(comment, LABEL_VALUE, e + 1)
        local pats = rule.patterns
        for j = 1, #pats do
          if sfind(value, pats[j]) then
            ok = true
            break
          end
        end
      elseif rule.any_glob then
        ok = true
      else -- gpuclust.policy.compile.GlobChecks: literal-first globs in place, `*LITERAL` at the value's end, the rest
        if not tried then
          local pats = rule.lead
          if rule.first_byte then pats = rule.by_first[b or sbyte(comment, e + 1)] or pats end
          for j = 1, #pats do
            if sfind(comment, pats[j], e + 1) then
              ok = true
              break
            end
          end
          pats = rule.suffix
          if not ok and pats[1] then
            if last == nil then
              if value then
                last = e + #value
              else
                local _
                _, last = sfind(comment, LABEL_VALUE, e + 1)
              end
            end
            for j = 1, #pats do
              local x = pats[j]
              local at = last - #x + 1
              if at > e and sfind(comment, x, at, true) == at then
                ok = true
                break
              end
            end
          end
        end
        if not ok and not tried then -- the same loop as the first, inlined: a Lua call costs ~0.1 µs in Lua 5.1
          local pats = rule.wild
          for j = 1, #pats do
            if sfind(comment, pats[j], e + 1) then
              ok = true
              break
            end
          end
        end
      end
      if not ok then
        value = value or smatch(comment, LABEL_VALUE, e + 1)
        return RC_ERROR, "label_value", sformat(
          "%s=%s is not allowed; use %s=<one of: %s> in --comment", rule.key, shown(value), rule.key, rule.allowed), i
      end
    end
  end
  if from == 1 and #comment <= CACHE_LEN then -- (from > 1: an earlier label failed in warn mode)
    if LABELS_OK_N >= CACHE_MAX then LABELS_OK, LABELS_OK_N = {}, 0 end
    LABELS_OK[comment] = true
    LABELS_OK_N = LABELS_OK_N + 1
  end
  return nil
end

-- Rules in a fixed order; the first that fails in enforce mode decides. Returns rc, rule, message (nil on accept);
-- the warn-mode rules that failed on the way are in WARN_RULES[1..NWARN]. `local rc, r, m = reject(...)` then
-- `if rc`: a rule in warn mode returns nil there and the evaluation goes on.
local function evaluate(job)
  NWARN = 0
  local user = job.user_name
  local account = job.account
  if type(account) ~= "string" or account == "" then account = nil end
  local eff_account = account or nonempty(job.default_account)
  SEEN_JOB, SEEN_USER, SEEN_ACCOUNT, SEEN_GPUS, SEEN_PART_READ = job, user, eff_account, false, false
  if (type(user) == "string" and P.exempt_users[user]) or (eff_account and P.exempt_accounts[eff_account]) then
    return RC_OK, "exempt", nil
  end
  if P.need_account and not account then
    local rc, r, m = reject(RC_INVALID_ACCOUNT, "account_missing", "no account given; add --account=<account> (sbatch -A)")
    if rc then return rc, r, m end
  end
  local gpu_total, gpu_untyped, bad, field, nodes, why, exclusive, ntypes = gpu_request(job)
  SEEN_GPUS = gpu_total
  if bad then -- never in warn mode (gpuclust.policy.compile.ALWAYS_ENFORCED): a request not read is not counted
    return reject(RC_INVALID_GRES, "gres_syntax", sformat(
      "cannot parse GPU request '%s' in %s; use --gres=gpu:<type>:<count> or --gpus=<type>:<count>", shown(bad), field))
  end
  if P.need_amounts then
    local bt, bc, bs, bk = amounts(job, nodes)
    if bt then -- never in warn mode (ALWAYS_ENFORCED): a share not known is not counted
      if bc == "mig_slice_exceeds_card" then
        return reject(RC_INVALID_GRES, "mig_profile", sformat("MIG profile '%s' asks for %s compute slices and its card "
          .. "has %d; ask for a profile of at most %d slices", shown(bt), bs, bk, bk))
      end
      return reject(RC_INVALID_GRES, "mig_profile", sformat("unknown MIG profile '%s': no MIG profile has %s of %d "
        .. "compute slices; ask for one of the profiles the cluster's GPUs are cut into", shown(bt), bs, bk))
    end
  end
  local labels = P.labels
  if labels[1] then
    local comment = job.comment
    if type(comment) ~= "string" then comment = "" end
    if not LABELS_OK[comment] then
      local from = 1
      while from <= #labels do
        local rc, rule, msg, at = check_labels(comment, labels, from)
        if not rc then break end
        rc, rule, msg = reject(rc, rule, msg)
        if rc then return rc, rule, msg end
        from = at + 1
      end
    end
  end
  local parts, nparts = partitions_of(job)
  local typed_limits = false
  local t, wckey = false, false -- job.time_limit and job.wckey, each read at most once (false: not read yet)
  for i = 1, nparts do
    local pr = P.partitions[parts[i]]
    if pr then
      if pr.allowed_accounts and not (eff_account and pr.allowed_accounts[eff_account]) then
        local rc, r, m = reject(RC_INVALID_ACCOUNT, "partition_account", sformat(
          "account %s may not use partition %s; use --account with one of: %s",
          eff_account and shown(eff_account) or "(none)", pr.name, pr.allowed_accounts_str))
        if rc then return rc, r, m end
      end
      if pr.need_wckey and wckey == false then wckey = nonempty(job.wckey) end
      if pr.need_wckey and not wckey then
        local rc, r, m = reject(RC_ERROR, "partition_wckey", sformat(
          "partition %s needs a workload key; add --wckey=<key>", pr.name))
        if rc then return rc, r, m end
      end
      if pr.need_gpu and gpu_total == 0 then
        local rc, r, m = reject(RC_ERROR, "partition_gpu", sformat(
          "partition %s is for GPU jobs; request GPUs with --gres=gpu:<type>:<count> or --gpus=<type>:<count>", pr.name))
        if rc then return rc, r, m end
      end
      if pr.need_typed_gpu and gpu_untyped > 0 then
        local rc, r, m = reject(RC_INVALID_GRES, "partition_typed_gpu", sformat(
          "partition %s needs typed GPU requests; use --gres=gpu:<type>:<count> instead of gpu:<count>", pr.name))
        if rc then return rc, r, m end
      end
      local gtypes = pr.gpu_types
      if gtypes then -- sbatch and slurmctld take --gres=gpu:-1 and --gpus=abc as one GPU of type "-1" / "abc"
        for j = 1, ntypes do
          local gt = GPU_TYPES[j]
          if not gtypes[gt] then
            local rc, r, m = reject(RC_INVALID_GRES, "partition_gpu_type", sformat(
              "partition %s has no GPUs of type '%s' (its GPU types: %s); use --gres=gpu:<type>:<count> or "
              .. "--gpus=<type>:<count> with one of those types", pr.name, shown(gt), pr.gpu_types_str))
            if rc then return rc, r, m end
            break
          end
        end
      end
      if pr.max_gpus and P.count_eq then
        ONE_PART[1] = parts[i]
        local rc, r, m = eq_limit("partition_max_gpus", "partition", pr.name, pr.max_gpus, ONE_PART, 1, why, exclusive,
          nodes)
        if rc then return rc, r, m end
      elseif pr.max_gpus then
        local g, w = gpu_total, why
        if exclusive then
          local x, xw = whole_nodes(parts[i], nodes)
          if x > g then g = x end
          w = w or xw
        end
        if w then
          local rc, r, m = unbounded(w, "partition", pr.name, pr.max_gpus)
          if rc then return rc, r, m end
        elseif g > pr.max_gpus then
          local rc, r, m = too_many("partition_max_gpus", g, "partition", pr.name, pr.max_gpus)
          if rc then return rc, r, m end
        end
      end
      if pr.max_time_s and t == false then t = job.time_limit end
      if pr.max_time_s and type(t) == "number" and t ~= NO_VAL and mfloor(t) == t and t * 60 > pr.max_time_s then
        local asked = "UNLIMITED"
        if t < NO_VAL then asked = sformat("%d min", t) end
        local rc, r, m = reject(RC_INVALID_TIME_LIMIT, "partition_max_time", sformat(
          "time limit %s exceeds partition %s max_time %s; use --time=%s or less", asked, pr.name, pr.max_time_str,
          pr.max_time_str))
        if rc then return rc, r, m end
      end
      if pr.max_cpus_per_gpu or pr.max_mem_per_gpu then
        local rc, r, m = ratios(job, pr)
        if rc then return rc, r, m end
      end
      if pr.allowed_qos then
        -- neither --qos nor a default QOS seen here (default_qos is nil for an association without DefaultQOS):
        -- slurmctld picks the job's QOS after this plugin, so such a job is judged only where the site asks (need_qos)
        local qos = nonempty(job.qos) or nonempty(job.default_qos)
        if (qos or pr.need_qos) and not (qos and pr.allowed_qos[qos]) then
          local rc, r, m = reject(RC_ERROR, "partition_qos", sformat(
            "QOS %s may not be used in partition %s; use --qos with one of: %s", qos and shown(qos) or "(none)", pr.name,
            pr.allowed_qos_str))
          if rc then return rc, r, m end
        end
      end
      if pr.typed_limits then typed_limits = true end
    end
  end
  local ar = eff_account and P.accounts[eff_account]
  if ar then
    if ar.allowed_partitions then
      for i = 1, nparts do
        if not ar.allowed_partitions[parts[i]] then
          local rc, r, m = reject(RC_ERROR, "account_partition", sformat(
            "account %s may not use partition %s; use --partition with one of: %s", ar.name, shown(parts[i]),
            ar.allowed_partitions_str))
          if rc then return rc, r, m end
          break
        end
      end
    end
    if ar.max_gpus and P.count_eq then
      local rc, r, m = eq_limit("account_max_gpus", "account", ar.name, ar.max_gpus, parts, nparts, why, exclusive, nodes)
      if rc then return rc, r, m end
    elseif ar.max_gpus then
      local g, w = gpu_total, why
      if exclusive then
        if nparts == 0 then w = w or "--exclusive gets every GPU of its nodes, and the job names no partition" end
        for i = 1, nparts do
          local x, xw = whole_nodes(parts[i], nodes)
          if x > g then g = x end
          w = w or xw
        end
      end
      if w then
        local rc, r, m = unbounded(w, "account", ar.name, ar.max_gpus)
        if rc then return rc, r, m end
      elseif g > ar.max_gpus then
        local rc, r, m = too_many("account_max_gpus", g, "account", ar.name, ar.max_gpus)
        if rc then return rc, r, m end
      end
    end
    if ar.typed_limits then typed_limits = true end
  end
  if P.reject_untyped and gpu_untyped > 0 and not typed_limits and P.has_qos_typed then
    local qos = nonempty(job.qos) or nonempty(job.default_qos)
    if qos and P.qos_typed[qos] then typed_limits = true end
  end
  if P.reject_untyped and typed_limits and gpu_untyped > 0 then
    local rc, r, m = reject(RC_INVALID_GRES, "untyped_gpu", "typed GPU limits apply to this job and Slurm does not "
      .. "count untyped requests against them; use --gres=gpu:<type>:<count>")
    if rc then return rc, r, m end
  end
  return RC_OK, "ok", nil
end

-- slurm_job_modify sees only the changed fields; unchanged ones (nil or NO_VAL*) come from the job record.
local function merged_view(desc, rec)
  return setmetatable({}, { __index = function(_, k)
    local v = desc[k]
    if v == nil or v == NO_VAL or v == NO_VAL16 or v == NO_VAL64 then
      if rec ~= nil then return rec[k] end
      return nil
    end
    return v
  end })
end

-- One value of the structured rejection line: bytes other than [A-Za-z0-9_.,:/@+-] as %XX (so a space, '=' or
-- newline cannot break the line; gpuclust/accounting/history/refusals.py decodes it); nil as the empty string.
local LOG_UNSAFE = "[^%w_%.,:/@%+%-]"
local function hex_byte(c) return sformat("%%%02X", sbyte(c)) end
-- Encoded strings are remembered (bounded as GPU_MEMO): a site's rejections name few distinct accounts, users and
-- partitions, and each encoding is three C calls.
local LOG_MEMO, LOG_MEMO_N = {}, 0
local function log_value(v)
  if v == nil then return "" end
  local e = LOG_MEMO[v]
  if e then return e end
  local s
  if type(v) == "number" then s = int_text(v) else s = ssub(tostring(v), 1, 200) end
  if sfind(s, LOG_UNSAFE) then s = sgsub(s, LOG_UNSAFE, hex_byte) end
  if v == v then -- NaN cannot be a key
    if LOG_MEMO_N >= CACHE_MAX then LOG_MEMO, LOG_MEMO_N = {}, 0 end
    LOG_MEMO[v] = s
    LOG_MEMO_N = LOG_MEMO_N + 1
  end
  return s
end

local function read_field(job, k) return job[k] end
local function get(job, k)
  local ok, v = pcall(read_field, job, k)
  if ok then return v end
  return nil
end

-- The structured line `report fetch` counts refusals from (slurm.log_info only; read fields via pcall: a
-- rejection must never turn into an error here). Format v1, fields in this order:
--   gpuclust-policy-reject v1 op=submit|modify rule=R account=A user=U partition=P gpus=N
-- and the same fields after gpuclust-policy-warn v1 for each warn-mode rule an accepted job failed.
-- A rule's rejection reuses what evaluate read of this job (SEEN_*: the same values, without reading the fields
-- or parsing the GPU strings again); an internal error reads afresh, each field on its own.
local function log_line(marker, job, rule, where)
  if job == nil then return end
  local account, user, part, gpus
  local seen = job == SEEN_JOB and rule ~= "internal_error"
  if seen then
    account, user = SEEN_ACCOUNT, SEEN_USER
  else
    account, user = nonempty(get(job, "account")) or nonempty(get(job, "default_account")), get(job, "user_name")
  end
  if seen and SEEN_PART_READ then part = SEEN_PART else part = get(job, "partition") end
  part = nonempty(part) or P.default_partition
  if seen and SEEN_GPUS ~= false then
    gpus = SEEN_GPUS
  else
    local okg
    okg, gpus = pcall(gpu_request, job)
    if not okg then gpus = nil end
  end
  local op = "submit"
  if where == "slurm_job_modify" then op = "modify" end
  pcall(slurm.log_info, "%s", marker .. " v1 op=" .. op .. " rule=" .. log_value(rule)
    .. " account=" .. log_value(account) .. " user=" .. log_value(user) .. " partition=" .. log_value(part)
    .. " gpus=" .. log_value(gpus))
end

-- An accepted job that failed warn-mode rules: the user is told, in one message (a line per rule), what will be
-- refused and from when; one gpuclust-policy-warn line per rule is logged.
local function log_warnings(job, where)
  local text = nil
  for i = 1, NWARN do
    local rule = WARN_RULES[i]
    local line = "gpuclust policy [" .. rule .. "] warning: accepted now, refused " .. P.warn[rule] .. ": " .. WARN_MSGS[i]
    if text then text = text .. "\n" .. line else text = line end
  end
  pcall(slurm.log_user, "%s", text)
  for i = 1, NWARN do pcall(log_line, "gpuclust-policy-warn", job, WARN_RULES[i], where) end
end

-- The engine runs under pcall: an engine error neither crashes slurmctld nor silently accepts (an uncaught
-- error in slurm_job_submit accepts the job in 22.05); the configured fail_mode decides.
local function decide(ok, rc, rule, msg, where, job)
  if not ok then
    pcall(slurm.log_error, "gpuclust policy: internal error in %s (fail_mode=%s): %s", where, P.fail_mode, tostring(rc))
    if P.fail_mode == "open" then return RC_OK end
    pcall(slurm.log_user, "%s", "gpuclust policy [internal_error]: the submit policy failed, so the job is rejected "
      .. "(fail_mode=closed); please report this to the cluster admins")
    pcall(log_line, "gpuclust-policy-reject", job, "internal_error", where)
    return RC_ERROR
  end
  if rc == RC_OK then
    if NWARN > 0 then pcall(log_warnings, job, where) end
    return RC_OK
  end
  pcall(slurm.log_user, "%s", msg)
  pcall(slurm.log_info, "%s: %s", where, msg)
  pcall(log_line, "gpuclust-policy-reject", job, rule, where)
  return rc
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local ok, rc, rule, msg = pcall(evaluate, job_desc)
  return decide(ok, rc, rule, msg, "slurm_job_submit", job_desc)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 then return RC_OK end -- root/SlurmUser edits are never blocked by the submit policy
  local view = merged_view(job_desc, job_rec) -- one view for the engine and the rejection line
  local ok, rc, rule, msg = pcall(evaluate, view)
  return decide(ok, rc, rule, msg, "slurm_job_modify", view)
end

return slurm.SUCCESS
