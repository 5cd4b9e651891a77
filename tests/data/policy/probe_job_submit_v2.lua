-- Probe v2: rejects every job and shows the job_desc fields the GPU bound reads (used by record_alloc.py).
local F = {"account","partition","qos","comment","user_name","min_nodes","max_nodes","num_tasks","min_cpus","ntasks_per_node","sockets_per_node","ntasks_per_socket","ntasks_per_tres","shared","cpus_per_task","time_limit","gres","tres_per_node","tres_per_job","tres_per_task","tres_per_socket","array_inx"}
local function q(v)
  if v == nil then return "null" end
  if type(v) == "number" then return string.format("%.17g", v) end
  return '"' .. string.gsub(tostring(v), '[%c"\\]', function(c) return string.format("\\u%04x", string.byte(c)) end) .. '"'
end
function slurm_job_submit(job_desc, part_list, submit_uid)
  local out = {}
  for i = 1, #F do out[#out + 1] = '"' .. F[i] .. '": ' .. q(job_desc[F[i]]) end
  slurm.log_user("%s", "PROBE {" .. table.concat(out, ", ") .. "}")
  return slurm.ERROR
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
return slurm.SUCCESS
