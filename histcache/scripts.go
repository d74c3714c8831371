package histcache

import "github.com/redis/go-redis/v9"

// All scripts take the conversation's keys, which share the {convID} hash
// tag, so each one runs atomically on one Redis Cluster slot. Redis TIME is
// the only clock the protocol trusts: marker expiry, the young period and
// coverage age are all measured on the server that holds the keys.
//
// meta hash fields:
//
//	inc   incarnation: random, chosen by whoever re-creates meta after it was lost
//	ep    write epoch: bumped by every marker set/release, invalidation, lease loss
//	born  ms when this incarnation was created (fills wait MarkerTTL after it)
//	mk    number of pending-write markers
//	m:<t> pending-write marker of write token t, value = expiry ms
//	lo    coverage: every committed seq >= lo is in the ZSet (absent = no coverage)
//	vt    ms when the coverage was last proved by a full fill
//	n     ZCARD the ZSet must have (detects an evicted or expired ZSet)
const prelude = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function str(x) return string.format('%d', x) end
-- forget what is cached but keep the markers; bump the epoch so that fills
-- begun before this moment are rejected.
local function drop(meta, z)
  redis.call('DEL', z)
  redis.call('HDEL', meta, 'lo', 'vt')
  redis.call('HSET', meta, 'n', 0)
  redis.call('HINCRBY', meta, 'ep', 1)
end
-- keep the newest max entries; coverage then starts above the highest seq removed.
local function trim(z, max, lo)
  local c = redis.call('ZCARD', z)
  if c > max then
    local cut = redis.call('ZRANGE', z, c - max - 1, c - max - 1, 'WITHSCORES')
    redis.call('ZREMRANGEBYRANK', z, 0, c - max - 1)
    local top = tonumber(cut[2]) + 1
    if top > lo then lo = top end
    c = max
  end
  return lo, c
end
local function setmax(k, v)
  if v == '' then return end
  local cur = redis.call('GET', k)
  if not cur or tonumber(cur) < tonumber(v) then redis.call('SET', k, v) end
end
local function create(meta, inc, now)
  if redis.call('EXISTS', meta) == 0 then
    redis.call('HSET', meta, 'inc', inc, 'ep', 0, 'born', str(now), 'n', 0, 'mk', 0)
  end
end
`

// readScript: KEYS meta, zset. ARGV op (b|a|m), cursor, limit, coverage TTL ms.
// Returns {'miss', reason} or {'hit', version, coverage ms left, {member, score, ...}}.
var readScript = redis.NewScript(prelude + `
local now = now_ms()
local h = redis.call('HMGET', KEYS[1], 'inc', 'ep', 'lo', 'vt', 'n', 'mk')
if not h[1] then return {'miss', 'no_coverage'} end
if tonumber(h[6] or '0') > 0 then
  local all = redis.call('HGETALL', KEYS[1])
  local stale, fresh = {}, 0
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'm:' then
      if tonumber(all[i + 1]) <= now then stale[#stale + 1] = all[i] else fresh = fresh + 1 end
    end
  end
  if #stale == 0 then return {'miss', 'pending_write'} end
  -- A writer set this marker and neither finished nor aborted within
  -- MarkerTTL: it probably died after its commit. Whatever it committed is
  -- not in the ZSet, so nothing cached can be trusted.
  redis.call('HDEL', KEYS[1], unpack(stale))
  redis.call('HSET', KEYS[1], 'mk', fresh)
  drop(KEYS[1], KEYS[2])
  return {'miss', 'stale_marker'}
end
if not h[3] then return {'miss', 'no_coverage'} end
local left = tonumber(h[4]) + tonumber(ARGV[4]) - now
if left <= 0 then return {'miss', 'coverage_expired'} end
if redis.call('ZCARD', KEYS[2]) ~= tonumber(h[5]) then
  drop(KEYS[1], KEYS[2])
  return {'miss', 'inconsistent'}
end
local lo = tonumber(h[3])
local limit = tonumber(ARGV[3])
local ver = h[1] .. ':' .. h[2]
local op = ARGV[1]
if op == 'b' then
  local r = redis.call('ZREVRANGEBYSCORE', KEYS[2], '(' .. ARGV[2], '-inf', 'WITHSCORES', 'LIMIT', 0, limit)
  if #r < 2 * limit and lo > 0 then return {'miss', 'below_range'} end
  return {'hit', ver, left, r}
elseif op == 'a' then
  if tonumber(ARGV[2]) + 1 < lo then return {'miss', 'below_range'} end
  local r = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. ARGV[2], '+inf', 'WITHSCORES', 'LIMIT', 0, limit)
  return {'hit', ver, left, r}
