#include "base/status.h"

#include <stdio.h>

static _Thread_local char last_error[512];

const char *weft_status_str(weft_status s)
{
    switch (s) {
#define WEFT_X_(name, val, str) case WEFT_##name: return str;
        WEFT_STATUS_LIST(WEFT_X_)
#undef WEFT_X_
    }
    return "unknown status";
}

weft_status weft_verror(weft_status s, const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    return s;
}

weft_status weft_error(weft_status s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    weft_verror(s, fmt, ap);
    va_end(ap);
    return s;
}

const char *weft_last_error(void) { return last_error; }
void weft_clear_error(void) { last_error[0] = '\0'; }
