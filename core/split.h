/* A layer split written as text ("cpu=10,vulkan:0=20", "cpu=2,vulkan:0"):
 * the --split of weft run, chat, serve and bench, parsed and its devices
 * opened here, so every tool and program places layers the same way. */
#ifndef WEFT_SPLIT_H
#define WEFT_SPLIT_H

#include "core/model.h"

/* The parts of a split (for weft_model_load_split) and the backends opened
 * for them: a device named twice is opened once and appears in both parts. */
struct weft_split {
    struct weft_split_part parts[WEFT_MAX_PARTS];
    uint32_t n_parts;
    struct weft_backend *owned[WEFT_MAX_PARTS];  /* closed by weft_split_close */
    uint32_t n_owned;
};

/* Parse spec — DEVICE=LAYERS parts separated by ',', in layer order; the last
 * DEVICE may omit =LAYERS to take the rest (n_layer 0) — and open each
 * device with n_threads (CPU) and the process's options. On failure
 * (WEFT_ERR_INVALID_ARG with a message quoting the bad part, or the open's
 * status) nothing is left open and out is empty. */
weft_status weft_split_open(const char *spec, int n_threads, struct weft_split *out);
/* Close the split's backends (after the model that uses them is freed). */
void weft_split_close(struct weft_split *s);

#endif
