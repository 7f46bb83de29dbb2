# @improv/extfn-julia driver, protocol v1 (docs/protocol.md). Base only: the
# JSON reader and writer for the protocol's frames are here. Dates (for
# datetime values) and Random (to reset the seed per row) are standard
# libraries in Julia's system image; they are used when present.
#
# The bootstrap includes this file into a fresh module and calls `main()`.
#
# Decisions (see README.md):
# - number: Float64, NaN and ±Inf kept; any Real result (not Bool) converts.
# - enum: Int (Int64 holds every u32); any Integer result (not Bool) in range.
# - text: String; NUL and lone surrogates are kept and come back unchanged.
# - datetime: Dates.DateTime in UTC, which holds milliseconds: digits below
#   the millisecond are dropped (truncated) on the way in.
# - The body is parsed once at `load` and compiled once as the body of a
#   function of `args`; each row is a call of that function, so `args` and
#   `result` are fresh locals per row and text values are data, never code.
#   A body that needs top-level forms (`using`, `struct`, `const`, `macro`…)
#   runs instead in a fresh anonymous module per row, compiled per row.

const DATES = try
    Base.require(Base.PkgId(Base.UUID("ade2ca70-3891-5945-98fb-dc099432e06a"), "Dates"))
catch
    nothing
end
const RANDOM = try
    Base.require(Base.PkgId(Base.UUID("9a3f8284-a2c9-5f02-9a11-845980a1fd5c"), "Random"))
catch
    nothing
end

# ---- JSON reading ----------------------------------------------------------------

mutable struct JsonReader
    s::Vector{UInt8}
    i::Int
end

json_fail(r::JsonReader, what) = error("malformed frame at byte $(r.i): $what")

function skip_space!(r::JsonReader)
    while r.i <= length(r.s) && r.s[r.i] in (0x20, 0x09, 0x0a, 0x0d)
        r.i += 1
    end
end

function read_value!(r::JsonReader)
    skip_space!(r)
    r.i > length(r.s) && json_fail(r, "unexpected end")
    c = r.s[r.i]
    if c == UInt8('{')
        r.i += 1
        out = Dict{String,Any}()
        skip_space!(r)
        if r.s[r.i] == UInt8('}')
            r.i += 1
            return out
        end
        while true
            skip_space!(r)
            key = read_string!(r)
            skip_space!(r)
            r.s[r.i] == UInt8(':') || json_fail(r, "expected :")
            r.i += 1
            out[key] = read_value!(r)
            skip_space!(r)
            c = r.s[r.i]
            r.i += 1
            c == UInt8('}') && return out
            c == UInt8(',') || json_fail(r, "expected , or }")
        end
    elseif c == UInt8('[')
        r.i += 1
        out = Any[]
        skip_space!(r)
        if r.s[r.i] == UInt8(']')
            r.i += 1
            return out
        end
        while true
            push!(out, read_value!(r))
            skip_space!(r)
            c = r.s[r.i]
            r.i += 1
            c == UInt8(']') && return out
            c == UInt8(',') || json_fail(r, "expected , or ]")
        end
    elseif c == UInt8('"')
        return read_string!(r)
    elseif c == UInt8('t')
        r.i += 4
        return true
    elseif c == UInt8('f')
        r.i += 5
        return false
    elseif c == UInt8('n')
        r.i += 4
        return nothing
    else
        start = r.i
        while r.i <= length(r.s) && r.s[r.i] in b"+-0123456789.eE"
            r.i += 1
        end
        start == r.i && json_fail(r, "unexpected character")
        # parse(Float64) is correctly rounded: every double comes back exactly.
        return parse(Float64, String(r.s[start:r.i-1]))
    end
end

hexvalue(r::JsonReader, at) = parse(UInt32, String(r.s[at:at+3]); base = 16)

