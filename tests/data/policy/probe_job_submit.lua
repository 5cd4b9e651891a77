-- Probe: shows the job_desc fields the policy reads (used to record jobdesc-probe.json and sbatch-grammar-*.json).
-- A held job (priority 0: the recorder sets SBATCH_HOLD=1) is accepted after logging, so that slurmctld's own
-- checks after job_submit run too (the recorder cancels it); every other job is rejected.
local F = {"account","partition","qos","comment","wckey","name","user_name","default_account","default_qos",
  "min_nodes","max_nodes","num_tasks","ntasks_per_node","sockets_per_node","time_limit","gres","tres_per_node",
  "tres_per_job","tres_per_task","tres_per_socket","user_id","ntasks_per_socket","cores_per_socket",
  "threads_per_core","cpus_per_task","cpus_per_tres","mem_per_tres","ntasks_per_tres","min_cpus","time_min","priority"}
local function q(v)
  if v == nil then return "null" end
  if type(v) == "number" then return string.format("%.17g", v) end
  return '"' .. string.gsub(tostring(v), '[%c"\\\128-\255]', function(c) return string.format("\\u%04x", string.byte(c)) end) .. '"'
end
function slurm_job_submit(job_desc, part_list, submit_uid)
  local out = {}
  for i = 1, #F do out[#out + 1] = '"' .. F[i] .. '": ' .. q(job_desc[F[i]]) end
  slurm.log_user("%s", "PROBE {" .. table.concat(out, ", ") .. "}")
  if job_desc.priority == 0 then return slurm.SUCCESS end
  return slurm.ERROR
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
return slurm.SUCCESS
