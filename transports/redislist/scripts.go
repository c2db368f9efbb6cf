package redislist

import "github.com/redis/go-redis/v9"

// settleScript removes elements from the processing list KEYS[1] and writes their copies, per
// delivery atomically. ARGV holds triples: the element's exact bytes, the KEYS index of the
// copy's list, the copy. Per triple it answers "settled" when the element is no longer in the
// processing list (an earlier call settled it: nothing is written again), "ok" when the copy is
// written and the element removed, or "command<TAB>Redis's error" when a command failed, in
// which case the element stays in (or is put back into) the processing list.
var settleScript = redis.NewScript(`
local function failed(r) return type(r) == 'table' and r.err end
local res = {}
for i = 1, #ARGV, 3 do
  local elem, key, copy = ARGV[i], KEYS[tonumber(ARGV[i+1])], ARGV[i+2]
  local n = redis.pcall('LREM', KEYS[1], -1, elem)
  local out
  if failed(n) then
    out = 'lrem\t' .. n.err
  elseif n == 0 then
    out = 'settled'
  else
    local w = redis.pcall('LPUSH', key, copy)
    if failed(w) then
      redis.call('RPUSH', KEYS[1], elem)
      out = 'lpush\t' .. w.err
    else
      out = 'ok'
    end
  end
  res[#res+1] = out
end
return res
`)