# Escapes become the characters they name; \uD83D\uDE00 pairs join into one
# character, and a lone surrogate is kept as the (invalid) Char it is, so it
# goes back out as the same escape.
function read_string!(r::JsonReader)
    r.s[r.i] == UInt8('"') || json_fail(r, "expected a string")
    r.i += 1
    out = IOBuffer()
    while true
        r.i > length(r.s) && json_fail(r, "unterminated string")
        c = r.s[r.i]
        if c == UInt8('"')
            r.i += 1
            return String(take!(out))
        elseif c == UInt8('\\')
            e = r.s[r.i+1]
            if e == UInt8('u')
                code = hexvalue(r, r.i + 2)
                r.i += 6
                if 0xD800 <= code <= 0xDBFF && r.i + 5 <= length(r.s) && r.s[r.i] == UInt8('\\') &&
                   r.s[r.i+1] == UInt8('u')
                    low = hexvalue(r, r.i + 2)
                    if 0xDC00 <= low <= 0xDFFF
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                        r.i += 6
                    end
                end
                print(out, Char(code))
            else
                write(out, e == UInt8('n') ? 0x0a : e == UInt8('t') ? 0x09 : e == UInt8('r') ? 0x0d :
                           e == UInt8('b') ? 0x08 : e == UInt8('f') ? 0x0c : e)
                r.i += 2
            end
        else
            write(out, c)
            r.i += 1
        end
    end
end

parse_json(line::AbstractString) = read_value!(JsonReader(Vector{UInt8}(codeunits(line)), 1))

# ---- JSON writing ----------------------------------------------------------------

function write_json_string(io::IO, s::AbstractString)
    write(io, '"')
    for c in s
        if c == '"'
            write(io, "\\\"")
        elseif c == '\\'
            write(io, "\\\\")
        elseif c < ' '
            write(io, "\\u", string(UInt32(c); base = 16, pad = 4))
        elseif isvalid(c)
            write(io, c)
        elseif !Base.ismalformed(c) && 0xD800 <= codepoint(c) <= 0xDFFF
            write(io, "\\u", string(codepoint(c); base = 16, pad = 4))
        else
            throw(ResultError("text", "a string that is not valid UTF-8"))
        end
    end
    write(io, '"')
end

function write_json_number(io::IO, x::Float64)
    if isnan(x)
        write(io, "\"NaN\"")
    elseif isinf(x)
        write(io, x > 0 ? "\"Infinity\"" : "\"-Infinity\"")
    elseif iszero(x) && signbit(x)
        write(io, "\"-0\"")
    else
        # Julia prints the shortest decimal that reads back to the same double.
        print(io, x)
    end
end

json_text(s::AbstractString) = sprint(write_json_string, s)

# ---- values: wire -> Julia ---------------------------------------------------------

const SPECIAL_NUMBERS = Dict("NaN" => NaN, "Infinity" => Inf, "-Infinity" => -Inf, "-0" => -0.0)

struct ArgumentProblem <: Exception
    message::String
end

