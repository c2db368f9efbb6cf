package redislist

import "github.com/redis/go-redis/v9"

// settleScript removes elements from the processing list KEYS[1] and writes their copies, per
// delivery atomically. ARGV holds quadruples: the element's exact bytes, the KEYS index of the
// copy's key, the copy, and a score: "" LPUSHes the copy onto a list (a retry copy, a dead
// letter), a number ZADDs it to the delay queue with that score (durable_zset). Per quadruple it
// answers "settled" when the element is no longer in the processing list (an earlier call
// settled it: nothing is written again), "ok" when the copy is written and the element removed,
// or "command<TAB>Redis's error" when a command failed, in which case the element stays in (or
// is put back into) the processing list.
var settleScript = redis.NewScript(`
local function failed(r) return type(r) == 'table' and r.err end
local res = {}
for i = 1, #ARGV, 4 do
  local elem, key, copy, score = ARGV[i], KEYS[tonumber(ARGV[i+1])], ARGV[i+2], ARGV[i+3]
  local n = redis.pcall('LREM', KEYS[1], -1, elem)
  local out
  if failed(n) then
    out = 'lrem\t' .. n.err
  elseif n == 0 then
    out = 'settled'
  else
    local w, cmd
    if score == '' then
      cmd, w = 'lpush', redis.pcall('LPUSH', key, copy)
    else
      cmd, w = 'zadd', redis.pcall('ZADD', key, score, copy)
    end
    if failed(w) then
      redis.call('RPUSH', KEYS[1], elem)
      out = cmd .. '\t' .. w.err
    else
      out = 'ok'
    end
  end
  res[#res+1] = out
end
return res
`)
