-- Lua 5.4 driver for @improv/example-runner-lua, protocol v1 (docs/protocol.md).
-- Standard library only: the JSON reader and writer for the frames are here.
--
-- Decisions (see README.md):
-- - number: a Lua float. Results may be integers or floats; NaN, +-inf and
--   -0 travel as the wire's strings.
-- - text: a Lua (byte) string holding UTF-8. Lone surrogates, which UTF-8
--   cannot hold, arrive as their three-byte generalised form and are written
--   back as \u escapes, so they survive the round trip.
-- - datetime: Lua has no datetime type. A datetime argument is a table
--   { seconds = <integer seconds since 1970-01-01T00:00:00Z>, nanos = <0..999999999> };
--   a datetime result is such a table or an ISO-8601 string with Z.
-- - enum: a Lua integer.
-- - Lua cannot duplicate file descriptors, so the protocol channel stays
--   fd 1. The body runs in an environment of its own whose print and
--   io.write go to stderr, and which has no io.stdout, os.execute, io.popen,
--   require or debug: nothing it is given writes to fd 1. (The driver is no
--   security boundary; a body that reaches fd 1 anyway only corrupts its own
--   worker, which the JS side kills as a malformed frame.)

local stdin, stdout, stderr = io.stdin, io.stdout, io.stderr
local byte, char, sub, format, find = string.byte, string.char, string.sub, string.format, string.find
local concat = table.concat
local mtype, tointeger, huge = math.type, math.tointeger, math.huge

-- ---- JSON reading -----------------------------------------------------------

local NULL = setmetatable({}, { __name = 'null' })

local function utf8_of(cp)
  -- Generalised UTF-8: surrogate code points get their three-byte form too.
  if cp < 0x80 then return char(cp) end
  if cp < 0x800 then return char(0xC0 | (cp >> 6), 0x80 | (cp & 0x3F)) end
  if cp < 0x10000 then
    return char(0xE0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F))
  end
  return char(0xF0 | (cp >> 18), 0x80 | ((cp >> 12) & 0x3F), 0x80 | ((cp >> 6) & 0x3F), 0x80 | (cp & 0x3F))
end

local ESCAPES = { ['"'] = '"', ['\\'] = '\\', ['/'] = '/', b = '\b', f = '\f', n = '\n', r = '\r', t = '\t' }

