/* Linked into every backend module (never into the weft binary): the core
 * error functions a backend calls, forwarded to the host that loaded it. */
#include "backends/module.h"

const struct weft_module_host *weft_module_host_;

weft_status weft_error(weft_status s, const char *fmt, ...)
{
    if (!weft_module_host_) return s;
    va_list ap;
    va_start(ap, fmt);
    weft_status r = weft_module_host_->verror(s, fmt, ap);
    va_end(ap);
    return r;
}

const char *weft_status_str(weft_status s)
{
    return weft_module_host_ ? weft_module_host_->status_str(s) : "unknown status";
}
