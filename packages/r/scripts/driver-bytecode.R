# Byte-compiles the driver for `pnpm build` (scripts/driver-bytecode.mjs):
# the block drivers/driver.R evaluates in its hashed environment, compiled
# and serialized (ASCII) as an R string literal, after one header line
# saying which R made it. Arguments: the driver's path, the output path,
# the driver's SHA-256 (recorded in the header).
args <- commandArgs(trailingOnly = TRUE)
driver <- parse(args[[1L]], keep.source = FALSE, encoding = "UTF-8")[[1L]]
# driver.R is `function(con) eval(envir = <hashed env>, quote({ ... }))`
call <- driver[[3L]]
if (!identical(call[[1L]], as.name("eval")) || !identical(call[[3L]][[1L]], as.name("quote"))) {
  stop("drivers/driver.R no longer has the shape function(con) eval(envir = ..., quote({...}))")
}
block <- call[[3L]][[2L]]
# The compiler inlines base functions by name: no top-level definition may shadow one.
assigned <- unlist(lapply(as.list(block)[-1L], function(e) {
  if (is.call(e) && identical(e[[1L]], as.name("<-")) && is.name(e[[2L]])) as.character(e[[2L]])
}))
shadowing <- intersect(assigned, ls(baseenv(), all.names = TRUE))
if (length(shadowing)) stop("the driver redefines base names: ", paste(shadowing, collapse = ", "))
code <- compiler::compile(block, new.env(parent = baseenv()))
text <- rawToChar(serialize(code, NULL, ascii = TRUE))
header <- sprintf(
  '{"r":%s,"bytecode":%d,"sha256":"%s"}',
  encodeString(R.version.string, quote = '"'), .Internal(bcVersion()), args[[3L]]
)
writeLines(c(header, encodeString(text, quote = '"')), args[[2L]], useBytes = TRUE)
