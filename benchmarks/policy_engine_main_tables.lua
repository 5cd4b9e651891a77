-- Prepended to an engine.lua from before issue 18's `lead` and `suffix` label globs (0747c6a and older) so that
-- `benchmarks/policy_engine.py --compare` can time it with the label tables rendered now: once, at load time,
-- it folds the new lists back into `wild`, the list that engine reads (a `*LITERAL` glob as its in-place pattern).
-- Usage: (cat benchmarks/policy_engine_main_tables.lua; git show 0747c6a:gpuclust/policy/engine.lua) > /tmp/engine-main.lua
do
  local SEPS = ",; \t\n\r\v\f"
  for _, rule in ipairs(POLICY.labels) do
    if rule.lead or rule.suffix then
      local wild = {}
      for _, p in ipairs(rule.lead or {}) do wild[#wild + 1] = p end
      for _, x in ipairs(rule.suffix or {}) do
        wild[#wild + 1] = "^[^" .. SEPS .. "%z]-" .. string.gsub(x, "%W", "%%%0") .. "%f[" .. SEPS .. "%z]"
      end
      for _, p in ipairs(rule.wild) do wild[#wild + 1] = p end
      rule.wild = wild
    end
  end
end