function instant_from_wire(s::AbstractString)
    DATES === nothing && throw(ArgumentProblem("datetime needs the Dates standard library, which this Julia lacks"))
    m = match(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?Z$", s)
    m === nothing && throw(ArgumentProblem("datetime $(repr(s)) is not an ISO-8601 UTC instant"))
    digits = m.captures[7] === nothing ? "0" : rpad(m.captures[7], 3, '0')[1:3]
    fields = parse.(Int, m.captures[1:6])
    return DATES.DateTime(fields..., parse(Int, digits))
end

function from_wire(type::String, x)
    if type == "number"
        x isa Float64 && return x
        x isa String && haskey(SPECIAL_NUMBERS, x) && return SPECIAL_NUMBERS[x]
    elseif type == "boolean"
        x isa Bool && return x
    elseif type == "text"
        x isa String && return x
    elseif type == "datetime"
        x isa String && return instant_from_wire(x)
    elseif type == "enum"
        x isa Float64 && isinteger(x) && return Int(x)
    end
    throw(ArgumentProblem("$type argument cannot be $(repr(x))"))
end

# ---- values: Julia -> wire ---------------------------------------------------------

struct ResultError <: Exception
    expected::String
    got::String
end

function describe(x)
    shown = try
        repr(x)
    catch
        "?"
    end
    length(shown) > 40 && (shown = first(shown, 40) * "…")
    return "$(typeof(x)) $shown"
end

result_error(expected, x) = ResultError(expected, describe(x))

function write_result(io::IO, type::String, x)
    if type == "number"
        (x isa Real && !(x isa Bool)) || throw(result_error("number", x))
        write_json_number(io, Float64(x))
    elseif type == "boolean"
        x isa Bool || throw(result_error("boolean", x))
        write(io, x ? "true" : "false")
    elseif type == "text"
        x isa AbstractString || throw(result_error("text", x))
        write_json_string(io, x)
    elseif type == "datetime"
        DATES !== nothing && x isa DATES.Date && (x = DATES.DateTime(x))
        (DATES !== nothing && x isa DATES.DateTime) || throw(result_error("datetime", x))
        1 <= DATES.year(x) <= 9999 || throw(ResultError("datetime", "$(describe(x)) (outside the years 0001-9999)"))
        ms = DATES.millisecond(x)
        print(io, '"', lpad(DATES.year(x), 4, '0'), '-', lpad(DATES.month(x), 2, '0'), '-', lpad(DATES.day(x), 2, '0'),
              'T', lpad(DATES.hour(x), 2, '0'), ':', lpad(DATES.minute(x), 2, '0'), ':', lpad(DATES.second(x), 2, '0'),
              ms == 0 ? "" : "." * lpad(ms, 3, '0'), "Z\"")
    elseif type == "enum"
        (x isa Integer && !(x isa Bool) && 0 <= x <= 4294967295) || throw(ResultError("enum", describe(x) *
            (x isa Integer ? " (an enum is an integer in [0, 4294967295])" : "")))
        print(io, Int(x))
    end
end

# ---- the loaded function -----------------------------------------------------------

const TOP_LEVEL_ONLY = (:using, :import, :export, :public, :struct, :abstract, :primitive, :module, :macro, :const)

mutable struct Loaded
    name::String
    argtypes::Vector{String}
    returntype::String
    body::Expr                  # the parsed body, Expr(:toplevel, …)
    call::Union{Function,Nothing}  # compiled once: function mode
    maxoutput::Int
    vectorized::Bool               # the body takes whole columns (Vectors)
end

const LOADED = Ref{Union{Loaded,Nothing}}(nothing)

struct NoResult <: Exception end

function load!(request)
    fn = request["fn"]
    body = fn["body"]::String
    ex = Meta.parseall(body; filename = "body")
    for part in ex.args
        if Meta.isexpr(part, (:error, :incomplete))
            detail = part.args[1]
            throw(ArgumentProblem(detail isa AbstractString ? detail : sprint(showerror, detail)))
        end
    end
    toplevel = any(part -> part isa Expr && part.head in TOP_LEVEL_ONLY, ex.args)
    call = nothing
    if !toplevel
        # function (args) local result; <body>; result end — built as an
        # expression, never by pasting text, so the body cannot close the
        # function early.
        m = Module(:ExtfnBody)
        lambda = Expr(:function, Expr(:tuple, :args),
                      Expr(:block, Expr(:local, :result), ex.args..., :result))
        call = Core.eval(m, lambda)
    end
    maxoutput = Int(get(request, "maxOutputBytes", 1048576))
    vectorized = get(fn, "vectorized", false) === true
    if vectorized && isempty(fn["argTypes"])
        throw(ArgumentProblem("a vectorized function needs at least one argument (its columns tell the body how many rows there are)"))
    end
    LOADED[] = Loaded(String(get(fn, "name", "f")), String.(fn["argTypes"]), String(fn["returnType"]), ex, call, maxoutput, vectorized)
end

function run_body(f::Loaded, args::Vector{Any})
    if f.call !== nothing
        try
            return Base.invokelatest(f.call, args)
        catch e
            # `result` never assigned: the local is undefined at the end.
            e isa UndefVarError && e.var === :result && throw(NoResult())
            rethrow()
        end
    end
    m = Module(:ExtfnRow)
    Core.eval(m, Expr(:const, Expr(:(=), :args, args)))   # a value, not text
    Core.eval(m, f.body)
    isdefined(m, :result) || throw(NoResult())
    return getfield(m, :result)
end

# ---- output the body prints -----------------------------------------------------

# Frames go to a duplicate of the original fd 1; fd 1 itself (and Julia's
# `stdout`) is pointed at a temporary file, so `println` in a body and C-level
# writes never reach the protocol channel. The file's size after each row is
# that row's output, so a row past the cap can fail alone; after each request
# the captured text is forwarded to stderr and the file emptied.
const PROTO = Ref{IO}()
const CAPTURE = Ref{Union{IOStream,Nothing}}(nothing)
const CAPTURE_PATH = Ref("")
const FORWARD_LIMIT = 65536
# The process that took the protocol streams. A child the body forked
# (ccall(:fork)) whose copy of the body returns would answer the same request;
# it ends itself, without Julia's clean-up, before it writes anything
# (docs/protocol.md, "Forks").
const SERVING_PID = Ref{Int32}(0)

only_the_worker() = getpid() == SERVING_PID[] || ccall(:_exit, Cvoid, (Cint,), 0)

function setup_output!()
    SERVING_PID[] = getpid()
    fd = ccall(:dup, Cint, (Cint,), 1)
    fd < 0 && error("cannot duplicate stdout")
    PROTO[] = Base.fdio(fd, true)
    try
        CAPTURE_PATH[] = tempname()
        CAPTURE[] = open(CAPTURE_PATH[], "w+")
        redirect_stdout(CAPTURE[])
    catch
        CAPTURE[] = nothing
        redirect_stdout(stderr)
    end
end

function output_size()
    c = CAPTURE[]
    c === nothing && return 0
    flush(stdout)
    flush(c)
    return filesize(c)
end

function cut_output!(at::Integer)
    c = CAPTURE[]
    c === nothing && return
    truncate(c, at)
    seek(c, at)
end

function forward_output!()
    size = output_size()
    size == 0 && return
    bytes = open(CAPTURE_PATH[], "r") do f
        seek(f, max(0, size - FORWARD_LIMIT))
        read(f)
    end
    write(stderr, bytes)
    flush(stderr)
    cut_output!(0)
end

function frame(text::AbstractString)
    only_the_worker()
    write(PROTO[], text, '\n')
    flush(PROTO[])
end

# ---- rows -----------------------------------------------------------------------------

function error_json(type::String, message::AbstractString; traceback = nothing, limit = nothing, got = nothing)
    io = IOBuffer()
    write(io, "{\"type\":")
    write_json_string(io, type)
    write(io, ",\"message\":")
    write_json_string(io, message)
    traceback === nothing || (write(io, ",\"traceback\":"); write_json_string(io, traceback))
    got === nothing || (write(io, ",\"got\":"); write_json_string(io, got))
    limit === nothing || write(io, ",\"limit\":\"", limit, "\"")
    write(io, '}')
    return String(take!(io))
end

function row_error(e, bt)
    if e isa ResultError
        return error_json("ResultTypeError", "result expected $(e.expected), got $(e.got)"; got = e.got)
    elseif e isa NoResult
        return error_json("NameError", "the body did not set result")
    elseif e isa ArgumentProblem
        return error_json("ValueError", e.message)
    end
    type = string(nameof(typeof(e)))
    message = e isa ErrorException ? e.msg : sprint(showerror, e)
    traceback = sprint(showerror, e, bt)
    length(traceback) > 8192 && (traceback = first(traceback, 8192) * "…")
    return error_json(type, message; traceback = traceback)
end

"""
Runs the loaded body on each row: `args_of(k)` gives row k's arguments,
`produce(k, result)` stores its result in wire form (or throws, making it
that row's error), `failed(k)` marks a row that has none. Returns the
per-row errors as (0-based index => error JSON).
"""
function run_rows(f::Loaded, n::Int, args_of::Function, produce::Function, failed::Function)
    errors = Pair{Int,String}[]
    position = output_size()
    for k in 1:n
        problem = nothing
        try
            args = args_of(k)
            RANDOM === nothing || RANDOM.seed!(0)
            result = run_body(f, args)
            output_size() - position > f.maxoutput || produce(k, result)
        catch e
            problem = row_error(e, catch_backtrace())
        end
        if output_size() - position > f.maxoutput
            cut_output!(position)
            problem = error_json("OutputLimit", "output too large"; limit = "output")
        end
        if problem !== nothing
            push!(errors, k - 1 => problem)
            failed(k)
        end
        position = output_size()
    end
    return errors
end

"""
Runs a vectorized body on whole columns: `cell(k, j)` gives argument j of
row k, `produce(k, value)` stores row k's value in wire form (or throws,
making it that row's error), `failed(k)` marks a row that has none. The body
gets one Vector per argument and returns one Vector of the same length; a
`nothing` or `missing` in it is that row's error. If the body throws (or
prints past the cap), the rows are run again one by one on columns of
length one, so each failing row gets its own error and every other row its
value, as per-row calls would. A result that is not one Vector of the
rows' length fails them all.
"""
function run_vectorized(f::Loaded, rows::Vector{Int}, cell::Function, produce::Function, failed::Function)
    errors = Pair{Int,String}[]
    arity = length(f.argtypes)
    function attempt(at::Vector{Int})
        position = output_size()
        outcome = try
            args = Any[map(identity, Any[cell(k, j) for k in at]) for j in 1:arity]
            RANDOM === nothing || RANDOM.seed!(0)
            (:value, run_body(f, args))
        catch e
            (:rerun, row_error(e, catch_backtrace()))
        end
        if output_size() - position > f.maxoutput
            cut_output!(position)
            return (:rerun, error_json("OutputLimit", "output too large"; limit = "output"))
        end
        outcome[1] === :rerun && return outcome
        r = outcome[2]
        m = length(at)
        if !(r isa AbstractVector)
            got = describe(r)
            return (:chunk, error_json("ResultTypeError", "a vectorized body returns one vector of $m values, got $got"; got = got))
        end
        if length(r) != m
            return (:chunk, error_json("ResultTypeError", "a vectorized body returns one value per row: $m rows, got $(length(r)) values";
                                       got = "a vector of $(length(r)) values"))
        end
        return (:value, r)
    end
    function place(at::Vector{Int}, outcome)
        if outcome[1] !== :value
            for k in at
                push!(errors, k - 1 => outcome[2])
                failed(k)
            end
            return
        end
        for (i, k) in enumerate(at)
            value = outcome[2][i]
            try
                (value === nothing || value === missing) &&
                    throw(ResultError(f.returntype, "$(repr(value)) (a missing value in the vectorized result)"))
                produce(k, value)
            catch e
                push!(errors, k - 1 => row_error(e, catch_backtrace()))
                failed(k)
            end
        end
    end
    isempty(rows) && return errors
    whole = attempt(rows)
    if whole[1] === :rerun && length(rows) > 1
        cut_output!(0)  # each row prints again on its own
        for k in rows
            place([k], attempt([k]))
        end
    else
        place(rows, whole)
    end
    return errors
end

function errors_json(errors)
    isempty(errors) && return "{}"
    return "{" * join(("\"$k\":$v" for (k, v) in errors), ",") * "}"
end

function call_json(f::Loaded, id, rows::Vector{Any})
    n = length(rows)
    parts = fill("null", n)
    args_of(k) = Any[from_wire(f.argtypes[j], rows[k][j]) for j in 1:length(f.argtypes)]
    produce(k, result) = (parts[k] = sprint(write_result, f.returntype, result))
    failed(k) = (parts[k] = "null")
    if f.vectorized
        # Arguments are read per row: a bad one is that row's error, the rest go on as columns.
        converted = Vector{Any}(undef, n)
        errors = Pair{Int,String}[]
        good = Int[]
        for k in 1:n
            try
                converted[k] = args_of(k)
                push!(good, k)
            catch e
                push!(errors, k - 1 => row_error(e, catch_backtrace()))
            end
        end
        append!(errors, run_vectorized(f, good, (k, j) -> converted[k][j], produce, failed))
    else
        errors = run_rows(f, n, args_of, produce, failed)
    end
    forward_output!()
    frame("{\"id\":$id,\"values\":[" * join(parts, ",") * "],\"errors\":" * errors_json(errors) * "}")
end

function call_f64(f::Loaded, id, n::Int, payload::Vector{UInt8})
    arity = length(f.argtypes)
    columns = ltoh.(reinterpret(Float64, payload))
    results = fill(NaN, n)
    args_of(k) = Any[columns[(j-1)*n+k] for j in 1:arity]
    function produce(k, result)
        (result isa Real && !(result isa Bool)) || throw(result_error("number", result))
        results[k] = Float64(result)
    end
    failed(k) = (results[k] = NaN)
    errors = f.vectorized ? run_vectorized(f, collect(1:n), (k, j) -> columns[(j-1)*n+k], produce, failed) :
        run_rows(f, n, args_of, produce, failed)
    forward_output!()
    only_the_worker()
    write(PROTO[], "{\"id\":$id,\"rows\":$n,\"bytes\":$(8n),\"errors\":" * errors_json(errors) * "}\n")
    write(PROTO[], htol.(results))
    flush(PROTO[])
end

# ---- requests ---------------------------------------------------------------------------

id_text(request) = (id = get(request, "id", nothing); id isa Float64 ? string(Int(id)) : "null")

function serve()
    while !eof(stdin)
        line = readline(stdin)
        isempty(line) && continue
        request = try
            parse_json(line)
        catch e
            frame("{\"id\":null,\"error\":" * error_json("ProtocolError", sprint(showerror, e)) * "}")
            continue
        end
        op = get(request, "op", nothing)
        id = id_text(request)
        payload = haskey(request, "bytes") ? read!(stdin, Vector{UInt8}(undef, Int(request["bytes"]))) : nothing
        if op == "exit"
            break
        elseif op == "load"
            try
                load!(request)
                frame("{\"id\":$id,\"ok\":true}")
            catch e
                message = e isa ArgumentProblem ? e.message : sprint(showerror, e)
                frame("{\"id\":$id,\"error\":" * error_json("SyntaxError", message) * "}")
            end
        elseif LOADED[] === nothing && op in ("call", "callf64")
            frame("{\"id\":$id,\"error\":" * error_json("ProtocolError", "call before load") * "}")
        elseif op == "call"
            call_json(LOADED[], id, request["rows"])
        elseif op == "callf64"
            call_f64(LOADED[], id, Int(request["rows"]), payload)
        else
            frame("{\"id\":$id,\"error\":" * error_json("ProtocolError", "unknown op $(repr(op))") * "}")
        end
    end
end

# Compiles the reader and writer before `ready`, so the first request does
# not pay for it.
function warm_up()
    parse_json("{\"op\":\"call\",\"id\":1,\"rows\":[[1.5,\"a\\\"\\u00e9\",true,null,\"NaN\"]]}")
    sprint(write_json_string, "a\"\\\n😀")
    sprint(write_json_number, 0.1)
    error_json("E", "m"; traceback = "t")
end

function main()
    setup_output!()
    warm_up()
    frame("{\"ready\":1,\"protocol\":1,\"version\":" * json_text(string(VERSION)) * "}")
    serve()
    c = CAPTURE[]
    if c !== nothing
        close(c)
        rm(CAPTURE_PATH[]; force = true)
    end
    exit(0)
end
