-- ===== gpuclust submit policy engine (fixed part; the POLICY tables above are generated) =====
-- Lua 5.1 (Debian's job_submit_lua.so links liblua5.1). No file or process access, no module loading:
-- this runs inside slurmctld, under its locks, one job at a time. Cost is O(rules) per job.
-- gpuclust/policy/evaluate.py is the Python twin of this file; a differential test keeps them identical.

local P = POLICY

-- Sentinels slurmctld uses for unset numbers (the `slurm` table holds them too; literals keep the engine
-- independent of which names a given slurmctld defines).
local NO_VAL = 4294967294
local NO_VAL16 = 65534
local NO_VAL64 = 18446744073709551614
local SAT = 1000000000 -- GPU counts saturate here, so arithmetic stays exact in doubles

-- Return codes. Only a few ESLURM_* names exist in 22.05's `slurm` table (ESLURM_INVALID_GRES does not,
-- and a nil return ACCEPTS the job), so numbers are used directly.
local RC_OK = 0
local RC_ERROR = -1 -- slurm.ERROR
local RC_INVALID_ACCOUNT = 2045 -- slurm.ESLURM_INVALID_ACCOUNT
local RC_INVALID_TIME_LIMIT = 2051 -- slurm.ESLURM_INVALID_TIME_LIMIT
local RC_INVALID_GRES = 2072 -- ESLURM_INVALID_GRES (no slurm.* name in 22.05)

local sfind, ssub, sgsub, sformat, sgmatch = string.find, string.sub, string.gsub, string.format, string.gmatch
local mfloor, tostring, type, pcall, setmetatable = math.floor, tostring, type, pcall, setmetatable

local NAME = "^[A-Za-z0-9_%.%-]+$"
local DIGITS = "^[0-9]+$"

local function nonempty(v)
  if type(v) == "string" and v ~= "" then return v end
  return nil
end

-- A usable count: an integer in [1, limit); nil, NO_VAL*, 0, NaN and fractions are "unset".
local function valid_count(v, limit)
  if type(v) == "number" and v >= 1 and v < limit and mfloor(v) == v then return v end
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

-- Adds the GPUs of one field value to (total, untyped); returns total, untyped, and the offending item when the
-- value is malformed. Items: [gres:|gres/]gpu[:type][:count], comma-separated; other GRES names are ignored.
-- No tables are built per item: this runs for every job.
local function add_gpus(v, mult, total, untyped)
  if v == nil then return total, untyped, nil end
  if type(v) ~= "string" then return total, untyped, "(not a string)" end
  for item in sgmatch(v, "[^,]+") do
    local rest = item
    local prefix = ssub(rest, 1, 5)
    if (prefix == "gres:" or prefix == "gres/") and #rest > 5 then rest = ssub(rest, 6) end
    local c1 = sfind(rest, ":", 1, true)
    local name = rest
    if c1 then name = ssub(rest, 1, c1 - 1) end
    if not sfind(name, NAME) then return total, untyped, item end
    if name == "gpu" then
      local count, typed
      if not c1 then
        count, typed = 1, false
      else
        local c2 = sfind(rest, ":", c1 + 1, true)
        if not c2 then
          local second = ssub(rest, c1 + 1)
          if sfind(second, DIGITS) then
            count, typed = to_count(second), false
          elseif sfind(second, NAME) then
            count, typed = 1, true
          else
            return total, untyped, item
          end
        else
          local second, third = ssub(rest, c1 + 1, c2 - 1), ssub(rest, c2 + 1)
          if sfind(second, NAME) and not sfind(second, DIGITS) and sfind(third, DIGITS) then
            count, typed = to_count(third), true -- a third colon leaves ':' in `third`, which fails DIGITS
          else
            return total, untyped, item
          end
        end
      end
      local g = sat_mul(count, mult)
      total = sat_add(total, g)
      if not typed then untyped = sat_add(untyped, g) end
    end
  end
  return total, untyped, nil
end