end
local p = ARGV[2] .. ':'
local r = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
for i = 1, #r, 2 do
  if string.sub(r[i], 1, #p) == p then return {'hit', ver, left, {r[i], r[i + 1]}} end
end
if lo > 0 then return {'miss', 'below_range'} end
return {'hit', ver, left, {}}
`)

// beginFillScript: KEYS meta. ARGV incarnation candidate, TTL s, marker TTL ms.
// Returns {inc, ep, why-not-fillable or ”}.
var beginFillScript = redis.NewScript(prelude + `
local now = now_ms()
if redis.call('EXISTS', KEYS[1]) == 0 then
  create(KEYS[1], ARGV[1], now)
  redis.call('EXPIRE', KEYS[1], ARGV[2])
end
local h = redis.call('HMGET', KEYS[1], 'inc', 'ep', 'born', 'mk')
local why = ''
if tonumber(h[4]) > 0 then why = 'pending_write'
elseif now < tonumber(h[3]) + tonumber(ARGV[3]) then why = 'young' end
return {h[1], h[2], why}
`)

// fillScript: KEYS meta, zset, maxseq. ARGV inc, ep, lo, hi (number or
// 'inf'), marker TTL ms, coverage TTL ms, max entries, TTL s, max seq or ”,
// then score/member pairs. Returns the fill result label.
var fillScript = redis.NewScript(prelude + `
local now = now_ms()
local h = redis.call('HMGET', KEYS[1], 'inc', 'ep', 'born', 'lo', 'vt', 'mk')
if h[1] ~= ARGV[1] or h[2] ~= ARGV[2] then return 'rejected_stale' end
if tonumber(h[6]) > 0 then return 'rejected_pending' end
if now < tonumber(h[3]) + tonumber(ARGV[5]) then return 'rejected_young' end
local lo = tonumber(ARGV[3])
if ARGV[4] == 'inf' then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'vt', str(now))
else
  if not h[4] or tonumber(h[5]) + tonumber(ARGV[6]) <= now then return 'unanchored' end
  local clo = tonumber(h[4])
  if tonumber(ARGV[4]) + 1 < clo then return 'unanchored' end
  if lo >= clo then return 'redundant' end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], ARGV[3], ARGV[4])
end
if #ARGV >= 10 then redis.call('ZADD', KEYS[2], unpack(ARGV, 10)) end
local nlo, c = trim(KEYS[2], tonumber(ARGV[7]), lo)
redis.call('HSET', KEYS[1], 'lo', str(nlo), 'n', c)
redis.call('EXPIRE', KEYS[1], ARGV[8])
redis.call('EXPIRE', KEYS[2], ARGV[8])
setmax(KEYS[3], ARGV[9])
return 'installed'
`)

// beginWriteScript: KEYS meta. ARGV token, incarnation candidate, marker TTL ms, TTL s.
var beginWriteScript = redis.NewScript(prelude + `
local now = now_ms()
create(KEYS[1], ARGV[2], now)
redis.call('HSET', KEYS[1], 'm:' .. ARGV[1], str(now + tonumber(ARGV[3])))
redis.call('HINCRBY', KEYS[1], 'mk', 1)
redis.call('HINCRBY', KEYS[1], 'ep', 1)
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
`)

// endWriteScript: KEYS meta, zset, maxseq. ARGV token, max entries, TTL s,
// invalidate (0|1), max seq or ”, then score/member pairs.
var endWriteScript = redis.NewScript(prelude + `
setmax(KEYS[3], ARGV[5])
if redis.call('EXISTS', KEYS[1]) == 0 then return 'state_lost' end
local had = redis.call('HDEL', KEYS[1], 'm:' .. ARGV[1])
if had == 1 then redis.call('HINCRBY', KEYS[1], 'mk', -1) end
if had == 0 then
  drop(KEYS[1], KEYS[2])
  return 'lease_lost'
end
if ARGV[4] == '1' then
  drop(KEYS[1], KEYS[2])
  return 'invalidated'
end
redis.call('HINCRBY', KEYS[1], 'ep', 1)
redis.call('EXPIRE', KEYS[1], ARGV[3])
local clo = redis.call('HGET', KEYS[1], 'lo')
if not clo or #ARGV < 6 then return 'applied' end
local lo = tonumber(clo)
local add = {}
for i = 6, #ARGV, 2 do
  if tonumber(ARGV[i]) >= lo then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], ARGV[i], ARGV[i])
    add[#add + 1] = ARGV[i]
    add[#add + 1] = ARGV[i + 1]
  end
end
if #add > 0 then redis.call('ZADD', KEYS[2], unpack(add)) end
local nlo, c = trim(KEYS[2], tonumber(ARGV[2]), lo)
redis.call('HSET', KEYS[1], 'lo', str(nlo), 'n', c)
redis.call('EXPIRE', KEYS[2], ARGV[3])
return 'applied'
`)

// abortWriteScript: KEYS meta. ARGV token.
var abortWriteScript = redis.NewScript(`
if redis.call('HDEL', KEYS[1], 'm:' .. ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'mk', -1)
  redis.call('HINCRBY', KEYS[1], 'ep', 1)
end
return 1
`)

// invalidateScript: KEYS meta, zset.
var invalidateScript = redis.NewScript(prelude + `
if redis.call('EXISTS', KEYS[1]) == 1 then drop(KEYS[1], KEYS[2]) else redis.call('DEL', KEYS[2]) end
return 1
`)
