/* core/split.h: --split SPEC -> weft_split_part[] with the devices open. */
#include "core/split.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void weft_split_close(struct weft_split *s)
{
    for (uint32_t i = 0; i < s->n_owned; i++) weft_backend_close(s->owned[i]);
    memset(s, 0, sizeof *s);
}

weft_status weft_split_open(const char *spec, int n_threads, struct weft_split *out)
{
    memset(out, 0, sizeof *out);
    char buf[512], *save = NULL;
    if (!spec || snprintf(buf, sizeof buf, "%s", spec) >= (int)sizeof buf)
        return weft_error(WEFT_ERR_INVALID_ARG, "--split value too long");
    char names[WEFT_MAX_PARTS][64];
    weft_status st = WEFT_OK;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strrchr(tok, '=');
        char *end = NULL;
        long n = eq ? strtol(eq + 1, &end, 10) : 0;
        bool rest = !eq && (!save || !*save);  /* the last device without =N: the rest */
        if (!rest && (!eq || eq == tok || !end || *end || eq[1] == '\0' || n < 1 || n > 100000)) {
            st = weft_error(WEFT_ERR_INVALID_ARG, "--split expects DEVICE=LAYERS,...[,DEVICE] (e.g. cpu=2,vulkan:0=3 "
                            "or cpu=2,vulkan:0), got '%s'", tok);
            goto fail;
        }
        if (eq) *eq = '\0';
        if (strlen(tok) >= sizeof names[0]) {
            st = weft_error(WEFT_ERR_INVALID_ARG, "--split: device name '%s' too long", tok);
            goto fail;
        }
        if (out->n_parts == WEFT_MAX_PARTS) {
            st = weft_error(WEFT_ERR_INVALID_ARG, "--split takes at most %d parts", WEFT_MAX_PARTS);
            goto fail;
        }
        struct weft_backend *be = NULL;
        for (uint32_t i = 0; i < out->n_parts && i < WEFT_MAX_PARTS; i++)
            if (!strcmp(names[i], tok)) be = out->parts[i].be;
        if (!be) {
            if ((st = weft_backend_open(tok, n_threads, &be)) != WEFT_OK) goto fail;
            out->owned[out->n_owned++] = be;
        }
        snprintf(names[out->n_parts], sizeof names[0], "%s", tok);
        out->parts[out->n_parts++] = (struct weft_split_part){be, (uint32_t)n};
    }
    if (out->n_parts == 0) {
        st = weft_error(WEFT_ERR_INVALID_ARG, "--split needs at least one DEVICE=LAYERS");
        goto fail;
    }
    return WEFT_OK;
fail:
    weft_split_close(out);
    return st;
}