-- GPUs the job asks for, from every field that carries them. Per-node counts x nodes, per-socket x
-- sockets_per_node x nodes, per-task x tasks (num_tasks, else ntasks_per_node x nodes, else one per node).
-- tres_per_node and gres are the same request in 22.05 (gres is its alias), so gres is read only when
-- tres_per_node is unset.
local function gpu_request(job)
  -- Fields are read only when needed: each read of job_desc is a call into slurmctld.
  local per_job, per_node, per_socket, per_task = job.tres_per_job, job.tres_per_node, job.tres_per_socket, job.tres_per_task
  local node_field = "tres_per_node"
  if per_node == nil or per_node == "" then node_field, per_node = "gres", job.gres end
  if per_node == nil and per_socket == nil and per_task == nil then
    local total, untyped, bad = add_gpus(per_job, 1, 0, 0)
    return total, untyped, bad, "tres_per_job"
  end
  local nodes = valid_count(job.min_nodes, NO_VAL) or 1
  local total, untyped, bad = add_gpus(per_job, 1, 0, 0)
  if bad then return total, untyped, bad, "tres_per_job" end
  total, untyped, bad = add_gpus(per_node, nodes, total, untyped)
  if bad then return total, untyped, bad, node_field end
  if per_socket ~= nil then
    local sockets = valid_count(job.sockets_per_node, NO_VAL16) or 1
    total, untyped, bad = add_gpus(per_socket, sat_mul(sockets, nodes), total, untyped)
    if bad then return total, untyped, bad, "tres_per_socket" end
  end
  if per_task ~= nil then
    local tasks = valid_count(job.num_tasks, NO_VAL)
    if not tasks then
      local tpn = valid_count(job.ntasks_per_node, NO_VAL16)
      if tpn then tasks = sat_mul(tpn, nodes) else tasks = nodes end
    end
    total, untyped, bad = add_gpus(per_task, tasks, total, untyped)
    if bad then return total, untyped, bad, "tres_per_task" end
  end
  return total, untyped, nil, nil
end

-- The value of label `key` in --comment: tokens are separated by commas, semicolons or blanks, a token is
-- key=value (split at its first '='), and the first token with this key and a non-empty value wins.
-- Searched per key with plain finds, without splitting the comment into a table (this runs for every job).
local LABEL_SEP = "[,; \t\n\r\v\f]"
local SEP_BYTE = { [44] = true, [59] = true, [32] = true, [9] = true, [10] = true, [13] = true, [11] = true, [12] = true }
local sbyte = string.byte
local function label_value(comment, key_eq)
  local pos = 1
  while true do
    local s, e = sfind(comment, key_eq, pos, true)
    if not s then return nil end
    if s == 1 or SEP_BYTE[sbyte(comment, s - 1)] then
      local stop = sfind(comment, LABEL_SEP, e + 1)
      local value
      if stop then value = ssub(comment, e + 1, stop - 1) else value = ssub(comment, e + 1) end
      if value ~= "" then return value end
    end
    pos = s + 1
  end
end

local function partitions_of(job)
  local list, n = {}, 0
  local p = job.partition
  if type(p) == "string" then
    for name in sgmatch(p, "[^,]+") do
      n = n + 1
      list[n] = name
    end
  end
  if n == 0 and P.default_partition then
    n = 1
    list[1] = P.default_partition
  end
  return list, n
end

local function reject(rc, rule, msg)
  return rc, rule, "gpuclust policy [" .. rule .. "]: " .. msg
end

