#!/usr/bin/env bash
# Every symbol weft's libraries define for the linker starts with weft_, so
# none lands in a dependency's namespace (jansson's json_*, http-parser's
# http_*, libpng's png_*, libuv's uv_*, ...) or in a program's that links weft.
#   scripts/check-symbols.sh LIB...
# LIB: a static library (.a: its global definitions) or a shared one / backend
# module (.so: what it exports to the dynamic linker). C++ names (the HIP
# kernels' templates) are checked demangled. main (tools/main.c is no library)
# and the toolchain's reserved names (leading underscore, after demangling) are
# left out. Prints each offender with its library and exits 1 if there is any.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: scripts/check-symbols.sh LIB..." >&2; exit 2; }
bad=0 checked=0
for lib in "$@"; do
    [ -f "$lib" ] || { echo "check-symbols: $lib: no such file" >&2; exit 2; }
    case $lib in
        *.a) syms=$(nm -g --defined-only "$lib" | awk 'NF == 3 && $2 ~ /^[TDBRVWCGSui]$/ {print $3}') ;;
        *.so) syms=$(nm -D --defined-only "$lib" | awk 'NF == 3 && $2 ~ /^[TDBRVWiu]$/ {print $3}') ;;
        *) echo "check-symbols: $lib: neither a static library (.a) nor a shared one (.so)" >&2; exit 2 ;;
    esac
    # a library that defines nothing for the linker was not read (or not built as meant)
    [ -n "$syms" ] || { echo "check-symbols: $(basename "$lib"): no symbols read"; bad=$((bad + 1)); continue; }
    while IFS= read -r s; do
        [ -n "$s" ] || continue
        checked=$((checked + 1))
        name=$s
        if [[ $s == _Z* ]]; then
            # "void weft_k_gemm_lds<12>(unsigned char const*, ...)" -> weft_k_gemm_lds: the
            # name is what comes before the outermost "(" and the template's "<", after the
            # return type; a name c++filt cannot read stays _Z... and counts as outside
            name=$(printf '%s\n' "$s" | c++filt | sed -E 's/\(.*//' | awk '{
                d = 0; out = ""
                for (i = 1; i <= length($0); i++) {
                    ch = substr($0, i, 1)
                    if (ch == "<") d++
                    else if (ch == ">") d--
                    else if (d == 0) out = out ch
                }
                n = split(out, w, " "); print w[n] }')
            [[ $name == _Z* ]] && name="$s (not demangled)"
        fi
        case $name in
            weft_* | main) ;;
            _Z*) echo "check-symbols: $(basename "$lib"): '$name' is not in weft's namespace (weft_)"; bad=$((bad + 1)) ;;
            _*) ;;
            *) echo "check-symbols: $(basename "$lib"): '$name' is not in weft's namespace (weft_)"; bad=$((bad + 1)) ;;
        esac
    done <<< "$syms"
done
echo "check-symbols: $checked symbols in $# libraries, $bad outside weft_"
[ "$bad" = 0 ]
