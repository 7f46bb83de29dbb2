# @improv/extfn-r driver, protocol v1 (docs/protocol.md). Base R only: no
# jsonlite, so the JSON reader and writer for the protocol's frames are here.
#
# The bootstrap evaluates this file to a function of the stdin connection,
# in an environment whose parent is baseenv(): the driver never looks names
# up in the global environment, so a body that redefines `cat` or `sprintf`
# there cannot change how frames are read or written.
#
# Decisions (see README.md):
# - number: double. NaN and +-Inf are kept; R's NA (a missing value, not a
#   number) returned as a result is that row's error. Numbers are read with
#   C's correctly rounded strtod (through unserialize's ASCII format) because
#   as.numeric is off by one ulp for about 1 in 10 000 decimal strings, and
#   written with %.17g, which reads back to the same double.
# - enum: integer when it fits R's 32-bit integer, else a whole double.
# - text: UTF-8 character. R strings cannot hold NUL: a text argument with
#   NUL is that row's error, before the body runs.
# - datetime: POSIXct in UTC; R keeps about a microsecond of precision near
#   today (less far from 1970), so results are rounded to what the double
#   holds, at most six fraction digits.
#
# The definitions below live in a hashed environment, not in the function's
# own frame: R searches a closure's frame binding by binding, and the row
# loop looks up driver names (genv, seed, code, ...) several times a row,
# which in a frame of some 150 bindings costs more than the row itself.
#
# `precompiled`: byte-compiled copies of the hot functions (hot_functions),
# made by the build for the worker's R version (src/driver-program.ts), or
# NULL. They come with the (hashed) environment they were compiled in, and
# the driver runs in that one: R drops a closure's bytecode when its
# environment is replaced.
function(con, precompiled = NULL) eval(
  envir = list2env(
    list(con = con, precompiled = precompiled),
    if (is.null(precompiled)) new.env(parent = baseenv()) else environment(precompiled[[1L]])
  ),
  quote({
  genv <- globalenv()
  err <- stderr()
  # Every frame goes through one binary connection on the process's own fd 1,
  # so callf64 answers can carry raw f64. R's stdout() is a text connection;
  # a binary one opens only where fd 1 is a real pipe (the runner asks the
  # sandbox for one: stdoutPipe), not on the socket Node gives by default
  # (ENXIO). Without it, frames are written as text and callf64 and callcols
  # answer with JSON values, which the runner reads as well.
  out <- tryCatch(
    suppressWarnings(file("/proc/self/fd/1", "wb", raw = TRUE)),
    error = function(e) NULL
  )
  binary <- !is.null(out)
  if (!binary) out <- stdout()

  # The file the host shares with this worker (docs/protocol.md, "Shared
  # file"), reopened read-write: a callf64 request then says where its
  # columns are in it and where the results go, instead of both crossing the
  # pipes. Only with a binary stdout (the answer's header still goes there).
  shared_fd <- Sys.getenv("IMPROV_EXTFN_SHARED_FD", "")
  Sys.unsetenv("IMPROV_EXTFN_SHARED_FD")
  shared <- if (binary && grepl("^[0-9]+$", shared_fd)) {
    tryCatch(
      suppressWarnings(file(paste0("/proc/self/fd/", shared_fd), "r+b", raw = TRUE)),
      error = function(e) NULL
    )
  }

  # Libraries the host chose (r({ libraries: [...] })), bound read-only by the
  # sandbox: searched before R's own, without the site libraries. Unset means
  # R's default (site libraries included).
  libs <- Sys.getenv("IMPROV_EXTFN_R_LIBS", NA)
  if (!is.na(libs)) {
    .libPaths(if (nzchar(libs)) strsplit(libs, ":", fixed = TRUE)[[1L]] else character(0), include.site = FALSE)
  }

  # A process the body forked (parallel's mcfork()) that came back into the
  # driver, its copy of the body done, ends before it writes a result: the
  # worker's own answer is the one the host gets, not whichever came first
  # (the second would also fail the worker as a frame nobody asked for).
  # parallel's mcexit() is _exit(): R's own exit would remove the temporary
  # directory the child shares with the worker.
  serving_pid <- Sys.getpid()
  only_the_worker <- function() {
    if (Sys.getpid() == serving_pid) return(invisible())
    pending <<- NULL # so the exit finalizer (session_gone) answers nothing either
    if (isNamespaceLoaded("parallel")) get("mcexit", envir = asNamespace("parallel"))(0L)
    .Internal(quit("no", 0L, FALSE))
  }

  # payload: f64 values, or a list of parts (doubles as f64, integers as
  # 32-bit, raw as is), written one after another.
  frame <- function(text, payload = NULL) {
    only_the_worker()
    writeLines(text, out, useBytes = TRUE)
    if (is.double(payload)) writeBin(payload, out, size = 8L, endian = "little")
    for (part in if (is.list(payload)) payload) {
      if (is.raw(part)) writeBin(part, out)
      else writeBin(part, out, size = if (is.double(part)) 8L else 4L, endian = "little")
    }
    flush(out)
  }

  # ---- JSON reading ---------------------------------------------------------

  # One regular expression splits a frame into tokens; frames are compact
  # JSON written by the JS side, so whitespace never needs to be kept.
  token_re <- paste0(
    '"[^"\\\\]*(?:\\\\.[^"\\\\]*)*"',
    "|-?[0-9]+(?:\\.[0-9]+)?(?:[eE][-+]?[0-9]+)?",
    "|true|false|null|[\\[\\]{},:]"
  )

  # Byte positions throughout: substring() on a "bytes" string is O(1) per
  # token, where on a UTF-8 string it would walk from the start each time.
  tokenize <- function(line) {
    Encoding(line) <- "bytes"
    m <- gregexpr(token_re, line, perl = TRUE, useBytes = TRUE)[[1L]]
    if (m[1L] == -1L) stop("empty frame")
    start <- as.integer(m)
    substring(line, start, start + attr(m, "match.length") - 1L)
  }

  # Exact decimal -> double: the ASCII serialization format is read with C's
  # sscanf("%lg"), which is correctly rounded (R's own parser is not).
  parse_numbers <- function(s) {
    if (!length(s)) return(numeric(0))
    # Integers of up to 15 digits are exact through as.numeric (no scaling
    # by a power of ten), and much cheaper for a one-row request.
    if (all(grepl("^-?[0-9]{1,15}$", s, perl = TRUE))) return(as.numeric(s))
    s[s == "Infinity"] <- "Inf"
    s[s == "-Infinity"] <- "-Inf"
    text <- paste0("A\n2\n0\n0\n14\n", length(s), "\n", paste(s, collapse = "\n"), "\n")
    unserialize(charToRaw(text))
  }

  utf8_raw <- function(code) charToRaw(enc2utf8(intToUtf8(code)))

  simple_escapes <- c(
    '"' = 0x22, "\\" = 0x5c, "/" = 0x2f, b = 0x08, f = 0x0c, n = 0x0a, r = 0x0d, t = 0x09
  )

  # One JSON string body (quotes removed, "bytes" encoding) with escapes.
  unescape <- function(s) {
    m <- gregexpr(
      "\\\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\\\u[dD][c-fC-F][0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.)",
      s, perl = TRUE, useBytes = TRUE
    )[[1L]]
    start <- as.integer(m)
    end <- start + attr(m, "match.length") - 1L
    escapes <- substring(s, start, end)
    bytes <- charToRaw(s)
    parts <- vector("list", 2L * length(start) + 1L)
    previous <- 1L
    for (j in seq_along(start)) {
      e <- escapes[j]
      kind <- substr(e, 2L, 2L)
      piece <- if (kind == "u") {
        code <- strtoi(substr(e, 3L, 6L), 16L)
        if (nchar(e, "bytes") == 12L) {
          low <- strtoi(substr(e, 9L, 12L), 16L)
          code <- 0x10000L + (code - 0xD800L) * 1024L + (low - 0xDC00L)
        }
        if (code == 0L) stop("contains a NUL character, which R strings cannot hold")
        if (code >= 0xD800L && code <= 0xDFFFL) stop("contains a lone UTF-16 surrogate, which is not Unicode")
        utf8_raw(code)
      } else if (!is.na(simple_escapes[kind])) {
        as.raw(simple_escapes[[kind]])
      } else {
        stop("has an invalid JSON escape")
      }
      if (start[j] > previous) parts[[2L * j - 1L]] <- bytes[previous:(start[j] - 1L)]
      parts[[2L * j]] <- piece
      previous <- end[j] + 1L
    }
    if (previous <= length(bytes)) parts[[length(parts)]] <- bytes[previous:length(bytes)]
    rawToChar(unlist(parts))
  }

  # JSON string tokens -> UTF-8 strings; a string that cannot be an R
  # string gets NA and its reason in attr "problems".
  decode_strings <- function(tokens) {
    s <- substr(tokens, 2L, nchar(tokens, "bytes") - 1L)
    problems <- rep(NA_character_, length(s))
    escaped <- which(grepl("\\", s, fixed = TRUE, useBytes = TRUE))
    for (k in escaped) {
      s[k] <- tryCatch(unescape(s[k]), error = function(e) {
        problems[k] <<- conditionMessage(e)
        NA_character_
      })
    }
    Encoding(s) <- "UTF-8"
    invalid <- !is.na(s) & !validUTF8(s)
    problems[invalid] <- "is not valid UTF-8"
    s[invalid] <- NA_character_
    attr(s, "problems") <- problems
    s
  }

  decode_string <- function(token) {
    s <- decode_strings(token)
    if (is.na(s)) stop(paste("a frame string", attr(s, "problems")))
    as.vector(s)
  }

  # A general reader for small frames (load, exit, a callcols header):
  # objects become named lists, arrays lists, numbers doubles. With
  # raw_strings, string values stay JSON tokens (a callcols header's cells,
  # read later as call arguments are, so a bad one is its row's error).
  read_json <- function(tokens, raw_strings = FALSE) {
    pos <- 1L
    value <- function() {
      t <- tokens[pos]
      pos <<- pos + 1L
      first <- substr(t, 1L, 1L)
      if (first == "{") {
        out <- list()
        if (tokens[pos] == "}") {
          pos <<- pos + 1L
          return(out)
        }
        repeat {
          key <- decode_string(tokens[pos])
          pos <<- pos + 2L
          out[key] <- list(value())
          t <- tokens[pos]
          pos <<- pos + 1L
          if (t == "}") return(out)
          if (t != ",") stop("malformed JSON object")
        }
      }
      if (first == "[") {
        out <- list()
        if (tokens[pos] == "]") {
          pos <<- pos + 1L
          return(out)
        }
        repeat {
          out[length(out) + 1L] <- list(value())
          t <- tokens[pos]
          pos <<- pos + 1L
          if (t == "]") return(out)
          if (t != ",") stop("malformed JSON array")
        }
      }
      if (first == '"') return(if (raw_strings) t else decode_string(t))
      if (t == "true") return(TRUE)
      if (t == "false") return(FALSE)
      if (t == "null") return(NULL)
      parse_numbers(t)
    }
    value()
  }

  # ---- values: wire -> R ------------------------------------------------------

  unquote <- function(tokens) {
    quoted <- substr(tokens, 1L, 1L) == '"'
    tokens[quoted] <- substr(tokens[quoted], 2L, nchar(tokens[quoted], "bytes") - 1L)
    tokens
  }

  # Howard Hinnant's days_from_civil / civil_from_days, vectorised: exact for
  # every proleptic Gregorian date, no time zone or locale involved.
  days_from_civil <- function(y, m, d) {
    y <- y - (m <= 2)
    era <- y %/% 400
    yoe <- y - era * 400
    doy <- (153 * ((m + 9) %% 12) + 2) %/% 5 + d - 1
    era * 146097 + yoe * 365 + yoe %/% 4 - yoe %/% 100 + doy - 719468
  }
  civil_from_days <- function(z) {
    z <- z + 719468
    era <- z %/% 146097
    doe <- z - era * 146097
    yoe <- (doe - doe %/% 1460 + doe %/% 36524 - doe %/% 146096) %/% 365
    doy <- doe - (365 * yoe + yoe %/% 4 - yoe %/% 100)
    mp <- (5 * doy + 2) %/% 153
    d <- doy - (153 * mp + 2) %/% 5 + 1
    m <- ifelse(mp < 10, mp + 3, mp - 9)
    list(y = yoe + era * 400 + (m <= 2), m = m, d = d)
  }

  # The first instant past the range (10000-01-01T00:00:00Z) and the range's start (0001-01-01).
  end_secs <- 253402300800
  start_secs <- -62135596800
  # The last double before the end: an instant in 9999-12-31T23:59:59.x that
  # a double cannot tell from the end (it rounds up) is kept below it.
  last_secs <- end_secs - 2^(floor(log2(end_secs)) - 52)

  instant_re <- "^([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(\\.[0-9]{1,9})?Z$"

  parse_instants <- function(s) {
    ok <- grepl(instant_re, s, perl = TRUE)
    field <- function(k) as.numeric(sub(instant_re, paste0("\\", k), s[ok], perl = TRUE))
    secs <- rep(NA_real_, length(s))
    if (any(ok)) {
      fraction <- sub(instant_re, "\\7", s[ok], perl = TRUE)
      fraction <- ifelse(nzchar(fraction), as.numeric(paste0("0", fraction)), 0)
      days <- days_from_civil(field(1L), field(2L), field(3L))
      secs[ok] <- days * 86400 + field(4L) * 3600 + field(5L) * 60 + field(6L) + fraction
      secs[ok & secs >= end_secs & substr(s, 1L, 4L) == "9999"] <- last_secs
    }
    secs
  }

  # Enum arguments as a body sees them: integer where R's int holds them, else a whole double.
  enum_values <- function(n) {
    small <- n <= .Machine$integer.max
    v <- as.list(n)
    v[small] <- as.list(as.integer(n[small]))
    v
  }

  # The argument column for one declared type: a vector (or a list, where
  # elements need a class or differ in storage) and per-value problems.
  read_column <- function(type, tokens) {
    problems <- rep(NA_character_, length(tokens))
    values <- switch(type,
      number = parse_numbers(unquote(tokens)),
      boolean = tokens == "true",
      text = {
        s <- decode_strings(tokens)
        problems <- attr(s, "problems")
        as.vector(s)
      },
      datetime = {
        secs <- parse_instants(unquote(tokens))
        problems[is.na(secs)] <- "is not an ISO-8601 UTC instant"
        lapply(secs, .POSIXct, tz = "UTC")
      },
      enum = enum_values(parse_numbers(unquote(tokens))),
      stop("unknown argument type ", type)
    )
    list(values = values, problems = problems)
  }

  # ---- values: R -> wire ------------------------------------------------------

  # Never fails, whatever came back: a function formats as several lines, and
  # a classed value may have methods (is.na, format, length) that misbehave;
  # then only its class or type is named.
  describe <- function(r) {
    if (is.null(r)) return("NULL")
    what <- if (is.object(r)) paste(class(r), collapse = "/") else typeof(r)
    tryCatch(
      {
        if (length(r) != 1L) return(paste0(what, " of length ", length(r)))
        if (is.atomic(r) && isTRUE(is.na(r)) && !isTRUE(is.nan(r))) return(paste0("NA (", what, ", R's missing value)"))
        shown <- tryCatch(paste(trimws(format(r)), collapse = " "), error = function(e) "?")
        if (is.character(r)) shown <- encodeString(r, quote = '"')
        if (!is.character(shown) || length(shown) != 1L || is.na(shown)) shown <- "?"
        if (nchar(shown, allowNA = TRUE) > 40L) shown <- paste0(substr(shown, 1L, 40L), "...")
        paste(what, shown)
      },
      error = function(e) what
    )
  }

  # ResultTypeError is what the JS side reads as "the result has the wrong
  # type": its message is shown as is, with `got` as a field.
  wrong <- function(expected, r, why = NULL) {
    got <- describe(r)
    message <- paste0("result expected ", expected, ", got ", got, if (!is.null(why)) paste0(" (", why, ")"))
    stop(structure(class = c("ResultTypeError", "error", "condition"), list(message = message, call = NULL, got = got)))
  }

  scalar_ok <- function(r) length(r) == 1L && !(is.na(r) && !is.nan(r))

  to_number <- function(r) {
    if (is.double(r) && length(r) == 1L && is.null(attributes(r)) && (!is.na(r) || is.nan(r))) return(r)
    if ((is.double(r) || is.integer(r)) && !is.object(r) && scalar_ok(r)) return(as.double(r))
    wrong("number", r)
  }
  to_boolean <- function(r) {
    if (is.logical(r) && !is.object(r) && scalar_ok(r)) return(r[[1L]])
    wrong("boolean", r)
  }
  to_text <- function(r) {
    if (is.character(r) && !is.object(r) && scalar_ok(r)) {
      s <- r[[1L]]
      # A native string is UTF-8 here (LC_ALL=C.UTF-8): enc2utf8 would write
      # its invalid bytes as "<ff>" escapes rather than fail.
      if (!validUTF8(s) && Encoding(s) == "unknown") wrong("text", r, "not valid UTF-8")
      s <- enc2utf8(s)
      if (!validUTF8(s)) wrong("text", r, "not valid UTF-8")
      # Past the output cap the row fails here, as in every driver: left to
      # the host's frame limit, it failed with its chunk, so whether it did
      # hung on which rows shared that chunk.
      if (nchar(s, type = "bytes") > max_output) too_large()
      return(s)
    }
    wrong("text", r)
  }
  too_large <- function() {
    stop(structure(class = c("OutputLimit", "error", "condition"), list(message = "output too large", call = NULL)))
  }
  # A result converter's condition as the row's error object.
  result_error <- function(e) {
    if (inherits(e, "OutputLimit")) return(json_error("OutputLimit", "output too large", limit = "output"))
    json_error("ResultTypeError", conditionMessage(e), got = e$got)
  }
  to_datetime <- function(r) {
    if (length(r) != 1L) wrong("datetime", r)
    secs <- if (inherits(r, "POSIXct")) unclass(r)[[1L]]
    else if (inherits(r, "POSIXlt")) unclass(as.POSIXct(r))[[1L]]
    else if (inherits(r, "Date")) floor(unclass(r)[[1L]]) * 86400 # its day, as R prints it
    else wrong("datetime", r)
    if (!is.double(secs) && !is.integer(secs) || !is.finite(secs)) wrong("datetime", r)
    # 0001-01-01 .. 9999-12-31: the documented range of every runner.
    if (secs < start_secs || secs >= end_secs) wrong("datetime", r, "outside the years 0001-9999")
    secs
  }
  to_enum <- function(r) {
    if ((is.double(r) || is.integer(r)) && !is.object(r) && scalar_ok(r)) {
      v <- as.double(r)
      if (is.finite(v) && v == round(v) && v >= 0 && v <= 4294967295) return(v)
      wrong("enum", r, "an enum is an integer in [0, 4294967295]")
    }
    wrong("enum", r)
  }
  converters <- list(number = to_number, boolean = to_boolean, text = to_text, datetime = to_datetime, enum = to_enum)
  storage <- list(number = "double", boolean = "logical", text = "character", datetime = "double", enum = "double")

  json_numbers <- function(x) {
    s <- sprintf("%.17g", x)
    s[is.nan(x)] <- '"NaN"'
    s[x == Inf] <- '"Infinity"'
    s[x == -Inf] <- '"-Infinity"'
    s[x == 0 & 1 / x < 0] <- '"-0"'
    s
  }

  control_chars <- vapply(1:31, function(k) rawToChar(as.raw(k)), "")

  json_strings <- function(x) {
    x <- gsub("\\", "\\\\", x, fixed = TRUE, useBytes = TRUE)
    x <- gsub('"', '\\"', x, fixed = TRUE, useBytes = TRUE)
    has_control <- grepl("[\001-\037]", x, perl = TRUE, useBytes = TRUE)
    if (any(has_control)) {
      for (k in 1:31) {
        x[has_control] <- gsub(control_chars[k], sprintf("\\u%04x", k), x[has_control], fixed = TRUE, useBytes = TRUE)
      }
    }
    paste0('"', x, '"')
  }

  # POSIXct is a double count of seconds: about 0.24 us of precision near
  # 2025 but only about 15 us around the year 1. Each instant is written with
  # as many fraction digits (at most 6) as its double can hold, so an input
  # with that many digits comes back exactly.
  json_instants <- function(secs) {
    p <- instant_parts(secs)
    whole <- p$whole
    units <- p$units
    digits <- p$digits
    days <- whole %/% 86400
    second_of_day <- whole - days * 86400
    date <- civil_from_days(days)
    fraction <- sprintf("%.0f", units)
    fraction <- paste0(strrep("0", digits - nchar(fraction)), fraction)
    fraction <- sub("0+$", "", fraction)
    fraction[nzchar(fraction)] <- paste0(".", fraction[nzchar(fraction)])
    sprintf(
      '"%04.0f-%02.0f-%02.0fT%02.0f:%02.0f:%02.0f%sZ"',
      date$y, date$m, date$d,
      second_of_day %/% 3600, (second_of_day %% 3600) %/% 60, second_of_day %% 60, fraction
    )
  }

  # Whole seconds and `units` of 10^-digits s: the instant json_instants
  # writes (and a callcols datetime column carries).
  instant_parts <- function(secs) {
    whole <- floor(secs)
    ulp <- 2^(floor(log2(pmax(abs(secs), 1))) - 52)
    digits <- pmax(0, pmin(6, ceiling(-log10(ulp)) - 1))
    scale <- 10^digits
    units <- round((secs - whole) * scale)
    carry <- units >= scale
    # Rounding up must not leave the range: the last second of 9999 keeps its fraction digits.
    last <- carry & whole + 1 >= end_secs
    units[last] <- scale[last] - 1
    carry <- carry & !last
    whole[carry] <- whole[carry] + 1
    units[carry] <- 0
    list(whole = whole, units = units, digits = digits)
  }

  write_values <- function(type, x) {
    switch(type,
      number = json_numbers(x),
      boolean = ifelse(x, "true", "false"),
      text = json_strings(x),
      datetime = json_instants(x),
      enum = sprintf("%.0f", x)
    )
  }

  json_error <- function(type, message, traceback = NULL, limit = NULL, got = NULL) {
    paste0(
      '{"type":', json_strings(enc2utf8(type)),
      ',"message":', json_strings(enc2utf8(message)),
      if (!is.null(got)) paste0(',"got":', json_strings(enc2utf8(got))),
      if (!is.null(traceback)) paste0(',"traceback":', json_strings(enc2utf8(traceback))),
      if (!is.null(limit)) paste0(',"limit":"', limit, '"'),
      "}"
    )
  }

  # ---- output the body prints -------------------------------------------------

  # The body's print()/cat() go to an anonymous temporary file through
  # sink(), never to the protocol channel; after each request the captured
  # text is forwarded to stderr. The file position after each row is that
  # row's output size, so a row past the cap fails alone. Without a writable
  # temporary directory, output goes to stderr uncounted.
  capture <- tryCatch(file("", "w+"), error = function(e) NULL)
  forward_limit <- 65536

  forward_output <- function() {
    if (is.null(capture)) return(invisible())
    size <- .Internal(seek(capture, NA_real_, 1L, 2L))
    if (size > 0) {
      seek(capture, max(0, size - forward_limit), rw = "read")
      lines <- readLines(capture, warn = FALSE)
      cat(lines, sep = "\n", file = err)
      cat("\n", file = err)
      flush(err)
      seek(capture, 0, rw = "write")
      truncate(capture)
    }
  }

  # ---- a body that ends R ---------------------------------------------------------

  # quit() or q() in a body would end the worker, and the host could only
  # report that the interpreter exited, as after a crash. Base's two are
  # replaced by functions that signal `extfnQuit`: a condition of no class a
  # body's own handlers catch (neither "error" nor "condition", so not
  # try(), tryCatch(error = ) or tryCatch(condition = )), which the row loops
  # take as that row's QuitError; R goes on, and the row's state is put back
  # as after any failed row. Outside a row (no handler) they quit as base's
  # do. So does tools::pskill() aimed at R's own process with a signal that
  # would end it (patched when the tools namespace loads), and
  # closeAllConnections(), which would close the driver's own connections
  # (the request stream, the protocol channel, the output capture). The
  # "abort" restart, which ends a non-interactive R, is the driver's own
  # while rows run (guard_abort). What still ends R (.Internal(quit()), a
  # connection closed one by one) is answered, where the request had one
  # row, by an exit finalizer (session_gone). The driver's own exits call
  # .Internal(quit()).
  quit_condition <- function(message, call = NULL) {
    structure(class = c("QuitError", "error", "condition"), list(message = message, call = call))
  }
  # What a body that ends R is told to do instead.
  quit_fix <- "a body must return a value (set result), or call stop() to fail its row"
  close_fix <- "a body must close only the connections it opened (close(con)), and return a value (set result) or call stop() to fail its row"
  body_ended <- function(call, message) {
    condition <- quit_condition(message, call)
    .Internal(.signalCondition(structure(class = "extfnQuit", list(condition = condition)), message, call))
  }
  session_ended <- function(call, what, instead) {
    body_ended(call, paste0(
      "the body ended the R session with ", what,
      ": a body must return a value (set result), not ", instead
    ))
  }
  replace_binding <- function(name, value, env) {
    locked <- bindingIsLocked(name, env)
    if (locked) unlockBinding(name, env)
    assign(name, value, envir = env)
    if (locked) lockBinding(name, env)
  }
  quit_as <- function(name) {
    force(name)
    function(save = "default", status = 0, runLast = TRUE) {
      session_ended(sys.call(), paste0(name, "()"), paste0("call ", name, "()"))
      .Internal(quit(save, status, runLast))
    }
  }
  replace_binding("quit", quit_as("quit"), baseenv())
  replace_binding("q", quit_as("q"), baseenv())
  close_all <- get("closeAllConnections", envir = baseenv())
  replace_binding("closeAllConnections", function() {
    body_ended(sys.call(), paste0(
      "the body closed the driver's connections with closeAllConnections(), which would end R: ",
      close_fix
    ))
    close_all()
  }, baseenv())
  # The "abort" restart (invokeRestart("abort")) jumps to R's top level,
  # which ends a non-interactive R. While rows run, the innermost "abort"
  # is this one: guard_abort(expr) returns list(value = expr), or list()
  # when the body invoked it (the frame's environment is the restart's exit).
  abort_restart <- structure(class = "restart", list(
    name = "abort", exit = NULL, handler = function(...) NULL,
    description = "", test = function(c) TRUE, interactive = FALSE
  ))
  guard_abort <- function(expr) {
    restart <- abort_restart
    restart$exit <- environment()
    .Internal(.addRestart(restart))
    list(value = expr)
  }
  aborted <- quit_condition(paste0(
    'the body jumped out of its call with invokeRestart("abort"), which would end R: ', quit_fix,
    ", not invoke the abort restart"
  ))

  # What ends R all the same (.Internal(quit()), a jump to the top level
  # past guard_abort, a driver connection the body closed by itself) runs
  # R's exit finalizers on the way out. While a request's rows run, the
  # driver notes its id and row count (`pending`, "in_rows" while the body
  # may run); when it had one row, the finalizer answers it with that row's
  # QuitError, so the caller reads what the body did instead of "the
  # interpreter exited". A request of several rows is left to the host,
  # which runs its rows again one per request (docs/protocol.md).
  pending <- NULL
  in_rows <- FALSE
  connection_ok <- function(x) is.null(x) || isTRUE(tryCatch(isOpen(x), error = function(e) FALSE))
  session_gone <- function(e) {
    p <- pending
    pending <<- NULL
    if (is.null(p) || p$rows != 1L) return(invisible())
    # con: the request stream
    closed <- !(connection_ok(con) && connection_ok(out) && connection_ok(capture) && connection_ok(shared))
    message <- if (closed) {
      paste0(
        "the body closed the driver's connections, which ends R: ",
        close_fix
      )
    } else if (in_rows && sys.nframe() > 2L) {
      paste0("the body ended the R session with .Internal(quit()): ", quit_fix, ", not end R")
    } else if (in_rows) {
      paste0("the body jumped out of its call to R's top level, which ends R: ", quit_fix)
    }
    if (is.null(message)) return(invisible())
    # the connection the frames went on, or a new one on the same pipe if the body closed it
    tryCatch(
      {
        while (.Internal(sink.number(TRUE)) > 0L) .Internal(sink(-1L, FALSE, FALSE, FALSE))
        to <- if (!connection_ok(out)) file("/proc/self/fd/1", "wb", raw = TRUE) else out
        writeLines(paste0('{"id":', p$id, ',"values":[null],"errors":{"0":', json_error("QuitError", message), "}}"), to, useBytes = TRUE)
        flush(to)
      },
      error = function(e) NULL
    )
    invisible()
  }
  reg.finalizer(environment(), session_gone, onexit = TRUE)
  # Signals (Linux numbers) that leave R running: none (0, a check), SIGINT
  # (an interrupt), and those that stop, continue or are ignored by default.
  signals_kept <- c(0L, 2L, 17L, 18L, 19L, 20L, 21L, 22L, 23L, 28L)
  patch_pskill <- function(ns) {
    original <- get("pskill", envir = ns)
    if (!is.function(original)) return(invisible())
    # evaluated where the original was (its default signal is tools' SIGTERM)
    wrapper <- function(pid, signal = SIGTERM) {
      own <- tryCatch(
        suppressWarnings(any(as.integer(pid) %in% c(0L, Sys.getpid())) && !all(as.integer(signal) %in% signals_kept)),
        error = function(e) FALSE
      )
      if (isTRUE(own)) session_ended(sys.call(), "tools::pskill() on its own process", "signal its own process")
      original(pid, signal)
    }
    here <- new.env(parent = ns)
    here$original <- original
    here$session_ended <- session_ended
    here$signals_kept <- signals_kept
    environment(wrapper) <- here
    replace_binding("pskill", wrapper, ns)
  }
  if (isNamespaceLoaded("tools")) {
    tryCatch(patch_pskill(asNamespace("tools")), error = function(e) NULL)
  } else {
    setHook(packageEvent("tools", "onLoad"), function(...) {
      tryCatch(patch_pskill(asNamespace("tools")), error = function(e) NULL)
    })
  }

  # ---- the loaded function ----------------------------------------------------

  fn <- NULL
  code <- NULL

  # R runs with its JIT off (R_ENABLE_JIT=0, set by the runner): the
  # compiler's first use costs a process about 50 ms of CPU, and compiling
  # the whole driver some 250 ms more, far more than the rows of most
  # batches would save. The build byte-compiles the driver when it can
  # (src/driver-program.ts): then only the body is left, compiled once the
  # worker's requests have taken `body_cpu` seconds of CPU: a trivial body
  # (some 100 000 rows by then) has cost about what the compiler's first
  # use costs more than compiled, a body with loops of its own a few times
  # that. Otherwise code is byte-compiled where
  # it runs often, once: the body and the row loop once a worker has run
  # `hot_rows` rows (the loop then costs a third of a row's time
  # interpreted), the per-request code once it has served `hot_requests`
  # requests.
  hot_rows <- 2000
  body_cpu <- 0.25
  cpu_seen <- NULL
  cpu_busy <- 0
  hot_requests <- 200
  rows_run <- 0
  requests_run <- 0
  hot <- FALSE
  hot_served <- FALSE
  # Functions the body defines stay interpreted when the body is compiled:
  # a compiled closure takes about four times the C stack per call (a body's
  # own recursion stops at some 600 calls where interpreted it goes 1650
  # deep), so a row that recursed fine in a fresh worker would fail once its
  # worker had compiled the body. The compiler's handler for `function`
  # declines (as it does for a body that may call browser()): the closure is
  # then made when the row runs, from the definition as written. Loops and
  # the rest of the body are compiled as before. An R whose compiler is
  # arranged otherwise leaves the body interpreted.
  compile_body <- function() {
    code <<- tryCatch(
      {
        handlers <- get("inlineHandlers", envir = asNamespace("compiler"), inherits = FALSE)
        entry <- get("function", envir = handlers, inherits = FALSE)
        declined <- entry
        declined$handler <- function(e, cb, cntxt) FALSE
        assign("function", declined, envir = handlers)
        on.exit(assign("function", entry, envir = handlers))
        suppressMessages(suppressWarnings(compiler::compile(code, genv)))
      },
      error = function(e) code
    )
  }
  compile_functions <- function(names) {
    here <- environment(warm_up)
    for (name in names) {
      f <- get(name, envir = here)
      if (typeof(.Internal(bodyCode(f))) == "bytecode") next
      compiled <- tryCatch(compiler::cmpfun(f), error = function(e) NULL)
      if (!is.null(compiled)) assign(name, compiled, envir = here)
    }
  }
  # Compiled at hot_rows (the first two) and hot_requests (the rest); what the build compiles.
  hot_functions <- c(
    "run_body", "run_rows", "run_vectorized", "column_out", "call_rows", "read_column", "parse_numbers",
    "respond_call", "respond_f64", "write_values", "json_numbers", "arguments", "row_values", "cols_in",
    "texts_in", "ns_to_secs", "secs_to_ns", "instant_parts", "cols_out", "respond_cols", "state_changed"
  )
  warm_up <- function(n) {
    rows_run <<- rows_run + n
    requests_run <<- requests_run + 1
    # CPU since the previous request: that request's work, mostly.
    cpu <- sum(proc.time()[1:2])
    if (!is.null(cpu_seen)) cpu_busy <<- cpu_busy + cpu - cpu_seen
    cpu_seen <<- cpu
    compiled <- typeof(.Internal(bodyCode(run_rows))) == "bytecode"
    if (!hot && (if (compiled) cpu_busy >= body_cpu else rows_run >= hot_rows)) {
      hot <<- TRUE
      compile_body()
      compile_functions(hot_functions[1:2])
    }
    if (!hot_served && requests_run >= hot_requests) {
      hot_served <<- TRUE
      compile_functions(hot_functions[-(1:2)])
    }
    # The compiler's namespace is the driver's, not a row's (see restore_state).
    state_namespaces <<- length(.Internal(getNamespaceRegistry()))
  }
  max_output <- 1048576
  seed <- NULL
  # Reset the RNG before each row only once a row has drawn (as the Python
  # driver does): until then the state before every row still is `seed`.
  rng_used <- FALSE
  # One environment for every row, where no row can see what another left in
  # it (see straight_line); NULL means a fresh environment per row.
  shared_env <- NULL
  not_set <- new.env()
  seed_name <- as.name(".Random.seed")
  # The search path between rows (set at load; see restore_globals).
  search_envs <- list()
  search_length <- 0L
  no_result <- structure(
    class = c("NameError", "error", "condition"),
    list(message = "the body did not set result", call = NULL)
  )

  # R starts with base alone (R_DEFAULT_PACKAGES=base, set by the runner):
  # attaching R's usual default packages costs every start about 70 ms. A
  # body that may use them gets them at load, attached in R's own order, so
  # it sees the search path plain Rscript gives: one that names anything
  # (a symbol, or a string that could name one) which base does not define
  # and the body does not assign itself, or that looks names up at run time.
  default_packages <- c("datasets", "utils", "grDevices", "graphics", "stats")
  looks_up_names <- c(
    "get", "get0", "mget", "exists", "match.fun", "do.call", "eval", "evalq", "parse",
    "str2lang", "str2expression", "dynGet"
  )

  needs_default_packages <- function(exprs) {
    symbols <- all.names(exprs)
    if (any(symbols %in% looks_up_names)) return(TRUE)
    strings <- character(0)
    locals <- c("args", "result")
    walk <- function(e) {
      if (is.character(e)) {
        strings <<- c(strings, e)
      } else if (is.call(e)) {
        head <- e[[1L]]
        if ((identical(head, as.name("<-")) || identical(head, as.name("=")) ||
             identical(head, as.name("<<-"))) && length(e) == 3L) {
          locals <<- c(locals, all.names(e[[2L]]))
        } else if (identical(head, as.name("for")) && is.name(e[[2L]])) {
          locals <<- c(locals, as.character(e[[2L]]))
        } else if (identical(head, as.name("function"))) {
          locals <<- c(locals, names(e[[2L]]))
        }
        for (k in seq_along(e)) if (!identical(e[[k]], quote(expr = ))) walk(e[[k]])
      }
    }
    for (e in as.list(exprs)) walk(e)
    strings <- strings[grepl("^[.A-Za-z][._A-Za-z0-9]*$", strings)]
    wanted <- setdiff(unique(c(symbols, strings)), locals)
    !all(vapply(wanted, exists, FALSE, envir = baseenv(), inherits = FALSE))
  }

  attach_default_packages <- function() {
    attached <- .Internal(search())
    for (p in default_packages) {
      if (!paste0("package:", p) %in% attached) {
        suppressPackageStartupMessages(library(p, character.only = TRUE))
      }
    }
  }

  load_fn <- function(request) {
    f <- request$fn
    if (!is.null(request$maxOutputBytes)) max_output <<- request$maxOutputBytes
    if (!is.null(f$maxOutputBytes)) max_output <<- f$maxOutputBytes
    # R's parser takes only \n as a line break: a body saved with Windows
    # (\r\n) or old Mac (\r) line ends parses as Python reads it, line for line.
    exprs <- parse(text = gsub("\r\n?", "\n", f$body), keep.source = FALSE, encoding = "UTF-8")
    # before compiling, so the compiler sees the search path the body runs with
    if (tryCatch(needs_default_packages(exprs), error = function(e) TRUE)) attach_default_packages()
    block <- as.call(c(as.name("{"), as.list(exprs)))
    code <<- block
    if (hot) compile_body()
    f$argTypes <- vapply(f$argTypes, as.character, "")
    if (!f$returnType %in% names(converters)) stop("unknown return type ", f$returnType)
    if (isTRUE(f$vectorized) && !length(f$argTypes)) {
      stop("function ", f$name, ": a vectorized function needs at least one argument (its columns tell the body how many rows there are)")
    }
    fn <<- f
    set.seed(0L)
    seed <<- get(".Random.seed", envir = genv)
    rng_used <<- FALSE
    search_envs <<- lapply(seq_along(.Internal(search())), as.environment)
    search_length <<- length(search_envs)
    restore_globals()
    state_take()
    shared_env <<- if (straight_line(exprs)) new.env(parent = genv) else NULL
  }

  # The calls a straight-line body may make and still share one environment
  # between rows: base functions that neither look at nor change the
  # environment they are called from, and call no function named by a string
  # or passed to them. Any other call (a library's function, eval, get,
  # dynGet, a formula, sapply and its FUN) gives the body a fresh environment
  # per row: a denylist missed ways (dynGet("x"), a formula's environment, a
  # library reading its caller's variables by name, as glue does).
  shareable_calls <- c(
    "(", "{", "if", "+", "-", "*", "/", "^", "%%", "%/%", "%in%", "==", "!=", "<", ">", "<=",
    ">=", "!", "&", "&&", "|", "||", "xor", "[", "[[", "$", ":", "c", "list", "length", "names",
    "unname", "sum", "prod", "min", "max", "pmin", "pmax", "range", "abs", "sign", "sqrt", "exp",
    "log", "log10", "log2", "log1p", "expm1", "sin", "cos", "tan", "asin", "acos", "atan", "atan2",
    "sinh", "cosh", "tanh", "floor", "ceiling", "trunc", "round", "signif", "choose", "factorial",
    "gamma", "lgamma", "beta", "mean", "median", "var", "sd", "quantile", "cumsum", "cumprod",
    "cummax", "cummin", "diff", "rev", "sort", "order", "unique", "which", "which.max", "which.min",
    "any", "all", "ifelse", "is.na", "is.nan", "is.finite", "is.infinite", "is.null", "isTRUE",
    "isFALSE", "identical", "is.numeric", "is.character", "is.logical", "seq", "seq_len",
    "seq_along", "rep", "head", "tail", "nchar", "substr", "substring", "toupper", "tolower",
    "trimws", "paste", "paste0", "sprintf", "format", "formatC", "sub", "gsub", "grepl", "regexpr",
    "startsWith", "endsWith", "strsplit", "chartr", "strtoi", "utf8ToInt", "intToUtf8",
    "as.numeric", "as.double", "as.integer", "as.character", "as.logical", "as.Date", "as.POSIXct",
    "unlist", "numeric", "character", "logical", "integer", "julian", "weekdays", "months",
    "difftime", "ISOdate", "ISOdatetime", "bitwAnd", "bitwOr", "bitwXor", "switch", "stop",
    "warning", "invisible"
  )

  # Whether `e` calls only shareable functions, each by its name, and reads
  # no function as a value (one passed on could look at the environment):
  # a name is a variable the body assigned before (`assigned`) or a global
  # that is not a function.
  shareable <- function(e, assigned) {
    if (is.name(e)) {
      name <- as.character(e)
      return(!nzchar(name) || name %in% assigned || !exists(name, envir = genv, mode = "function"))
    }
    if (!is.call(e)) return(TRUE)
    head <- e[[1L]]
    if (!is.name(head) || !(as.character(head) %in% shareable_calls)) return(FALSE)
    parts <- as.list(e)[-1L]
    if (identical(head, as.name("$"))) parts <- parts[1L] # x$name: `name` is a field, not a read
    for (k in seq_along(parts)) {
      if (identical(parts[[k]], quote(expr = ))) next # x[, 1]
      if (!shareable(parts[[k]], assigned)) return(FALSE)
    }
    TRUE
  }

  # Whether rows may share one environment without any row seeing what an
  # earlier one left: every top-level statement assigns a name (`x <- ...`),
  # `result` among them, from an expression that calls only shareable
  # functions and reads only `args`, names assigned by an earlier statement,
  # or globals that are not functions. A row then overwrites every name
  # before anything can read it, so a fresh environment could not change its
  # result.
  straight_line <- function(exprs) {
    assigned <- "args"
    for (e in as.list(exprs)) {
      if (!is.call(e) || !(identical(e[[1L]], as.name("<-")) || identical(e[[1L]], as.name("="))) ||
          length(e) != 3L || !is.name(e[[2L]])) return(FALSE)
      if (!shareable(e[[3L]], assigned)) return(FALSE)
      assigned <- c(assigned, as.character(e[[2L]]))
    }
    if (!"result" %in% assigned) return(FALSE)
    # A name read before the statement that assigns it would find the previous row's value.
    for (k in seq_along(exprs)) {
      later <- setdiff(vapply(as.list(exprs)[k:length(exprs)], function(e) as.character(e[[2L]]), ""), assigned[seq_len(k)])
      if (any(all.names(exprs[[k]][[3L]]) %in% later)) return(FALSE)
    }
    TRUE
  }

  # A row's own environment goes with the row, but `<<-`, assign(envir =
  # globalenv()), attach() and the like (however reached: eval(parse()),
  # get("assign"), sys.function()) write to places every row sees. Rather
  # than guess from the body's text, every row ends with a look at those
  # places, cheap enough for every row (under 1 us): between rows the
  # global environment holds exactly one binding, .Random.seed (the driver
  # keeps nothing there, and the caller resets its value), so a count of
  # one with .Random.seed bound means nothing was added, by any route; and
  # the search path has its length. Only when either changed does this put
  # them back: every other name in the global environment is removed, and
  # environments a row attached are detached, except packages (library()
  # attaches a locked package environment, which holds no row's values). If
  # the global environment cannot be restored (a body locked it), the
  # worker exits and is replaced rather than let the next row see this
  # row's values. The check, written out where rows end (a closure call
  # would double its cost):
  #   length(genv) != 1L || is.null(genv$.Random.seed) ||
  #     .Internal(bindingIsLocked(seed_name, genv)) ||
  #     length(.Internal(search())) != search_length
  restore_globals <- function() {
    added <- setdiff(.Internal(ls(genv, TRUE, FALSE)), ".Random.seed")
    if (length(added)) {
      gone <- tryCatch(
        {
          rm(list = added, envir = genv)
          TRUE
        },
        error = function(e) FALSE
      )
      if (!gone) {
        cat("the global environment cannot be restored after a row (locked?): the worker exits\n", file = err)
        pending <<- NULL
        .Internal(quit("no", 70L, FALSE))
      }
    }
    # A row may lock .Random.seed (lockBinding), which would fail every later
    # row's reset: unlocked, its value kept (whether the row drew is read from it).
    fixed <- tryCatch(
      {
        if (is.null(genv$.Random.seed)) genv$.Random.seed <- seed
        if (.Internal(bindingIsLocked(seed_name, genv))) .Internal(unlockBinding(seed_name, genv))
        TRUE
      },
      error = function(e) FALSE
    )
    if (!fixed) {
      cat("the global environment cannot be restored after a row (locked?): the worker exits\n", file = err)
      pending <<- NULL
      .Internal(quit("no", 70L, FALSE))
    }
    kept <- list()
    for (pos in rev(seq_along(.Internal(search())))) {
      env <- as.environment(pos)
      known <- any(vapply(search_envs, identical, FALSE, env))
      name <- attr(env, "name")
      package <- is.character(name) && startsWith(name, "package:") && environmentIsLocked(env)
      if (known || package) kept <- c(list(env), kept) else detach(pos = pos)
    }
    search_envs <<- kept
    search_length <<- length(kept)
    invisible()
  }

  # What else a row can leave behind for the rows after it, outside any
  # environment: options(), the working directory, environment variables
  # (Sys.setenv) and the locale. Taken at load (state_take); looked at where
  # the global environment is (after a block, then after every row once a
  # row changed something: state_careful), and put back when changed. A
  # look costs about 5 us, once per block of rows.
  state_options <- NULL
  state_wd <- NULL
  state_env <- NULL
  state_locale <- NULL
  state_categories <- c("LC_COLLATE", "LC_CTYPE", "LC_MONETARY", "LC_NUMERIC", "LC_TIME", "LC_MESSAGES")
  state_locales <- NULL
  state_namespaces <- 0L
  # .libPaths() keeps its directories in its own environment, not in options().
  lib_env <- environment(.libPaths)
  state_libs <- NULL
  state_careful <- FALSE
  # A copy of .Options' cells: options() changes the pairlist in place.
  state_take <- function() {
    state_options <<- as.pairlist(as.list(.Options))
    state_wd <<- .Internal(getwd())
    state_env <<- .Internal(Sys.getenv(character(), ""))
    state_locale <<- .Internal(Sys.getlocale(1L))
    state_locales <<- vapply(state_categories, Sys.getlocale, "")
    state_namespaces <<- length(.Internal(getNamespaceRegistry()))
    state_libs <<- lib_env$.lib.loc
  }
  state_changed <- function() {
    !identical(.Options, state_options) || !identical(.Internal(getwd()), state_wd) ||
      length(.Internal(getNamespaceRegistry())) != state_namespaces ||
      !identical(.Internal(Sys.getenv(character(), "")), state_env) ||
      !identical(.Internal(Sys.getlocale(1L)), state_locale) ||
      !identical(lib_env$.lib.loc, state_libs)
  }
  # Puts back what a row changed; TRUE when it had to. Options a package's
  # .onLoad set when a row loaded it stay (the package keeps working, as its
  # attachment stays); any other option a row added is removed and every
  # changed one restored. From the first change on, rows are checked one by one.
  restore_state <- function() {
    was <- as.list(state_options)
    now <- as.list(.Options)
    if (length(.Internal(getNamespaceRegistry())) != state_namespaces) {
      added <- setdiff(names(now), names(was))
      was[added] <- now[added]
    }
    reset <- list()
    for (name in setdiff(names(now), names(was))) reset[name] <- list(NULL)
    for (name in names(was)) if (!identical(now[[name]], was[[name]])) reset[name] <- list(was[[name]])
    if (length(reset)) tryCatch(options(reset), error = function(e) NULL)
    wd <- !identical(.Internal(getwd()), state_wd)
    if (wd) tryCatch(setwd(state_wd), error = function(e) NULL)
    env <- .Internal(Sys.getenv(character(), ""))
    locale <- !identical(.Internal(Sys.getlocale(1L)), state_locale)
    libs <- !identical(lib_env$.lib.loc, state_libs)
    if (libs) tryCatch(assign(".lib.loc", state_libs, envir = lib_env), error = function(e) NULL)
    changed <- length(reset) > 0L || wd || locale || libs || !identical(env, state_env)
    if (!identical(env, state_env)) {
      key <- function(kv) substr(kv, 1L, regexpr("=", kv, fixed = TRUE) - 1L)
      gone <- setdiff(key(env), key(state_env))
      if (length(gone)) Sys.unsetenv(gone)
      back <- setdiff(state_env, env)
      if (length(back)) {
        at <- regexpr("=", back, fixed = TRUE)
        do.call(Sys.setenv, structure(as.list(substring(back, at + 1L)), names = substr(back, 1L, at - 1L)))
      }
    }
    if (locale) {
      for (k in seq_along(state_categories)) {
        tryCatch(suppressWarnings(Sys.setlocale(state_categories[[k]], state_locales[[k]])), error = function(e) NULL)
      }
    }
    state_take()
    if (changed) state_careful <<- TRUE
    changed
  }

  # stop("x") is reported as R prints it, "Error: x"; other condition
  # classes (custom ones, ResultTypeError) keep their class name.
  error_text <- function(e) {
    message <- conditionMessage(e)
    type <- class(e)[[1L]]
    if (type == "simpleError") type <- "Error"
    call <- conditionCall(e)
    where <- if (!is.null(call) && !identical(call, quote(run_body(env)))) {
      paste0(" in ", paste(deparse(call, nlines = 1L), collapse = ""))
    } else {
      ""
    }
    list(type = type, message = message, traceback = paste0("Error", where, ": ", message))
  }

  # The body run in `env`: .Internal(eval()) skips the exported eval()'s
  # argument matching, a good part of a trivial row. A closure of its own,
  # so an error's call reads `run_body(env)`, which error_text leaves out.
  run_body <- function(env) .Internal(eval(code, env, NULL))

  # Rows are run in blocks of `block_rows`. What makes a row depend on the
  # rows before it (a draw from the RNG, a global left behind) and the output
  # cap are checked once per block, not after every row: when the block
  # drew, left something, or printed more than the cap in all, its rows run
  # again with every check after each row ("careful"), from the same start
  # (its output, values and errors dropped). A row's result is then what a
  # check after each row gives: rows are deterministic (the seed, a fresh
  # environment, the globals restored). Plain R pays none of these checks;
  # a block of rows pays them once (a seek() alone costs more than a row).
  block_rows <- 128L
  # Set once a row left something in the global environment or the search
  # path: from then on every row is checked (as rng_used resets every row).
  globals_careful <- FALSE
  # Set once a row's error was a time limit (setTimeLimit(),
  # setSessionTimeLimit()), which R keeps for the rest of the session: from
  # then on the limits are reset after every row, not only after each block
  # (a reset costs a few microseconds: R reads the process's times).
  limits_careful <- FALSE
  limit_messages <- c(
    "reached elapsed time limit", "reached CPU time limit",
    "reached session elapsed time limit", "reached session CPU time limit"
  )
  reset_limits <- function() {
    .Internal(setTimeLimit(Inf, Inf, FALSE))
    .Internal(setSessionTimeLimit(Inf, Inf))
  }

  # Evaluates the body once per row, each in a fresh environment whose parent
  # is the global one (or one shared environment; see straight_line). One
  # tryCatch per run of good rows in a block, not per row: after an error
  # the loop re-enters at the next row.
  run_rows <- function(rows, problems) {
    n <- length(rows)
    type <- fn$returnType
    convert <- converters[[type]]
    values <- vector(storage[[type]], n)
    # A row is ok unless it fails: fail() and the argument problems clear it.
    ok <- is.na(problems)
    errors <- character(0)
    fail <- function(k, json) {
      errors[[as.character(k - 1L)]] <<- json
      ok[k] <<- FALSE
    }
    for (k in which(!ok)) fail(k, json_error("ValueError", problems[k]))
    skip <- !all(ok)
    # Plain doubles skip the converter call (the common case for numbers).
    plain_number <- type == "number"
    # sink() through .Internal too (its wrapper runs match.arg every time).
    sink_open <- !is.null(capture)
    .Internal(sink(if (sink_open) capture else err, FALSE, FALSE, FALSE))
    on.exit({
      while (.Internal(sink.number(TRUE)) > 0L) .Internal(sink(-1L, FALSE, FALSE, FALSE))
      forward_output()
    })
    # seek() through .Internal: the exported wrapper's argument matching
    # costs more than the rest of a trivial row.
    tell <- if (sink_open) function() .Internal(seek(capture, NA_real_, 1L, 2L)) else function() 0
    position <- 0
    cut_output <- function() {
      seek(capture, position, rw = "write")
      truncate(capture)
      fail(i, json_error("OutputLimit", "output too large", limit = "output"))
    }
    # The end of a block run without per-row checks: whether its rows stand.
    block_clean <- function(begin) {
      # The globals first: a locked .Random.seed is unlocked before it is reset.
      left <- length(genv) != 1L || is.null(genv$.Random.seed) ||
        .Internal(bindingIsLocked(seed_name, genv)) ||
        length(.Internal(search())) != search_length
      if (left) {
        globals_careful <<- TRUE
        restore_globals()
      }
      drew <- !rng_used && !identical(genv$.Random.seed, seed)
      if (drew) {
        rng_used <<- TRUE
        genv$.Random.seed <- seed
      }
      changed <- state_changed() && restore_state()
      !drew && !left && !changed && !limit_hit && tell() - begin <= max_output
    }
    # What a careful row checks after it ran (see block_rows); TRUE when it
    # printed past the cap, which is then its error.
    row_checks <- function() {
      over <- FALSE
      if (limits_careful) reset_limits()
      if (length(genv) != 1L || is.null(genv$.Random.seed) ||
          .Internal(bindingIsLocked(seed_name, genv)) ||
          length(.Internal(search())) != search_length) restore_globals()
      if (careful) {
        # The state is `seed` until a row draws: from then on, reset before each row.
        if (!rng_used && !identical(genv$.Random.seed, seed)) {
          rng_used <<- TRUE
          genv$.Random.seed <- seed
        }
        now <- tell()
        if (now - position > max_output) {
          cut_output()
          now <- tell()
          over <- TRUE
        }
        position <<- now
      }
      if ((careful || state_careful) && state_changed()) restore_state()
      over
    }
    # A row's error, and a row that ended R (extfnQuit, see session_ended):
    # that row fails, and the loop goes on at the next row.
    failed <- function(e) {
      over <- FALSE
      if (limits_careful) reset_limits()
      # A time limit an earlier row of this block set (setTimeLimit()):
      # the block runs again with the limits reset after every row.
      if (!careful && conditionMessage(e) %in% limit_messages) {
        limit_hit <<- TRUE
        limits_careful <<- TRUE
      }
      if (checks &&
          (length(genv) != 1L || is.null(genv$.Random.seed) ||
           .Internal(bindingIsLocked(seed_name, genv)) ||
           length(.Internal(search())) != search_length)) restore_globals()
      if (careful) {
        # A row that drew and then failed leaves the state changed too.
        if (!rng_used && !identical(genv$.Random.seed, seed)) {
          rng_used <<- TRUE
          genv$.Random.seed <- seed
        }
        over <- tell() - position > max_output
      }
      if ((careful || state_careful) && state_changed()) restore_state()
      if (over) {
        cut_output()
      } else if (inherits(e, "OutputLimit")) {
        fail(i, result_error(e)) # a text result past the cap (to_text)
      } else {
        t <- error_text(e)
        if (identical(e$message, "")) t$message <- "error with an empty message"
        fail(i, json_error(t$type, t$message, if (t$type != "ResultTypeError") t$traceback, got = e$got))
      }
      if (careful) position <<- tell()
      i <<- i + 1L
    }
    fresh <- is.null(shared_env)
    env <- shared_env
    first <- 1L
    careful <- FALSE
    while (first <= n) {
      last <- min(first + block_rows - 1L, n)
      begin <- tell()
      position <- begin
      # Per-row checks only where a row may need them: the rest is the least
      # a row costs (its arguments, the body, its result).
      checks <- careful || globals_careful || state_careful || limits_careful
      limit_hit <- FALSE
      i <- first
      while (i <= last) {
        tryCatch(
          withCallingHandlers(
            # list() when the body invoked the "abort" restart: row i fails
            if (!length(guard_abort(while (i <= last) {
              if (skip && !ok[i]) {
                i <- i + 1L
                next
              }
              if (rng_used) genv$.Random.seed <- seed
              if (fresh) env <- .Internal(new.env(FALSE, genv, 0L))
              env$args <- rows[[i]]
              run_body(env)
              if (checks && row_checks()) {
                i <- i + 1L
                next
              }
              r <- env$result
              if (plain_number && is.double(r) && length(r) == 1L && is.null(attributes(r)) && !is.na(r)) {
                values[i] <- r
              } else {
                if (is.null(r) && !exists("result", envir = env, inherits = FALSE)) stop(no_result)
                values[i] <- convert(r)
              }
              i <- i + 1L
            }))) failed(aborted),
            warning = function(w) {
              cat("Warning: ", conditionMessage(w), "\n", sep = "", file = err)
              invokeRestart("muffleWarning")
            }
          ),
          error = failed,
          extfnQuit = function(q) failed(q$condition)
        )
      }
      # Whatever a row set with setTimeLimit() ends with its block (rows
      # before a careful block's end were reset one by one).
      reset_limits()
      if (careful || block_clean(begin)) {
        first <- last + 1L
        careful <- FALSE
      } else {
        # Again, row by row: the block's output, values and errors go.
        again <- first:last
        again <- again[is.na(problems[again])]
        ok[again] <- TRUE
        if (length(errors)) errors <- errors[!(names(errors) %in% as.character(again - 1L))]
        if (sink_open) {
          seek(capture, begin, rw = "write")
          truncate(capture)
        }
        careful <- TRUE
      }
    }
    list(values = values, ok = ok, errors = errors)
  }

  # ---- vectorized bodies ----------------------------------------------------------

  # A vectorized body's result as a vector of the declared type's storage, cell
  # by cell: the common case (a plain vector of the type, no NA) is converted
  # whole; every other cell goes through the per-row converter, so a cell's
  # error reads as a per-row call's would (NA: "got NA (double, R's missing
  # value)"). Returns list(values, errors) with errors named by cell (0-based).
  column_out <- function(r, m) {
    type <- fn$returnType
    # The common number case whole, without a copy: plain doubles, no NA or NaN.
    if (type == "number" && is.double(r) && is.null(attributes(r)) && !anyNA(r)) {
      return(list(values = r, errors = character(0)))
    }
    fast <- rep(FALSE, m)
    values <- vector(storage[[type]], m)
    plain <- r
    if (!is.object(r)) {
      if (type == "number" && (is.double(r) || is.integer(r))) {
        fast <- !is.na(r) | is.nan(r)
      } else if (type == "boolean" && is.logical(r)) {
        fast <- !is.na(r)
      } else if (type == "text" && is.character(r)) {
        plain <- enc2utf8(r)
        fast <- !is.na(plain) & validUTF8(plain) & (validUTF8(r) | Encoding(r) != "unknown") &
          nchar(plain, type = "bytes") <= max_output
      } else if (type == "enum" && (is.double(r) || is.integer(r))) {
        fast <- !is.na(r) & r == round(r) & r >= 0 & r <= 4294967295
      }
    } else if (type == "datetime" && inherits(r, "POSIXct")) {
      plain <- as.double(unclass(r))
      fast <- is.finite(plain) & plain >= start_secs & plain < end_secs
    }
    fast[is.na(fast)] <- FALSE
    if (any(fast)) values[fast] <- as.vector(plain[fast], storage[[type]])
    errors <- character(0)
    convert <- converters[[type]]
    for (i in which(!fast)) {
      v <- tryCatch(convert(cell_of(r, i)), error = function(e) e)
      if (inherits(v, "condition")) {
        errors[[as.character(i - 1L)]] <- result_error(v)
      } else {
        values[i] <- v
      }
    }
    list(values = values, errors = errors)
  }

  # Cell i of a vectorized result as a per-row body returns it: `r[i]`, never
  # `r[[i]]` (a list's cell is a list of one, as a per-row `list(x)` is). `[`
  # keeps the class where the class has a method for it (factor, Date,
  # POSIXct, POSIXlt, AsIs); where it drops it (a class of the body's own
  # with no method, an S4 object, ts), the cell gets back the result's class
  # and attributes, so the converter refuses it as it refuses that object
  # per row (`got myclass 2`) instead of taking the bare number inside.
  cell_of <- function(r, i) {
    cell <- r[i]
    if (is.object(r) && !identical(class(cell), class(r))) {
      cell <- tryCatch(
        {
          bare <- unclass(cell)
          kept <- tryCatch(
            {
              mostattributes(bare) <- attributes(r)
              TRUE
            },
            error = function(e) FALSE
          )
          # an attribute that does not fit one value (a ts's tsp): the class alone
          if (!kept) attr(bare, "class") <- attr(r, "class")
          bare
        },
        error = function(e) cell
      )
    }
    cell
  }

  chunk_error <- function(message, got) {
    json_error("ResultTypeError", message, got = got)
  }

  # Runs a vectorized body once per request on whole columns (vectors). If it
  # fails (or prints past the cap), the rows are run again one by one on
  # columns of length one, so each failing row gets its own error and every
  # other row its value, as per-row calls would.
  # problems: NULL when every row's arguments are good (callf64).
  run_vectorized <- function(columns, problems) {
    n <- if (is.null(problems)) length(columns[[1L]]) else length(problems)
    values <- vector(storage[[fn$returnType]], n)
    errors <- character(0)
    for (k in which(!is.na(problems))) errors[[as.character(k - 1L)]] <- json_error("ValueError", problems[k])
    good <- if (is.null(problems)) seq_len(n) else which(is.na(problems))
    sink_open <- !is.null(capture)
    .Internal(sink(if (sink_open) capture else err, FALSE, FALSE, FALSE))
    on.exit({
      while (.Internal(sink.number(TRUE)) > 0L) .Internal(sink(-1L, FALSE, FALSE, FALSE))
      forward_output()
    })
    tell <- if (sink_open) function() .Internal(seek(capture, NA_real_, 1L, 2L)) else function() 0
    # One run over the rows `at`: list(values, errors) per cell, or
    # list(failure = <error json>, rerun = TRUE when rows alone may do better).
    attempt <- function(at) {
      position <- tell()
      outcome <- tryCatch(
        withCallingHandlers(
          {
            genv$.Random.seed <- seed
            env <- new.env(parent = genv)
            # every row: the columns themselves, no copy
            env$args <- if (length(at) == n) columns else lapply(columns, function(column) column[at])
            # list() when the body invoked the "abort" restart
            ran <- guard_abort(run_body(env))
            if (!length(ran)) list(error = aborted)
            else if (!exists("result", envir = env, inherits = FALSE)) stop(no_result)
            else list(result = env$result)
          },
          warning = function(w) {
            cat("Warning: ", conditionMessage(w), "\n", sep = "", file = err)
            invokeRestart("muffleWarning")
          }
        ),
        error = function(e) list(error = e),
        extfnQuit = function(q) list(error = q$condition)
      )
      reset_limits()
      restore_globals()
      if (state_changed()) restore_state()
      if (tell() - position > max_output) {
        seek(capture, position, rw = "write")
        truncate(capture)
        return(list(failure = json_error("OutputLimit", "output too large", limit = "output"), rerun = TRUE))
      }
      if (!is.null(outcome$error)) {
        t <- error_text(outcome$error)
        if (identical(outcome$error$message, "")) t$message <- "error with an empty message"
        return(list(failure = json_error(t$type, t$message, t$traceback), rerun = TRUE))
      }
      r <- outcome$result
      m <- length(at)
      if (is.null(r) || !(is.atomic(r) || is.list(r)) || !is.null(dim(r))) {
        shape <- dim(r)
        got <- if (is.null(shape)) describe(r) else {
          paste0("a ", paste(shape, collapse = "x"), if (length(shape) == 2L) " matrix" else " array", " of ", typeof(r))
        }
        # A matrix or array is refused even when its cells would do: say how to make it a vector.
        why <- if (is.null(shape)) "" else " (as.vector(result) drops its dimensions)"
        return(list(failure = chunk_error(paste0("a vectorized body returns one vector of ", m, " values, got ", got, why), got), rerun = FALSE))
      }
      if (length(r) != m) {
        return(list(
          failure = chunk_error(
            paste0("a vectorized body returns one value per row: ", m, " rows, got ", length(r), " values"),
            paste("a vector of", length(r), "values")
          ),
          rerun = FALSE
        ))
      }
      column_out(r, m)
    }
    place <- function(at, result) {
      if (!is.null(result$failure)) {
        for (k in at) errors[[as.character(k - 1L)]] <<- result$failure
        return(invisible())
      }
      if (length(at) == n) values <<- result$values else values[at] <<- result$values
      if (length(result$errors)) {
        rows <- at[as.integer(names(result$errors)) + 1L]
        errors[as.character(rows - 1L)] <<- unname(result$errors)
      }
    }
    if (length(good)) {
      whole <- attempt(good)
      if (!is.null(whole$failure) && whole$rerun && length(good) > 1L) {
        if (sink_open) {
          seek(capture, 0, rw = "write")
          truncate(capture)
        }
        for (k in good) place(k, attempt(k))
      } else {
        place(good, whole)
      }
    }
    ok <- rep(TRUE, n)
    if (length(errors)) ok[as.integer(names(errors)) + 1L] <- FALSE
    list(values = values, ok = ok, errors = errors)
  }

  # A large vectorized chunk leaves megabyte vectors behind (its columns, the
  # body's temporaries, the result). A minor collection (1-2 ms) frees them at
  # once, so the next chunk's vectors reuse pages already touched (glibc keeps
  # them: MALLOC_MMAP_THRESHOLD_ in R_ENV) instead of fresh ones, whose first
  # touch costs ~10 us a page on a VM (20 ms per 8 MB column). A full gc()
  # would cost 25-40 ms; small chunks leave too little to pay for either.
  reclaim <- function(n) if (n >= 65536L) invisible(base::gc(verbose = FALSE, full = FALSE))

  # A column read per row (read_column) as the vector a vectorized body gets.
  as_vector <- function(type, values) {
    switch(type,
      datetime = .POSIXct(vapply(values, unclass, 0), tz = "UTC"),
      enum = vapply(values, as.double, 0),
      values
    )
  }

  # ---- requests -----------------------------------------------------------------

  # The rows of a call frame are read column by column: every token inside
  # "rows" that is not punctuation is a value, row-major.
  call_rows <- function(tokens) {
    first <- substr(tokens, 1L, 1L)
    depth <- cumsum((first == "[" | first == "{") - (first == "]" | first == "}"))
    key <- which(tokens == '"rows"' & depth == 1L)
    if (length(key) != 1L || tokens[key + 1L] != ":" || tokens[key + 2L] != "[") stop("a call frame needs rows")
    open <- key + 2L
    close <- open + match(TRUE, depth[(open + 1L):length(depth)] == 1L)
    span <- if (close - open > 1L) (open + 1L):(close - 1L) else integer(0)
    n_rows <- sum(first[span] == "[")
    value_tokens <- tokens[span][!(first[span] %in% c("[", "]", ","))]
    # Only the id is needed from the rest of the frame.
    id_at <- which(tokens == '"id"' & depth == 1L)
    id <- if (length(id_at) == 1L && tokens[id_at + 1L] == ":") as.numeric(tokens[id_at + 2L]) else NULL
    arity <- length(fn$argTypes)
    if (length(value_tokens) != n_rows * arity) stop("every row needs ", arity, " argument(s)")
    problems <- rep(NA_character_, n_rows)
    columns <- vector("list", arity)
    for (a in seq_len(arity)) {
      column <- read_column(fn$argTypes[[a]], value_tokens[seq.int(a, by = arity, length.out = n_rows)])
      columns[[a]] <- column$values
      bad <- !is.na(column$problems) & is.na(problems)
      problems[bad] <- paste0(fn$argTypes[[a]], " argument ", a, " ", column$problems[bad])
    }
    arguments(id, columns, problems, n_rows, vectors = FALSE)
  }

  # A request's arguments as the runners take them: whole columns (vectors)
  # for a vectorized body, else rows. `columns` are read_column's values, or
  # vectors (a callcols request) when `vectors`.
  arguments <- function(id, columns, problems, n_rows, vectors) {
    types <- fn$argTypes
    if (isTRUE(fn$vectorized)) {
      for (a in seq_along(types)) {
        if (!vectors) columns[[a]] <- as_vector(types[[a]], columns[[a]])
        else if (types[[a]] == "datetime") columns[[a]] <- .POSIXct(columns[[a]], tz = "UTC")
      }
      return(list(header = list(id = id), columns = columns, problems = problems))
    }
    if (vectors) for (a in seq_along(types)) columns[[a]] <- row_values(types[[a]], columns[[a]])
    rows <- if (!length(types)) rep(list(list()), n_rows) else .mapply(list, columns, NULL)
    list(header = list(id = id), rows = rows, problems = problems)
  }

  # A column vector (as_vector's form) as read_column's values.
  row_values <- function(type, v) {
    switch(type,
      datetime = lapply(v, .POSIXct, tz = "UTC"),
      enum = enum_values(v),
      v
    )
  }

  # ---- callcols: binary columns of every type -----------------------------------

  pad8 <- function(n) ceiling(n / 8) * 8
  two32 <- 4294967296

  # 32-bit cells read signed; R reads the bits of INT_MIN as NA.
  int32s <- function(bytes, n) {
    v <- as.double(readBin(bytes, "integer", n, size = 4L, endian = "little"))
    v[is.na(v)] <- -2147483648
    v
  }

  # i64 nanoseconds (two 32-bit halves) as the seconds a JSON instant with
  # the same digits parses to: whole seconds, split exactly in doubles (every
  # partial sum below 2^53), plus the fraction read from its decimal digits
  # as parse_instants reads it (R rounds "0.123456789" through a long double,
  # which is not always the double nearest nanos / 1e9).
  ns_to_secs <- function(lo, hi) {
    lo <- lo + (lo < 0) * two32
    a <- floor(hi / 1e6)
    r1 <- (hi - a * 1e6) * two32 + lo
    q1 <- floor(r1 / 1e6)
    ms <- a * two32 + q1
    whole <- floor(ms / 1000)
    nanos <- (ms - whole * 1000) * 1e6 + (r1 - q1 * 1e6)
    fraction <- nanos
    some <- nanos != 0
    if (any(some)) fraction[some] <- as.numeric(sprintf("0.%09.0f", nanos[some]))
    whole + fraction
  }

  # Seconds as i64 nanoseconds, the instant json_instants would write:
  # 32-bit halves interleaved (low first), and which rows i64 cannot hold.
  secs_to_ns <- function(secs) {
    p <- instant_parts(secs)
    f <- p$units * 10^(9 - p$digits)
    wh <- floor(p$whole / 65536)
    A <- wh * 1e9
    L <- (p$whole - wh * 65536) * 1e9 + f
    Ah <- floor(A / 65536)
    T <- (A - Ah * 65536) * 65536 + L
    Th <- floor(T / two32)
    lo <- T - Th * two32
    hi <- Ah + Th
    outside <- hi < -2147483648 | hi > 2147483647
    lo[outside] <- 0
    hi[outside] <- 0
    lo[lo >= 2147483648] <- lo[lo >= 2147483648] - two32
    list(words = suppressWarnings(as.integer(rbind(lo, hi))), outside = outside)
  }

  # A text column's strings: one rawToChar, then substring() by byte
  # position (O(1) each on a "bytes" string). R strings cannot hold NUL:
  # such a row gets the JSON path's problem.
  texts_in <- function(bytes, lengths) {
    n <- length(lengths)
    ends <- cumsum(lengths)
    starts <- ends - lengths + 1
    problems <- rep(NA_character_, n)
    zero <- which(bytes == as.raw(0L))
    if (length(zero)) {
      problems[findInterval(zero, starts)] <- "contains a NUL character, which R strings cannot hold"
      bytes[zero] <- as.raw(0x20L)
    }
    whole <- rawToChar(bytes)
    Encoding(whole) <- "bytes"
    s <- substring(whole, starts, ends)
    Encoding(s) <- "UTF-8"
    invalid <- is.na(problems) & !validUTF8(s)
    problems[invalid] <- "is not valid UTF-8"
    s[!is.na(problems)] <- NA_character_
    list(values = s, problems = problems)
  }

  # A callcols payload (raw) as argument vectors, as_vector's form, and
  # per-row problems. Cells the columns could not hold come as JSON tokens
  # in `cells` and are read as call arguments are.
  cols_in <- function(payload, n, cells) {
    types <- fn$argTypes
    columns <- vector("list", length(types))
    problems <- rep(NA_character_, n)
    at <- 0
    take <- function(size) {
      if (at + size > length(payload)) stop("a callcols payload shorter than its columns")
      bytes <- if (size > 0) payload[(at + 1):(at + size)] else raw(0)
      at <<- at + size
      bytes
    }
    for (a in seq_along(types)) {
      start <- at
      type <- types[[a]]
      why <- NULL
      columns[[a]] <- switch(type,
        number = {
          v <- readBin(take(8 * n), "double", n, size = 8L, endian = "little")
          # Any NaN payload (R's NA among them) is the NaN a JSON row would bring.
          if (anyNA(v)) v[is.na(v)] <- NaN
          v
        },
        boolean = take(n) != as.raw(0L),
        enum = {
          v <- int32s(take(4 * n), n)
          v + (v < 0) * two32
        },
        datetime = {
          w <- int32s(take(8 * n), 2 * n)
          ns_to_secs(w[c(TRUE, FALSE)], w[c(FALSE, TRUE)])
        },
        text = {
          lengths <- int32s(take(4 * n), n)
          if (any(lengths < 0)) stop("a callcols text length past 2^31")
          t <- texts_in(take(sum(lengths)), lengths)
          why <- t$problems
          t$values
        },
        stop("unknown argument type ", type)
      )
      take(pad8(at - start) - (at - start))
      given <- cells[[as.character(a - 1L)]]
      if (length(given)) {
        rows <- as.integer(names(given)) + 1L
        if (any(is.na(rows) | rows < 1L | rows > n)) stop("a callcols cell outside the rows")
        cell <- read_column(type, unlist(given, use.names = FALSE))
        columns[[a]][rows] <- as_vector(type, cell$values)
        if (is.null(why)) why <- rep(NA_character_, n)
        why[rows] <- cell$problems
      }
      if (!is.null(why)) {
        hit <- !is.na(why) & is.na(problems)
        problems[hit] <- paste0(type, " argument ", a, " ", why[hit])
      }
    }
    if (at != length(payload)) stop("a callcols payload longer than its columns")
    list(columns = columns, problems = problems)
  }

  errors_json <- function(errors) {
    if (!length(errors)) return("{}")
    paste0('{', paste0('"', names(errors), '":', errors, collapse = ","), '}')
  }

  # docs/protocol.md, "workMs": this worker's own time on the request (from
  # reading its line), so the host sizes chunks by the work, not by how soon
  # it got to the answer.
  began <- 0
  work_ms <- function() sprintf(',"workMs":%.3f', (as.numeric(Sys.time()) - began) * 1000)

  # result: list(values (the return type's storage), ok, errors (JSON by 0-based row)).
  respond_call <- function(id, result) {
    ok <- result$ok
    wire <- rep("null", length(ok))
    if (any(ok)) wire[ok] <- write_values(fn$returnType, result$values[ok])
    frame(paste0('{"id":', id, ',"values":[', paste(wire, collapse = ","), '],"errors":', errors_json(result$errors), work_ms(), "}"))
  }

  # A callf64 answer: the results as raw little-endian f64 after the header
  # (the value at a failed row is ignored), or as JSON values without a binary stdout.
  respond_f64 <- function(id, result, shm = NULL) {
    if (!binary) return(respond_call(id, result))
    n <- length(result$ok)
    if (!is.null(shm) && 8 * n <= shm$room) {
      # the results where the host reads them, the header on the pipe
      only_the_worker()
      seek(shared, shm$out, rw = "write")
      writeBin(result$values, shared, size = 8L, endian = "little")
      flush(shared)
      return(frame(paste0('{"id":', id, ',"rows":', n, ',"shm":', sprintf("%.0f", 8 * n), ',"errors":', errors_json(result$errors), work_ms(), "}")))
    }
    frame(paste0('{"id":', id, ',"rows":', n, ',"bytes":', sprintf("%.0f", 8 * n), ',"errors":', errors_json(result$errors), work_ms(), "}"), result$values)
  }

  # A result column in the callcols layout (the value at a failed row is 0
  # or empty): payload parts, their size, and the cells the column cannot
  # hold (a datetime outside i64 nanoseconds, as its ISO text).
  cols_out <- function(result) {
    v <- result$values
    ok <- result$ok
    n <- length(ok)
    cells <- character(0)
    zeros <- function(size) raw(pad8(size) - size)
    parts <- switch(fn$returnType,
      number = list(as.double(v)),
      boolean = {
        v[!ok | is.na(v)] <- FALSE
        list(as.raw(v), zeros(n))
      },
      enum = {
        v[!ok] <- 0
        v[v >= 2147483648] <- v[v >= 2147483648] - two32
        list(suppressWarnings(as.integer(v)), zeros(4 * n))
      },
      datetime = {
        v[!ok] <- 0
        ns <- secs_to_ns(v)
        far <- which(ns$outside & ok)
        if (length(far)) cells[as.character(far - 1L)] <- json_instants(v[far])
        list(ns$words)
      },
      text = {
        v[!ok] <- ""
        lengths <- nchar(v, type = "bytes")
        bytes <- charToRaw(paste0(v, collapse = ""))
        # paste0 may translate a string marked in another encoding: then one by one.
        if (length(bytes) != sum(lengths)) bytes <- unlist(lapply(v, charToRaw))
        list(lengths, bytes, zeros(4 * n + length(bytes)))
      }
    )
    size <- sum(vapply(parts, function(p) length(p) * if (is.double(p)) 8 else if (is.integer(p)) 4 else 1, 0))
    list(parts = parts, size = size, cells = cells)
  }

  # A callcols answer: the result column after the header, or JSON values
  # (as for call) without a binary stdout; the runner reads both.
  respond_cols <- function(id, result) {
    if (!binary) return(respond_call(id, result))
    column <- cols_out(result)
    frame(paste0(
      '{"id":', id, ',"rows":', length(result$ok), ',"bytes":', sprintf("%.0f", column$size),
      ',"errors":', errors_json(result$errors),
      if (length(column$cells)) paste0(',"cells":', errors_json(column$cells)), work_ms(), "}"
    ), column$parts)
  }

  id_text <- function(id) if (is.null(id)) "null" else sprintf("%.0f", id)

  # The id of a request that failed before it was read (a call before load, a
  # call whose rows do not fit), from its tokens, so its answer is still the
  # answer to that request; NULL when it has no plain numeric id.
  token_id <- function(tokens) {
    first <- substr(tokens, 1L, 1L)
    depth <- cumsum((first == "[" | first == "{") - (first == "]" | first == "}"))
    at <- which(tokens == '"id"' & depth == 1L)
    at <- at[tokens[at + 1L] %in% ":"]
    value <- if (length(at) == 1L) tokens[at + 2L] else NA_character_
    if (!is.na(value) && grepl("^[0-9]{1,15}$", value)) as.numeric(value) else NULL
  }

  # The build's compiled copies, in place of the definitions above (same code).
  for (name in intersect(names(precompiled), hot_functions)) {
    f <- precompiled[[name]]
    if (identical(environment(f), environment(warm_up))) assign(name, f, envir = environment(warm_up))
  }
  rm(precompiled)

  frame(paste0('{"ready":1,"protocol":1,"version":', json_strings(R.version.string), if (!is.null(shared)) ',"shared":["callf64"]', "}"))

  repeat {
    line <- readLines(con, n = 1L, warn = FALSE)
    pending <- NULL
    in_rows <- FALSE
    if (!length(line)) break
    if (!nzchar(line)) next
    began <- as.numeric(Sys.time())
    tokens <- tokenize(line)
    # The op and id come first in frames the JS side writes, but read them
    # wherever they are.
    op <- if (any(tokens == '"op"')) tokens[match('"op"', tokens) + 2L] else ""
    is_call <- op == '"call"'
    request <- NULL
    outcome <- tryCatch(
      {
        if (is_call) {
          if (is.null(fn)) stop("call before load")
          parsed <- call_rows(tokens)
          request <- parsed$header
          # The rows run below, out of this tryCatch, as every other op's do:
          # the body then starts at the same depth of R's evaluation and of
          # the C stack on every path, so a row near R's limits (a deep
          # recursion) gives the same result through eval and through batches.
          list(op = "call", parsed = parsed)
        } else if (op == '"callcols"') {
          # String values stay tokens: cells are read as call arguments are.
          request <- read_json(tokens, raw_strings = TRUE)
          list(op = "callcols")
        } else {
          request <- read_json(tokens)
          list(op = request$op)
        }
      },
      error = function(e) list(op = "error", message = conditionMessage(e))
    )
    id <- id_text(if (is.null(request) && identical(outcome$op, "error")) token_id(tokens) else request$id)
    # A request with rows to run leaves them in `job`, run below, from one
    # place for every op (see the call branch above).
    job <- NULL
    if (identical(outcome$op, "call")) {
      job <- outcome$parsed
      job$n <- length(job$problems)
      job$respond <- function(result) respond_call(id, result)
    } else if (identical(outcome$op, "load")) {
      loaded <- tryCatch(
        {
          load_fn(request)
          NULL
        },
        error = function(e) e
      )
      if (is.null(loaded)) {
        frame(paste0('{"id":', id, ',"ok":true}'))
      } else {
        frame(paste0('{"id":', id, ',"error":', json_error("SyntaxError", conditionMessage(loaded)), "}"))
      }
    } else if (identical(outcome$op, "callf64")) {
      # Binary f64 columns in (column-major, little-endian), binary f64 out.
      # In the shared file (shm: the result's offset and room, the payload's offset and bytes) or on the pipe.
      shm <- if (!is.null(shared) && is.list(request$shm)) request$shm
      bytes <- if (!is.null(shm)) shm$bytes else if (is.null(request$bytes)) 0 else request$bytes
      n_rows <- if (is.null(request$rows)) 0L else as.integer(request$rows)
      arity <- if (is.null(fn)) 0L else length(fn$argTypes)
      if (!is.null(shm)) seek(shared, shm$at, rw = "read")
      source <- if (is.null(shm)) con else shared
      if (is.null(fn) || !is.numeric(bytes) || bytes != 8 * n_rows * arity || any(unlist(fn$argTypes) != "number")) {
        # read past the payload, so the next frame starts where it should
        if (is.null(shm) && bytes > 0) readBin(con, "raw", bytes)
        frame(paste0('{"id":', id, ',"error":', json_error("ProtocolError", "callf64 needs a loaded all-number function and rows x arity doubles"), "}"))
      } else {
        # One read per column: no split, no copy.
        columns <- lapply(seq_len(arity), function(a) {
          column <- readBin(source, "double", n_rows, size = 8L, endian = "little")
          # a shared file the body cut short: the worker stops (the host kills it anyway)
          if (length(column) != n_rows) stop("the shared file was cut short")
          # Any NaN payload (R's NA among them) is the NaN a JSON row would bring.
          if (anyNA(column)) column[is.na(column)] <- NaN
          column
        })
        job <- if (isTRUE(fn$vectorized)) list(columns = columns, problems = NULL)
        else list(rows = .mapply(list, columns, NULL), problems = rep(NA_character_, n_rows))
        rm(columns)
        job$n <- n_rows
        job$respond <- function(result) respond_f64(id, result, shm)
      }
    } else if (identical(outcome$op, "callcols")) {
      # Binary columns of every type in (docs/protocol.md), one result column out.
      bytes <- if (is.numeric(request$bytes)) request$bytes else 0
      n_rows <- if (is.numeric(request$rows)) as.integer(request$rows) else 0L
      payload <- if (bytes > 0) readBin(con, "raw", bytes) else raw(0)
      parsed <- tryCatch(
        {
          if (is.null(fn)) stop("callcols before load")
          if (length(payload) != bytes) stop("a callcols payload cut short")
          read <- cols_in(payload, n_rows, request$cells)
          rm(payload)
          arguments(id, read$columns, read$problems, n_rows, vectors = TRUE)
        },
        error = function(e) e
      )
      if (inherits(parsed, "condition")) {
        frame(paste0('{"id":', id, ',"error":', json_error("ProtocolError", conditionMessage(parsed)), "}"))
      } else {
        job <- parsed
        rm(parsed)
        job$n <- n_rows
        job$respond <- function(result) respond_cols(id, result)
      }
    } else if (identical(outcome$op, "exit")) {
      break
    } else {
      message <- if (identical(outcome$op, "error")) outcome$message else paste("unknown op", format(outcome$op))
      # A callcols header that could not be read: skip its payload all the same.
      if (op == '"callcols"' && any(tokens == '"bytes"')) {
        skip <- suppressWarnings(as.numeric(tokens[match('"bytes"', tokens) + 2L]))
        if (!is.na(skip) && skip > 0) readBin(con, "raw", skip)
      }
      frame(paste0('{"id":', id, ',"error":', json_error("ProtocolError", message), "}"))
    }
    if (!is.null(job)) {
      warm_up(job$n)
      pending <- list(id = id, rows = job$n)
      in_rows <- TRUE
      result <- if (is.null(job$columns)) run_rows(job$rows, job$problems)
      else run_vectorized(job$columns, job$problems)
      in_rows <- FALSE
      job$respond(result)
      if (!is.null(job$columns)) {
        n <- job$n
        rm(job, result)
        reclaim(n)
      }
    }
  }
  pending <- NULL
  if (!is.null(capture)) close(capture)
  .Internal(quit("no", 0L, FALSE))
}))