-- Rules in a fixed order; the first that fails decides. Returns rc, rule, message (nil on accept).
local function evaluate(job)
  local user = job.user_name
  local account = nonempty(job.account)
  local eff_account = account or nonempty(job.default_account)
  if (type(user) == "string" and P.exempt_users[user]) or (eff_account and P.exempt_accounts[eff_account]) then
    return RC_OK, "exempt", nil
  end
  if P.need_account and not account then
    return reject(RC_INVALID_ACCOUNT, "account_missing", "no account given; add --account=<account> (sbatch -A)")
  end
  local gpu_total, gpu_untyped, bad, field = gpu_request(job)
  if bad then
    return reject(RC_INVALID_GRES, "gres_syntax", sformat(
      "cannot parse GPU request '%s' in %s; use --gres=gpu:<type>:<count> or --gpus=<type>:<count>", shown(bad), field))
  end
  local labels = P.labels
  if labels[1] then
    local comment = job.comment
    if type(comment) ~= "string" then comment = "" end
    for i = 1, #labels do
      local rule = labels[i]
      local value = label_value(comment, rule.key_eq)
      if value == nil then
        return reject(RC_ERROR, "label_missing", sformat(
          "--comment must contain %s=<value> (allowed: %s)", rule.key, rule.allowed))
      end
      local pats = rule.patterns
      if rule.any == false and not rule.exact[value] then -- exact values: one hash lookup; globs: a scan
        local ok = false
        for j = 1, #pats do
          if sfind(value, pats[j]) then
            ok = true
            break
          end
        end
        if not ok then
          return reject(RC_ERROR, "label_value", sformat(
            "%s=%s is not allowed; use %s=<one of: %s> in --comment", rule.key, shown(value), rule.key, rule.allowed))
        end
      end
    end
  end
  local parts, nparts = partitions_of(job)
  local typed_limits = false
  for i = 1, nparts do
    local pr = P.partitions[parts[i]]
    if pr then
      if pr.allowed_accounts and not (eff_account and pr.allowed_accounts[eff_account]) then
        return reject(RC_INVALID_ACCOUNT, "partition_account", sformat(
          "account %s may not use partition %s; use --account with one of: %s",
          eff_account and shown(eff_account) or "(none)", pr.name, pr.allowed_accounts_str))
      end
      if pr.need_wckey and not nonempty(job.wckey) then
        return reject(RC_ERROR, "partition_wckey", sformat("partition %s needs a workload key; add --wckey=<key>", pr.name))
      end
      if pr.need_gpu and gpu_total == 0 then
        return reject(RC_ERROR, "partition_gpu", sformat(
          "partition %s is for GPU jobs; request GPUs with --gres=gpu:<type>:<count> or --gpus=<type>:<count>", pr.name))
      end
      if pr.need_typed_gpu and gpu_untyped > 0 then
        return reject(RC_INVALID_GRES, "partition_typed_gpu", sformat(
          "partition %s needs typed GPU requests; use --gres=gpu:<type>:<count> instead of gpu:<count>", pr.name))
      end
      if pr.max_gpus and gpu_total > pr.max_gpus then
        return reject(RC_ERROR, "partition_max_gpus", sformat(
          "job asks for %d GPUs; partition %s allows at most %d per job", gpu_total, pr.name, pr.max_gpus))
      end
      local t = job.time_limit
      if pr.max_time_s and type(t) == "number" and t ~= NO_VAL and mfloor(t) == t and t * 60 > pr.max_time_s then
        local asked = "UNLIMITED"
        if t < NO_VAL then asked = sformat("%d min", t) end
        return reject(RC_INVALID_TIME_LIMIT, "partition_max_time", sformat(
          "time limit %s exceeds partition %s max_time %s; use --time=%s or less", asked, pr.name, pr.max_time_str,
          pr.max_time_str))
      end
      if pr.typed_limits then typed_limits = true end
    end
  end
  local ar = eff_account and P.accounts[eff_account]
  if ar then
    if ar.allowed_partitions then
      for i = 1, nparts do
        if not ar.allowed_partitions[parts[i]] then
          return reject(RC_ERROR, "account_partition", sformat(
            "account %s may not use partition %s; use --partition with one of: %s", ar.name, shown(parts[i]),
            ar.allowed_partitions_str))
        end
      end
    end
    if ar.max_gpus and gpu_total > ar.max_gpus then
      return reject(RC_ERROR, "account_max_gpus", sformat(
        "job asks for %d GPUs; account %s allows at most %d per job", gpu_total, ar.name, ar.max_gpus))
    end
    if ar.typed_limits then typed_limits = true end
  end
  if P.reject_untyped and gpu_untyped > 0 and not typed_limits and P.has_qos_typed then
    local qos = nonempty(job.qos) or nonempty(job.default_qos)
    if qos and P.qos_typed[qos] then typed_limits = true end
  end
  if P.reject_untyped and typed_limits and gpu_untyped > 0 then
    return reject(RC_INVALID_GRES, "untyped_gpu", "typed GPU limits apply to this job and Slurm does not count untyped "
      .. "requests against them; use --gres=gpu:<type>:<count>")
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

local function evaluate_modify(desc, rec)
  return evaluate(merged_view(desc, rec))
end

-- The engine runs under pcall: an engine error neither crashes slurmctld nor silently accepts (an uncaught
-- error in slurm_job_submit accepts the job in 22.05); the configured fail_mode decides.
local function decide(ok, rc, rule, msg, where)
  if not ok then
    pcall(slurm.log_error, "gpuclust policy: internal error in %s (fail_mode=%s): %s", where, P.fail_mode, tostring(rc))
    if P.fail_mode == "open" then return RC_OK end
    pcall(slurm.log_user, "%s", "gpuclust policy [internal_error]: the submit policy failed, so the job is rejected "
      .. "(fail_mode=closed); please report this to the cluster admins")
    return RC_ERROR
  end
  if rc == RC_OK then return RC_OK end
  pcall(slurm.log_user, "%s", msg)
  pcall(slurm.log_info, "%s: %s", where, msg)
  return rc
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local ok, rc, rule, msg = pcall(evaluate, job_desc)
  return decide(ok, rc, rule, msg, "slurm_job_submit")
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 then return RC_OK end -- root/SlurmUser edits are never blocked by the submit policy
  local ok, rc, rule, msg = pcall(evaluate_modify, job_desc, job_rec)
  return decide(ok, rc, rule, msg, "slurm_job_modify")
end

return slurm.SUCCESS
