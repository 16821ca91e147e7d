/* weft status codes and the per-thread error message.
 *
 * Every library function that can fail returns an enum weft_status: 0 is
 * success, negative values are failures. A failing function also records one
 * human-readable line (what is wrong, naming the file/key/tensor concerned)
 * that weft_last_error() returns until the next failure on the same thread. */
#ifndef WEFT_STATUS_H
#define WEFT_STATUS_H

#include <stdarg.h>

#define WEFT_STATUS_LIST(X)                                              \
    X(OK,            0,   "ok")                                          \
    X(ERR_NOMEM,     -1,  "out of memory")                               \
    X(ERR_IO,        -2,  "I/O error")                                   \
    X(ERR_FORMAT,    -3,  "malformed input")                             \
    X(ERR_UNSUPPORTED, -4, "unsupported")                                \
    X(ERR_INVALID_ARG, -5, "invalid argument")                           \
    X(ERR_NOT_FOUND, -6,  "not found")                                   \
    X(ERR_NO_DEVICE, -7,  "no such device")                              \
    X(ERR_DEVICE,    -8,  "device error")                                \
    X(ERR_NO_ROOM,   -9,  "no room (KV cache full)")                     \
    X(ERR_CONTEXT,   -10, "context length exceeded")                     \
    X(ERR_TYPE,      -11, "wrong value type")                            \
    X(ERR_BUSY,      -12, "busy (queue full)")                           \
    X(ERR_QUOTA,     -13, "over quota")                                 \
    X(ERR_MISMATCH,  -14, "made for another model or shape")          \
    X(ERR_AUTH,      -15, "not authenticated")

enum weft_status {
#define WEFT_X_(name, val, str) WEFT_##name = val,
    WEFT_STATUS_LIST(WEFT_X_)
#undef WEFT_X_
};
typedef enum weft_status weft_status;

/* Static string for a status code; never NULL. */
const char *weft_status_str(weft_status s);

/* Record the error line for this thread (printf-style) and return `s`, so a
 * failure path reads `return weft_error(WEFT_ERR_FORMAT, "...", ...);`. */
weft_status weft_error(weft_status s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

weft_status weft_verror(weft_status s, const char *fmt, va_list ap);

/* The last error line recorded on this thread ("" if none). Valid until the
 * next weft_error() on the same thread. */
const char *weft_last_error(void);
void weft_clear_error(void);

#endif
