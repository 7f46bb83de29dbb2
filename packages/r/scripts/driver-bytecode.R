# Byte-compiles the driver's hot functions for `pnpm build`
# (scripts/driver-bytecode.mjs): the row loop and the per-request code of
# drivers/driver.R, each compiled on its own and serialized (ASCII) as one
# named list, written as an R string literal after one header line saying
# which R made it. Arguments: the driver's path, the output path, the
# driver's SHA-256 (recorded in the header).
args <- commandArgs(trailingOnly = TRUE)
driver <- parse(args[[1L]], keep.source = FALSE, encoding = "UTF-8")[[1L]]
# driver.R is `function(con, precompiled = NULL) eval(envir = <hashed env>, quote({ ... }))`
call <- driver[[3L]]
if (!identical(call[[1L]], as.name("eval")) || !identical(call[[3L]][[1L]], as.name("quote"))) {
  stop("drivers/driver.R no longer has the shape function(con, precompiled) eval(envir = ..., quote({...}))")
}
block <- as.list(call[[3L]][[2L]])[-1L]
definitions <- list()
for (e in block) {
  if (is.call(e) && identical(e[[1L]], as.name("<-")) && is.name(e[[2L]])) {
    definitions[[as.character(e[[2L]])]] <- e[[3L]]
  }
}
# The compiler inlines base functions by name: no top-level definition may shadow one.
shadowing <- intersect(names(definitions), ls(baseenv(), all.names = TRUE))
if (length(shadowing)) stop("the driver redefines base names: ", paste(shadowing, collapse = ", "))
# What the driver would otherwise compile itself (warm_up), in its order.
# All in one environment, serialized with them: the worker's driver runs in
# it (R drops a closure's bytecode when its environment is replaced).
hot <- eval(definitions$hot_functions, baseenv())
home <- new.env(parent = baseenv())
compiled <- lapply(hot, function(name) {
  f <- eval(definitions[[name]], home)
  if (!is.function(f)) stop("the driver defines no function ", name)
  compiler::cmpfun(f)
})
names(compiled) <- hot
text <- rawToChar(serialize(compiled, NULL, ascii = TRUE))
header <- sprintf(
  '{"r":%s,"bytecode":%d,"sha256":"%s"}',
  encodeString(R.version.string, quote = '"'), .Internal(bcVersion()), args[[3L]]
)
writeLines(c(header, encodeString(text, quote = '"')), args[[2L]], useBytes = TRUE)