local function parse(text)
  local pos = 1
  local value

  local function skip() pos = find(text, '[^ \t\r\n]', pos) or #text + 1 end

  local function str()
    local parts, start = {}, pos + 1
    pos = start
    while true do
      local q = find(text, '["\\]', pos)
      if not q then error('unterminated string') end
      parts[#parts + 1] = sub(text, pos, q - 1)
      if sub(text, q, q) == '"' then
        pos = q + 1
        return concat(parts)
      end
      local e = sub(text, q + 1, q + 1)
      if e == 'u' then
        local cp = tonumber(sub(text, q + 2, q + 5), 16)
        pos = q + 6
        if cp >= 0xD800 and cp <= 0xDBFF and sub(text, pos, pos + 1) == '\\u' then
          local low = tonumber(sub(text, pos + 2, pos + 5), 16)
          if low >= 0xDC00 and low <= 0xDFFF then
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
            pos = pos + 6
          end
        end
        parts[#parts + 1] = utf8_of(cp)
      else
        parts[#parts + 1] = ESCAPES[e] or error('bad escape \\' .. e)
        pos = q + 2
      end
    end
  end

  function value()
    skip()
    local c = sub(text, pos, pos)
    if c == '{' then
      local t = {}
      pos = pos + 1
      skip()
      if sub(text, pos, pos) == '}' then pos = pos + 1 return t end
      while true do
        skip()
        local k = str()
        skip()
        pos = pos + 1 -- ':'
        t[k] = value()
        skip()
        c = sub(text, pos, pos)
        pos = pos + 1
        if c == '}' then return t end
      end
    elseif c == '[' then
      local t, n = {}, 0
      pos = pos + 1
      skip()
      if sub(text, pos, pos) == ']' then pos = pos + 1 return t end
      while true do
        n = n + 1
        t[n] = value()
        skip()
        c = sub(text, pos, pos)
        pos = pos + 1
        if c == ']' then return t end
      end
    elseif c == '"' then
      return str()
    elseif sub(text, pos, pos + 3) == 'true' then pos = pos + 4 return true
    elseif sub(text, pos, pos + 4) == 'false' then pos = pos + 5 return false
    elseif sub(text, pos, pos + 3) == 'null' then pos = pos + 4 return NULL
    end
    local s, e = find(text, '^-?%d+%.?%d*[eE]?[-+]?%d*', pos)
    if not s then error('bad JSON at byte ' .. pos) end
    pos = e + 1
    return tonumber(sub(text, s, e))
  end

  return value()
end

-- ---- JSON writing -----------------------------------------------------------

local function quote(s)
  local out, i, n = { '"' }, 1, #s
  while i <= n do
    local b = byte(s, i)
    if b == 0x22 then out[#out + 1] = '\\"'
    elseif b == 0x5C then out[#out + 1] = '\\\\'
    elseif b < 0x20 or b == 0x7F then out[#out + 1] = format('\\u%04x', b)
    elseif b == 0xED and i + 2 <= n and byte(s, i + 1) >= 0xA0 then
      -- a surrogate in generalised UTF-8: JSON carries it as an escape
      local cp = ((b & 0x0F) << 12) | ((byte(s, i + 1) & 0x3F) << 6) | (byte(s, i + 2) & 0x3F)
      out[#out + 1] = format('\\u%04x', cp)
      i = i + 2
    else
      -- copy the run of plain bytes up to the next byte that needs care
      local j = find(s, '[\0-\31"\\\127\237]', i) or n + 1
      if j == i then j = i + 1 end
      out[#out + 1] = sub(s, i, j - 1)
      i = j - 1
    end
    i = i + 1
  end
  out[#out + 1] = '"'
  return concat(out)
end

local function number_out(x)
  if x ~= x then return '"NaN"' end
  if x == huge then return '"Infinity"' end
  if x == -huge then return '"-Infinity"' end
  if x == 0 and 1 / x < 0 then return '"-0"' end
  if mtype(x) == 'integer' then return tostring(x) end
  return format('%.17g', x)
end

local function encode(v)
  local t = type(v)
  if t == 'string' then return quote(v) end
  if t == 'number' then return number_out(v) end
  if t == 'boolean' then return tostring(v) end
  if v == nil or v == NULL then return 'null' end
  if #v > 0 or next(v) == nil then
    local parts = {}
    for i = 1, #v do parts[i] = encode(v[i]) end
    return '[' .. concat(parts, ',') .. ']'
  end
  local parts = {}
  for k, x in pairs(v) do parts[#parts + 1] = quote(k) .. ':' .. encode(x) end
  return '{' .. concat(parts, ',') .. '}'
end

local function send(frame)
  stdout:write(encode(frame), '\n')
  stdout:flush()
end

-- ---- datetimes --------------------------------------------------------------

-- Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = (y >= 0 and y or y - 399) // 400
  local yoe = y - era * 400
  local doy = (153 * (m + (m > 2 and -3 or 9)) + 2) // 5 + d - 1
  local doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = (z >= 0 and z or z - 146096) // 146097
  local doe = z - era * 146097
  local yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
  local doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
  local mp = (5 * doy + 2) // 153
  local d = doy - (153 * mp + 2) // 5 + 1
  local m = mp < 10 and mp + 3 or mp - 9
  return yoe + era * 400 + (m <= 2 and 1 or 0), m, d
end

-- The wire's form: always UTC, `Z`, 0-9 fraction digits.
local function datetime_in(s)
  local y, mo, d, h, mi, se, frac = s:match('^(%d%d%d%d)-(%d%d)-(%d%d)T(%d%d):(%d%d):(%d%d)%.?(%d*)Z$')
  if not y then error('bad datetime on the wire: ' .. s) end
  local seconds = days_from_civil(tonumber(y), tonumber(mo), tonumber(d)) * 86400
    + tonumber(h) * 3600 + tonumber(mi) * 60 + tonumber(se)
  return { seconds = seconds, nanos = tonumber((frac .. '000000000'):sub(1, 9)) }
end

local function datetime_out(v)
  if type(v) == 'string' then
    local ok, t = pcall(datetime_in, v)
    if ok then return v end
    return nil
  end
  if type(v) ~= 'table' then return nil end
  local seconds, nanos = tointeger(v.seconds), tointeger(v.nanos or 0)
  if not seconds or not nanos or nanos < 0 or nanos > 999999999 then return nil end
  local days, rest = seconds // 86400, seconds % 86400
  local y, m, d = civil_from_days(days)
  local text = format('%04d-%02d-%02dT%02d:%02d:%02d', y, m, d, rest // 3600, rest % 3600 // 60, rest % 60)
  if nanos > 0 then text = text .. ('.' .. format('%09d', nanos)):gsub('0+$', '') end
  return text .. 'Z'
end

-- ---- values -----------------------------------------------------------------

local SPECIAL = { NaN = 0 / 0, Infinity = huge, ['-Infinity'] = -huge, ['-0'] = -0.0 }

local function arg_in(v, t)
  if t == 'number' then
    if type(v) == 'string' then return SPECIAL[v] end
    return v * 1.0
  elseif t == 'datetime' then
    return datetime_in(v)
  elseif t == 'enum' then
    return tointeger(v)
  end
  return v -- boolean, text
end

local function describe(v)
  local t = type(v)
  if t == 'string' then return format('string %q', #v > 40 and sub(v, 1, 40) .. '...' or v) end
  if t == 'number' then return mtype(v) .. ' ' .. tostring(v) end
  return t
end

-- The result as wire JSON, or nil and what was received.
local function result_out(v, t)
  if t == 'number' then
    if type(v) == 'number' then return v * 1.0 end
  elseif t == 'boolean' then
    if type(v) == 'boolean' then return v end
  elseif t == 'text' then
    if type(v) == 'string' then return v end
  elseif t == 'datetime' then
    local s = datetime_out(v)
    if s then return s end
  elseif t == 'enum' then
    local i = type(v) == 'number' and tointeger(v)
    if i and i >= 0 and i <= 4294967295 then return i end
  end
  return nil, describe(v)
end

-- ---- the body's environment --------------------------------------------------

local SAFE = {
  'assert', 'error', 'ipairs', 'next', 'pairs', 'pcall', 'rawequal', 'rawget', 'rawlen',
  'rawset', 'select', 'tonumber', 'tostring', 'type', 'xpcall', 'getmetatable', 'setmetatable',
}
local LIBRARIES = { 'math', 'string', 'table', 'utf8' }
local OS = { 'clock', 'date', 'difftime', 'time' }

local OutputLimit = setmetatable({}, { __name = 'output limit' })

-- A fresh environment per row: fresh globals and fresh library tables, so
-- nothing one row sets is visible to the next.
local function environment(args, captured, cap)
  local env = { args = args }
  for _, name in ipairs(SAFE) do env[name] = _G[name] end
  for _, lib in ipairs(LIBRARIES) do
    local copy = {}
    for k, v in pairs(_G[lib]) do copy[k] = v end
    env[lib] = copy
  end
  env.os = {}
  for _, name in ipairs(OS) do env.os[name] = os[name] end
  local size = 0
  local function emit(text)
    size = size + #text
    if size > cap then error(OutputLimit, 0) end
    captured[#captured + 1] = text
  end
  env.print = function(...)
    local parts = table.pack(...)
    for i = 1, parts.n do parts[i] = tostring(parts[i]) end
    emit(concat(parts, '\t', 1, parts.n) .. '\n')
  end
  env.io = { write = function(...) for _, s in ipairs({ ... }) do emit(tostring(s)) end end }
  -- load compiles text only, in this environment unless given another
  env.load = function(chunk, name, _mode, chunkEnv)
    return load(chunk, name, 't', chunkEnv or env)
  end
  env._G = env
  return env
end

-- ---- requests -----------------------------------------------------------------

local fn, chunk, maxOutput

local function load_fn(request)
  if fn then return { id = request.id, error = { type = 'ProtocolError', message = 'a worker serves one function' } } end
  local loaded, message = load(request.fn.body, '=body', 't', {})
  if not loaded then return { id = request.id, error = { type = 'SyntaxError', message = message } } end
  fn, chunk, maxOutput = request.fn, loaded, request.maxOutputBytes or 1048576
  return { id = request.id, ok = true }
end

local function call_row(row)
  local args = {}
  for i, t in ipairs(fn.argTypes) do args[i] = arg_in(row[i], t) end
  local captured = {}
  local env = environment(args, captured, maxOutput)
  debug.setupvalue(chunk, 1, env) -- the chunk's _ENV: this row's environment
  math.randomseed(0) -- every row draws the same numbers, whatever ran before
  local ok, err = xpcall(chunk, function(e)
    if e == OutputLimit then return e end
    return { message = tostring(e), traceback = debug.traceback(nil, 2) }
  end)
  if #captured > 0 then stderr:write(concat(captured)) end
  if not ok then
    if err == OutputLimit then return nil, { type = 'OutputLimit', message = 'output too large', limit = 'output' } end
    return nil, { type = 'LuaError', message = err.message, traceback = concat(captured) .. err.traceback }
  end
  local value, got = result_out(env.result, fn.returnType)
  if value == nil then
    return nil, { type = 'ResultTypeError', message = 'result expected ' .. fn.returnType .. ', got ' .. got, got = got }
  end
  if type(value) == 'string' and #value > maxOutput then
    return nil, { type = 'OutputLimit', message = 'output too large', limit = 'output' }
  end
  return value
end

local function call(request)
  local values, errors, failed = {}, {}, false
  for i, row in ipairs(request.rows) do
    local ok, value, err = pcall(call_row, row)
    if not ok then value, err = nil, { type = 'DriverError', message = tostring(value) } end
    if err then
      values[i] = NULL
      errors[tostring(i - 1)] = err
      failed = true
    else
      values[i] = value
    end
  end
  local response = { id = request.id, values = values }
  if failed then response.errors = errors end
  return response
end

send({ ready = 1, protocol = 1, version = _VERSION })
while true do
  local line = stdin:read('l') -- buffered: the bootstrap read from the same io.stdin
  if not line then break end
  local request = parse(line)
  if request.op == 'exit' then break end
  if request.op == 'load' then send(load_fn(request))
  elseif request.op == 'call' then send(call(request))
  else send({ id = request.id, error = { type = 'ProtocolError', message = 'unknown op ' .. tostring(request.op) } }) end
end
os.exit(0, true)
